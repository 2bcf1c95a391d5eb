"""The run directory: its files, the run record (run.json), the environment fingerprint."""
