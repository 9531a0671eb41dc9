"""The decision benchmark: does specpilot's autotuner serve better than a static configuration? (docs/benchmarks.md)

scenarios and oracles are pure; runner drives the simulator on a virtual clock; specpilot_policy is the one adapter
to the operator's policy code; report prints tables and draws plots; calibration compares the simulator with the
published measurements.
"""
