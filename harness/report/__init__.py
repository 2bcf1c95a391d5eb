"""Outputs for people: plots, and `infkit report` — audited runs side by side.

Data flows one way: inputs (audit every run or manifest) → reader (verified documents and
figures of the VALID ones) → compare (like-for-like, environment and result diffs) →
document (report.json) → page (index.html) and markdown (report.md); build writes the three
atomically.
"""
