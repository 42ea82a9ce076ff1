"""Verifying what the cloud signs: webhook deliveries and forwarded grant requests.

Both carry ``X-Service-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<raw body>">``,
keyed with the secret string as issued (``whsec_…`` for webhooks, ``dsec_…`` for destinations).
During a secret rotation the header carries one ``v1=`` per signing secret (new and old); any one
matching is enough. This is the check of ``packages/protocol/src/signature.ts`` (the cloud's own
signer and verifier), entry for entry: the same header grammar, the same 8 KiB cap, the same
tolerance, so a header the cloud accepts here is one the SDK accepts and the other way round.

Exposed as ``fleet.webhooks.verify`` (wired by ``fleet/__init__.py``).
"""

from __future__ import annotations

import hashlib
import hmac
import math
import re
import time
from collections.abc import Sequence
from typing import Literal

from .errors import FleetError

__all__ = [
    "DEFAULT_TOLERANCE_S",
    "SIGNATURE_HEADER",
    "SignatureFailure",
    "WebhookSignatureError",
    "sign",
    "verify",
]

#: The header every signed request of the cloud carries.
SIGNATURE_HEADER = "X-Service-Signature"
#: Seconds a signature's ``t`` may be away from the receiver's clock (a replayed old delivery).
DEFAULT_TOLERANCE_S = 300.0
# The cloud refuses longer headers too; a bounded parse keeps a hostile header cheap.
_MAX_HEADER_LENGTH = 8192
_T_VALUE = re.compile(r"[0-9]{1,12}")
_V1_VALUE = re.compile(r"[0-9a-f]{64}")

SignatureFailure = Literal["malformed", "stale", "mismatch"]


class WebhookSignatureError(FleetError):
    """A signature that does not hold: ``reason`` is ``malformed``, ``stale`` or ``mismatch``.

    The message names what failed, never the secret, the expected MAC or the body.
    """

    reason: SignatureFailure

    def __init__(self, reason: SignatureFailure, message: str) -> None:
        super().__init__(message)
        self.reason = reason

    def __repr__(self) -> str:
        return f"WebhookSignatureError(reason={self.reason!r})"


def _mac(secret: str, t: int, body: bytes) -> bytes:
    mac = hmac.new(secret.encode("utf-8"), digestmod=hashlib.sha256)
    mac.update(f"{t}.".encode("ascii"))
    mac.update(body)
    return mac.digest()


def _secrets(secret: str | Sequence[str]) -> list[str]:
    secrets = [secret] if isinstance(secret, str) else list(secret)
    if not secrets:
        raise ValueError("verify() needs a secret (the subscription's whsec_… or the destination's dsec_…)")
    for s in secrets:
        if not isinstance(s, str) or s == "":
            raise TypeError("each secret must be a non-empty str, as the API returned it")
    return secrets


def _body(raw_body: bytes | bytearray | memoryview) -> bytes:
    if isinstance(raw_body, str):
        # A str is almost always a parsed and re-serialized body, which no longer matches the MAC.
        raise TypeError("raw_body must be the request body's bytes as received, not a str")
    if not isinstance(raw_body, (bytes, bytearray, memoryview)):
        raise TypeError(f"raw_body must be bytes, not {type(raw_body).__name__}")
    return bytes(raw_body)


def sign(raw_body: bytes | bytearray | memoryview, secrets: str | Sequence[str], timestamp_s: int) -> str:
    """The header value the cloud would send for ``raw_body`` signed at ``timestamp_s``.

    For tests of a receiver: one ``v1=`` per secret, newest first, as during a rotation.
    """
    body = _body(raw_body)
    keys = _secrets(secrets)
    if isinstance(timestamp_s, bool) or not isinstance(timestamp_s, int) or timestamp_s < 0:
        raise ValueError("timestamp_s must be whole unix seconds")
    return ",".join([f"t={timestamp_s}", *(f"v1={_mac(k, timestamp_s, body).hex()}" for k in keys)])


def verify(
    raw_body: bytes | bytearray | memoryview,
    signature_header: str | None,
    secret: str | Sequence[str],
    tolerance_s: float = DEFAULT_TOLERANCE_S,
    *,
    now: float | None = None,
) -> None:
    """Checks that ``raw_body`` was signed by the cloud with ``secret``; raises if not.

    ``raw_body``: the body's bytes exactly as received (before any JSON parsing).
    ``signature_header``: the ``X-Service-Signature`` header's value (``None`` when absent).
    ``secret``: the subscription's ``whsec_…`` (or a destination's ``dsec_…``); a list of secrets
    when you hold both the current and the previous one during a rotation.
    ``tolerance_s``: how far ``t`` may be from ``now`` (default 300 s), either way.
    ``now``: Unix seconds (default ``time.time()``), for tests.

    Raises :class:`WebhookSignatureError` with ``reason`` ``malformed`` (no header, no ``t``, no
    well-formed ``v1``), ``stale`` (``t`` outside the tolerance) or ``mismatch`` (no ``v1``
    entry is the MAC of the body under any of the secrets). Every entry is compared with
    :func:`hmac.compare_digest`, so the time taken does not say which one matched.
    """
    body = _body(raw_body)
    keys = _secrets(secret)
    if (
        isinstance(tolerance_s, bool)
        or not isinstance(tolerance_s, (int, float))
        or not math.isfinite(tolerance_s)
        or tolerance_s < 0
    ):
        raise ValueError("tolerance_s must be a finite number of seconds >= 0")
    if signature_header is not None and not isinstance(signature_header, str):
        raise TypeError(f"signature_header must be a str, not {type(signature_header).__name__}")
    if not signature_header:
        raise WebhookSignatureError("malformed", f"no {SIGNATURE_HEADER} header")
    if len(signature_header) > _MAX_HEADER_LENGTH:
        raise WebhookSignatureError(
            "malformed", f"the {SIGNATURE_HEADER} header is longer than {_MAX_HEADER_LENGTH} characters"
        )

    t: int | None = None
    candidates: list[bytes] = []
    for part in signature_header.split(","):
        key, eq, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not key:
            continue
        if key == "t" and _T_VALUE.fullmatch(value):
            t = int(value)
        elif key == "v1" and _V1_VALUE.fullmatch(value):
            candidates.append(bytes.fromhex(value))
    if t is None or not candidates:
        raise WebhookSignatureError(
            "malformed", f"the {SIGNATURE_HEADER} header needs t=<unix seconds> and at least one v1=<64 hex digits>"
        )

    now_s = math.floor(time.time() if now is None else now)
    if abs(now_s - t) > tolerance_s:
        raise WebhookSignatureError(
            "stale",
            f"the signature's timestamp is {abs(now_s - t)} s from now, more than the {tolerance_s:g} s tolerated",
        )

    for key in keys:
        expected = _mac(key, t, body)
        matched = False
        for candidate in candidates:
            # No early exit: every entry is compared whatever the first one gave.
            if hmac.compare_digest(candidate, expected):
                matched = True
        if matched:
            return
    raise WebhookSignatureError("mismatch", "no v1 entry of the signature matches the body under the secret given")
