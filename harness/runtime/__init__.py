"""Runtimes start a backend's server: ``local`` (subprocess) or ``docker`` (role image via the Docker API)."""
