"""Speculative decoding: closed-form acceptance and speedup, a seeded Monte-Carlo and draft
topologies (``formulas``), Transformers-style proposal-budget schedules (``proposal``), and the
``infkit mech specdec`` run that puts them in one result (``mechanism``).
"""

from harness.mech.specdec.mechanism import MECHANISM

__all__ = ["MECHANISM"]
