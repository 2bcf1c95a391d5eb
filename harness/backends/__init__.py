"""Serving backends: each turns a ``BackendConfig`` into a ``ServerSpec`` for a runtime.

Add a backend by adding a module that exports ``BACKEND`` (its class); it is discovered.
"""

from harness.backends.base import Backend, BackendConfig, backends, get_backend
from harness.backends.cache_reset import CacheReset

__all__ = ["Backend", "BackendConfig", "CacheReset", "backends", "get_backend"]
