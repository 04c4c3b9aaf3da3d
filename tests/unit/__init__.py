"""Unit tests (no broker)."""
