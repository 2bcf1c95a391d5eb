"""Typed user-facing errors.

Every error a person can act on is an ``InfkitError``; the CLI prints its
message on one line and exits with its ``exit_code`` instead of a traceback.
"""

from __future__ import annotations


class InfkitError(Exception):
    """An error caused by input or environment that the user can fix."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class InvalidInput(InfkitError):
    """A file, flag or configuration value is wrong."""


class SchemaViolation(InfkitError):
    """A document does not satisfy its JSON Schema or the evidence rules."""

    def __init__(self, message: str, errors: list[str] | None = None):
        super().__init__(message)
        self.errors = list(errors or [])


class CapabilityMissing(InfkitError):
    """The machine lacks something the step needs (GPU, engine, package)."""

    exit_code = 3
