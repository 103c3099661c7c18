"""Side-by-side benchmarks of natserver against the Go nats-server (see README.md)."""
