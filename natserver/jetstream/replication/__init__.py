"""JetStream in a cluster: what the meta, stream and consumer RAFT groups replicate (issue #32)."""
