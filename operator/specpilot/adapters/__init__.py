"""I/O adapters: the only modules that talk to Kubernetes or Prometheus."""
