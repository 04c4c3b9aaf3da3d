"""inferbus services: ingest, worker, client and the command line."""
