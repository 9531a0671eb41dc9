"""Planning (pure): the model catalog, the memory budget of target and draft, draft/target checks."""
