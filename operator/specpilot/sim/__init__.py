"""A vLLM V1 replica simulator: a pure engine model (presets, acceptance, engine, metrics) and an HTTP shell (server).

The model is deterministic under a seed and runs on a virtual clock, so the benchmark can push hours of traffic
through it in seconds; the server drives the same model on the wall clock and serves vLLM's /metrics.
"""
