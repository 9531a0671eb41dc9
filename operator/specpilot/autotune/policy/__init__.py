"""The decision: proposals from the model, gates in a fixed order, one intent."""
