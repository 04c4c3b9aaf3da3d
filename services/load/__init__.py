"""`inferbus load`: open-loop load scenarios over the real bus, accounted request by request."""
