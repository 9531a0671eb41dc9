"""Signals: the PromQL the autotuner asks, and the typed measurements it gets back."""
