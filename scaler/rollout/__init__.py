"""The scaler's side of canary rollouts: per-version telemetry windows, the pure verdict,
the judge that publishes it, and how canary groups are sized."""
