"""What a run may record of an environment: names that cannot hold a secret, values without credentials.

Every captured environment (the fingerprint, a server's communication settings) passes through
``safe_env``: a variable is kept only when its name starts with an allowed prefix and does not
look like a secret (``SECRET_NAME``: tokens, keys, passwords, pass phrases, credentials, ...),
and every kept value loses the credentials a URL may carry (``scheme://user:secret@host`` →
``scheme://host``; ``?token=...`` → ``?token=<redacted>``), since a value such as
``HF_ENDPOINT`` or ``RAY_ADDRESS`` can hold them under an innocent name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

SECRET_NAME = re.compile(r"TOKEN|SECRET|PASS|PWD|KEY|CRED|AUTH|COOKIE|SESSION|PRIVATE|SIGNATURE|CERT|BEARER", re.I)
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/?#@\s]*@")
_QUERY_SECRET = re.compile(r"(?P<name>[?&;][^=&;#\s]*(?:token|secret|pass|pwd|key|cred|auth|sig|session)[^=&;#\s]*=)"
                           r"[^&;#\s]*", re.I)
REDACTED = "<redacted>"


def scrub_value(value: str) -> str:
    """``value`` without URL user information or secret-named query parameters."""
    value = _USERINFO.sub(r"\g<scheme>", value)
    return _QUERY_SECRET.sub(lambda m: m.group("name") + REDACTED, value)


def safe_env(environ: Mapping[str, str], prefixes: Iterable[str]) -> dict[str, str]:
    """The variables of ``environ`` a run may record (see the module doc), sorted by name."""
    allowed = tuple(prefixes)
    return {k: scrub_value(v) for k, v in sorted(environ.items())
            if k.startswith(allowed) and not SECRET_NAME.search(k)}
