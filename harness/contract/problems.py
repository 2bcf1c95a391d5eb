"""What a check of a document finds: one broken rule at a JSON pointer (schema and evidence rules alike)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One broken rule: where (JSON pointer) and which rule."""

    pointer: str
    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.pointer or '/'}: {self.message} [rule: {self.rule}]"
