"""specpilot: a Kubernetes operator that runs vLLM with speculative decoding, and keeps it on only while it pays off."""

__version__ = "0.1.0"
