"""The `inferbus` command line."""
