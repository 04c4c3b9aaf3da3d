"""Benchmarks: raw engine vs end-to-end through the bus, in one run."""
