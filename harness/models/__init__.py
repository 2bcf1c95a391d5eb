"""Model preparation: local GGUF → served checkpoint, with hashes as versions."""

from harness.models.prepare import CATALOG, ModelSource, PreparedModel, ensure_model, find_model

__all__ = ["CATALOG", "ModelSource", "PreparedModel", "ensure_model", "find_model"]
