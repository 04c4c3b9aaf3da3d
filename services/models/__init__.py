"""Model tooling above the repository: demo models, MiniLM export, calibration, the CLI."""
