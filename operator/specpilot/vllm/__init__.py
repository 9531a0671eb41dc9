"""vLLM dialects: the command line and the metric names of each vLLM version (pure)."""
