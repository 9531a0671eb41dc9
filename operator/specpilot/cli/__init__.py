"""The `specpilot` command line: one module per command group."""
