"""Serving backends: each turns a ``BackendConfig`` into a ``ServerSpec`` for a runtime.

Add a backend by adding a module that calls ``register_backend``.
"""

from harness.backends.base import Backend, BackendConfig, get_backend, register_backend

__all__ = ["Backend", "BackendConfig", "get_backend", "register_backend"]
