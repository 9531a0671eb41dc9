"""`specpilot report`: is speculation helping this deployment, at its real load? Measured the way the seed advises.

Acceptance as a distribution across windows (P10/P50/P90), not one average; latency at P50 *and* P99, with
speculation against a baseline (windows or a canary running without it), with the load each mode saw; every
actuation on the time axis. `queries` and `analysis` are pure (PromQL text in, numbers and Markdown out);
`prometheus` runs range queries through prometheus-api-client; `plots` draws PNGs; `command` wires the CLI.
"""
