"""Helpers that serve several benches: sweeps, searches, citations of earlier runs."""
