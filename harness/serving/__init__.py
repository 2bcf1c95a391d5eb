"""Serving measurement: one run against one server, its result, validity, metrics and the server session."""
