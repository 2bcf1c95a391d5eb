"""Outputs for people: tables and plots built from result documents."""
