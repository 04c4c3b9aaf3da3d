"""Tracing: one TracerProvider per process, Kafka propagation, stage breakdowns."""
