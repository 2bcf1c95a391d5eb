"""infkit: reproducibility kit for LLM inference-optimization experiments."""

__version__ = "0.1.0"
