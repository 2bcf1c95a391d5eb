"""Models: a catalog model prepared from a local GGUF, or the user's own checkpoint; hashes as versions."""

from harness.models.prepare import CATALOG, ModelSource, ensure_model, find_model
from harness.models.resolve import LocalCheckpoint, resolve_model
from harness.models.stamp import PreparedModel

__all__ = ["CATALOG", "LocalCheckpoint", "ModelSource", "PreparedModel", "ensure_model", "find_model",
           "resolve_model"]
