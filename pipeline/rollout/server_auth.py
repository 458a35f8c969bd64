"""The shared token between `mathrl vllm-serve` and its trainers.

Both sides read it the same way: the environment variable ``MATHRL_SERVER_TOKEN`` if set, else
the first line of ``rollout.server_token_file``. Not from the command line (every local user
can read a process's arguments in /proc) and not from the config itself (configs are saved
into run directories). A token file that its group or other users may read is refused (one
line saying how to fix its mode): the docs promise a file only you can read. The client sends
it as ``Authorization: Bearer <token>`` on every request; the server compares in constant time
(``hmac.compare_digest``). The same token keys the weight group's handshake
(pipeline/weights/broadcast.py).

Make one with ``python -c "import secrets; print(secrets.token_urlsafe(32))"``.
"""

from __future__ import annotations

import hmac
import os
import re

__all__ = ["TOKEN_ENV", "MIN_TOKEN_CHARS", "TokenError", "server_token", "bearer", "authorized"]

TOKEN_ENV = "MATHRL_SERVER_TOKEN"
MIN_TOKEN_CHARS = 16
_PRINTABLE = re.compile(r"^[\x21-\x7e]+$")  # visible ASCII, no spaces: fits an HTTP header as is
HOW = (f"set {TOKEN_ENV} (e.g. export {TOKEN_ENV}=$(python -c 'import secrets; print(secrets.token_urlsafe(32))')) "
       "or rollout.server_token_file to the same token on the server and the trainer")


class TokenError(ValueError):
    """The token is unreadable or too weak; one line naming where it came from."""


def server_token(rollout) -> str | None:
    """The token from the environment or ``rollout.server_token_file``; None if neither is set."""
    token, source = os.environ.get(TOKEN_ENV), TOKEN_ENV
    if not token and rollout.server_token_file:
        path = rollout.server_token_file
        source = f"rollout.server_token_file={path}"
        try:
            with open(path) as f:
                mode = os.fstat(f.fileno()).st_mode & 0o777  # of the file read, not of a swapped path
                lines = f.read().splitlines()
        except OSError as e:
            raise TokenError(f"{source}: cannot read the token ({e.strerror or e})") from None
        if mode & 0o077:
            raise TokenError(f"{source}: mode {mode:o} lets {'other users' if mode & 0o007 else 'its group'} read "
                             f"the token; make it yours alone (`chmod 600 {path}`)")
        token = lines[0].strip() if lines else ""
        if not token:
            raise TokenError(f"{source}: the file is empty")
    if not token:
        return None
    if len(token) < MIN_TOKEN_CHARS or not _PRINTABLE.match(token):
        raise TokenError(f"{source}: the token must be at least {MIN_TOKEN_CHARS} visible ASCII characters "
                         "without spaces")
    return token


def bearer(token: str | None) -> dict[str, str]:
    """The request header that carries ``token`` (none without a token)."""
    return {"Authorization": f"Bearer {token}"} if token else {}


def authorized(header: str | None, token: str | None) -> bool:
    """Whether an ``Authorization`` header value carries ``token``; any request passes when the
    server runs without one (``rollout.server_allow_no_token``)."""
    if token is None:
        return True
    scheme, _, value = (header or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode("latin-1"), token.encode())
