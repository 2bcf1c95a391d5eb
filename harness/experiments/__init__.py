"""Experiments: the paired runner, its statistics, and one module per bench."""
