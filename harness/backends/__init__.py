"""Serving backends: each turns a ``BackendConfig`` into a ``ServerSpec`` for a runtime.

Add a backend by adding a module that calls ``register_backend``.
"""

from harness.backends.base import Backend, BackendConfig, get_backend, register_backend
from harness.backends.cache_reset import CacheReset

__all__ = ["Backend", "BackendConfig", "CacheReset", "get_backend", "register_backend"]
