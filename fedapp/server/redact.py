"""Credentials out of recorded command lines (a run folder's provenance is shared with results).

Redacted, whatever the program: the value of an option whose name has a credential word in it
(``--token X``, ``--token=X``, ``--auth-token``, ``--private-key PATH``, ``--ssl-keyfile``,
``--api_key``, ``--password``, ``--secret``, ``--credentials``, ``--passphrase``; the argument
that follows is taken as its value unless it is a long option or ``-x``), the value of every
``KEY=VALUE`` whose key has such a word (also inside a ``--run-config`` string), the password
of a URL (``scheme://user:PASSWORD@host``), a bearer token, and any argument holding PEM
private-key material. A path to a key file is redacted too: it says where a secret lives.
"""

from __future__ import annotations

import re

REDACTED = "<redacted>"
_WORD = r"(?:token|key|keyfile|secret|passw(?:or)?d|passphrase|pwd|credentials?|auth|cookie|session)"
# an option named with a credential word: the parts of --a-b_c, or a part ending in one (--apikey, --keyfile)
_OPTION = re.compile(rf"--?(?:[a-z0-9]+[-_])*[a-z0-9]*{_WORD}(?:[-_][a-z0-9]+)*", re.IGNORECASE)
_ASSIGN = re.compile(rf"((?:[\w.-]*[-_.])?[\w]*{_WORD}[\w.-]*\s*=\s*)('[^']*'|\"[^\"]*\"|[^\s'\",;&]+)", re.IGNORECASE)
_URL_PASSWORD = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^\s/:@]+:)[^\s/@]+(@)", re.IGNORECASE)
_BEARER = re.compile(r"(\bbearer\s+)[\w.~+/=-]+", re.IGNORECASE)
_SHORT = re.compile(r"-[A-Za-z]")
_PEM_KEY = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----|PRIVATE KEY-----", re.IGNORECASE)


def redact_text(text: str) -> str:
    """One argument's credential-like parts replaced (KEY=VALUE, URL passwords, bearer tokens, PEM keys)."""
    if _PEM_KEY.search(text):
        return REDACTED
    text = _ASSIGN.sub(lambda m: m.group(1) + REDACTED, text)
    text = _URL_PASSWORD.sub(lambda m: m.group(1) + REDACTED + m.group(2), text)
    return _BEARER.sub(lambda m: m.group(1) + REDACTED, text)


def redact_argv(argv: list[str]) -> list[str]:
    """``argv`` with every credential-like value replaced by ``<redacted>``."""
    out: list[str] = []
    secret_next = False
    for arg in argv:
        if secret_next and not (arg.startswith("--") or _SHORT.fullmatch(arg)):
            out.append(REDACTED)
            secret_next = False
            continue
        secret_next = False
        name, eq, _ = arg.partition("=")
        if _OPTION.fullmatch(name):
            if eq:
                out.append(f"{name}={REDACTED}")
            else:
                out.append(arg)
                secret_next = True
            continue
        out.append(redact_text(arg))
    return out
