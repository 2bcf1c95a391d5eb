"""One reason a manifest is INVALID."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Finding:
    """``check`` names the failed check (stable, for machines); ``message`` is for people."""

    check: str
    message: str
    path: str | None = None

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}

    def __str__(self) -> str:
        return f"[{self.check}] {self.message}"
