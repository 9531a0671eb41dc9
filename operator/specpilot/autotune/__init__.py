"""The autotuner (pure): signals (queries, measurements), model (step cost, gain, payback), policy (decision)."""
