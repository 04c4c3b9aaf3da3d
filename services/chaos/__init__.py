"""`inferbus chaos`: faults against the embedded stack, with every request id accounted for."""
