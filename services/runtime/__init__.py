"""Machinery ingest and the worker share: partition ownership, commits, answers."""
