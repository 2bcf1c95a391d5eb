"""Calibration of the engine's step-cost model against a server's measurements.

``config`` (the sources and settings), ``plan`` (the profiling plan, measured records,
prediction and comparison), ``fitting`` (the least-squares fit through the engine) and
``mechanism`` (the ``infkit mech calibrate`` run). Measuring a live server is
``harness.mech.calibrate.live``: it starts servers, so it lives with the experiments.
"""

from harness.mech.calibrate.mechanism import MECHANISM

__all__ = ["MECHANISM"]
