"""The scaler: collector (I/O), policy (pure), actuators (I/O) and a simulator."""
