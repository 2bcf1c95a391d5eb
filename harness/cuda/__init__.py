"""CUDA mechanism experiments (profile INF-CUDA-MECHANISM), one module each.

attention, dispatch, budget, proposal and overlap run on a GPU when one is
present and on CPU otherwise, recording which path ran and why a requested
one fell back. See docs/cuda.md.
"""
