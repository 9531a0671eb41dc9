"""The operator process: kopf handlers, the autotune round, leadership and the operator's own metrics (wiring)."""
