"""Model preparation: local GGUF → served checkpoint, with hashes as versions."""

from harness.models.prepare import CATALOG, ModelSource, ensure_model, find_model
from harness.models.stamp import PreparedModel

__all__ = ["CATALOG", "ModelSource", "PreparedModel", "ensure_model", "find_model"]
