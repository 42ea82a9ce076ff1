"""The SDK's exceptions: one class per API error code, all under :class:`FleetError`.

Branch on the class (or on ``code``), never on the message: messages are for people. No
exception text ever contains an API key or a secret (the key is not known to this module).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar

__all__ = [
    "API_ERROR_CLASSES",
    "API_KEY_FORMAT",
    "CommandTimeoutError",
    "ConflictError",
    "DownloadError",
    "EntitlementRequiredError",
    "FleetApiError",
    "FleetConnectionError",
    "FleetError",
    "FleetStreamError",
    "HeadersTooLargeError",
    "IdempotencyKeyInUseError",
    "IdempotencyKeyReusedError",
    "InsufficientScopeError",
    "InternalError",
    "MalformedApiKeyError",
    "MethodNotAllowedError",
    "NotFoundError",
    "NotReadyError",
    "PayloadTooLargeError",
    "ProviderFailedError",
    "ProviderTimeoutError",
    "RateLimitedError",
    "ReadLinksRefusedError",
    "ReadLinksUnsupportedError",
    "ReadOriginNotAllowedError",
    "ReplicaNotVerifiedError",
    "RequestTimeoutError",
    "RobotDeenrolledError",
    "RobotOfflineError",
    "UnauthenticatedError",
    "UnsupportedMediaTypeError",
    "ValidationFailedError",
    "api_key_problem",
    "error_from_response",
]


class FleetError(Exception):
    """Every exception this SDK raises on purpose."""


class FleetApiError(FleetError):
    """A non-2xx answer from /v1. ``code`` is the API's error code (``http_error`` when the
    answer had no error body of ours: a proxy's page, or a code this SDK does not know, then in
    ``server_code``)."""

    code: ClassVar[str] = "http_error"

    def __init__(
        self,
        *,
        status: int,
        message: str,
        request_id: str | None = None,
        details: Mapping[str, Any] | None = None,
        server_code: str | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        self.status = status
        self.message = message
        self.request_id = request_id
        self.details: dict[str, Any] = dict(details) if details is not None else {}
        self.server_code = server_code if server_code is not None else self.code
        self.retry_after_s = retry_after_s
        super().__init__(self.__str__())

    def __str__(self) -> str:
        rid = f" ({self.request_id})" if self.request_id else ""
        return f"{self.server_code}: {self.message} [HTTP {self.status}]{rid}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(status={self.status}, code={self.server_code!r}, message={self.message!r}, request_id={self.request_id!r})"


class ValidationFailedError(FleetApiError):
    """400 (or 422 for a robot command its runtime cannot take): ``details['issues']`` says what."""

    code = "validation_failed"


class UnauthenticatedError(FleetApiError):
    code = "unauthenticated"


class InsufficientScopeError(FleetApiError):
    code = "insufficient_scope"


class EntitlementRequiredError(FleetApiError):
    code = "entitlement_required"


class ReadLinksRefusedError(FleetApiError):
    """403 from ``read_links``: your grant provider refused; ``details['provider_message']`` is its reason."""

    code = "read_links_refused"


class NotFoundError(FleetApiError):
    code = "not_found"


class MethodNotAllowedError(FleetApiError):
    code = "method_not_allowed"


class RequestTimeoutError(FleetApiError):
    code = "request_timeout"


class ConflictError(FleetApiError):
    code = "conflict"


class RobotDeenrolledError(ConflictError):
    code = "robot_deenrolled"


class ReplicaNotVerifiedError(ConflictError):
    """409 from ``read_links``: no verified replica to read (or not the one named);
    ``details['replicas']`` lists each replica as ``{destination_id, state}`` (none: the files
    are still on the robot)."""

    code = "replica_not_verified"


class IdempotencyKeyInUseError(ConflictError):
    """409: a request with the same Idempotency-Key is still running; retry a moment later."""

    code = "idempotency_key_in_use"


class PayloadTooLargeError(FleetApiError):
    code = "payload_too_large"


class UnsupportedMediaTypeError(FleetApiError):
    code = "unsupported_media_type"


class IdempotencyKeyReusedError(FleetApiError):
    """422: the Idempotency-Key was used before with a different request."""

    code = "idempotency_key_reused"


class RateLimitedError(FleetApiError):
    """429 after the retries the client's policy allows; ``retry_after_s`` says how long to wait."""

    code = "rate_limited"


class HeadersTooLargeError(FleetApiError):
    code = "headers_too_large"


class InternalError(FleetApiError):
    """500; for an episode verb, the robot refused it in its state (``details['robot_error']``)."""

    code = "internal"


class ReadLinksUnsupportedError(FleetApiError):
    """501 from ``read_links``: the destination's grant provider does not issue read links."""

    code = "read_links_unsupported"


class ProviderFailedError(FleetApiError):
    """502 from ``read_links``: the grant provider's answer was unusable or never came;
    ``details['failure']`` is one of ``unreachable``, ``http_error``, ``invalid_json``,
    ``too_large``, ``schema_invalid``, ``expired``."""

    code = "provider_failed"


class ReadOriginNotAllowedError(FleetApiError):
    """502 from ``read_links``: a link points at an origin the installation does not allow
    (``details['origin']``; the operator adds it with ``fleet-cloud serve --read-origin``)."""

    code = "read_origin_not_allowed"


class RobotOfflineError(FleetApiError):
    """503: the robot is not connected; retry later with the same Idempotency-Key."""

    code = "robot_offline"


class NotReadyError(FleetApiError):
    code = "not_ready"


class CommandTimeoutError(FleetApiError):
    """504: the robot did not answer in time; it may still act. Send the command again with the
    same ``idempotency_key`` to get its answer without it acting twice."""

    code = "command_timeout"


class ProviderTimeoutError(FleetApiError):
    """504 from ``read_links``: the grant provider did not answer within 10 s."""

    code = "provider_timeout"


API_ERROR_CLASSES: dict[str, type[FleetApiError]] = {
    cls.code: cls
    for cls in (
        ValidationFailedError,
        UnauthenticatedError,
        InsufficientScopeError,
        EntitlementRequiredError,
        ReadLinksRefusedError,
        NotFoundError,
        MethodNotAllowedError,
        RequestTimeoutError,
        ConflictError,
        RobotDeenrolledError,
        ReplicaNotVerifiedError,
        IdempotencyKeyInUseError,
        PayloadTooLargeError,
        UnsupportedMediaTypeError,
        IdempotencyKeyReusedError,
        RateLimitedError,
        HeadersTooLargeError,
        InternalError,
        ReadLinksUnsupportedError,
        ProviderFailedError,
        ReadOriginNotAllowedError,
        RobotOfflineError,
        NotReadyError,
        CommandTimeoutError,
        ProviderTimeoutError,
    )
}


def error_from_response(status: int, body: Any, request_id: str | None, retry_after_s: float | None) -> FleetApiError:
    """The exception of a non-2xx answer and its parsed JSON body (anything: a proxy's page is no error body)."""
    err = body.get("error") if isinstance(body, dict) else None
    code = err.get("code") if isinstance(err, dict) else None
    message = err.get("message") if isinstance(err, dict) else None
    details = err.get("details") if isinstance(err, dict) else None
    rid = err.get("request_id") if isinstance(err, dict) else None
    cls = API_ERROR_CLASSES.get(code, FleetApiError) if isinstance(code, str) else FleetApiError
    return cls(
        status=status,
        message=message if isinstance(message, str) else f"HTTP {status}",
        request_id=rid if isinstance(rid, str) else request_id,
        details=details if isinstance(details, dict) else None,
        server_code=code if isinstance(code, str) else None,
        retry_after_s=retry_after_s,
    )


class FleetConnectionError(FleetError):
    """No HTTP answer at all (refused, reset, timeout, DNS) after the retries the policy allows."""

    def __init__(self, method: str, path: str, reason: str) -> None:
        self.method = method
        self.path = path
        self.reason = reason
        super().__init__(f"{method} {path}: {reason}")


class FleetStreamError(FleetError):
    """An export or manifest stream broke the NDJSON contract (a line too long, not JSON)."""

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        super().__init__(message)


class DownloadError(FleetError):
    """``datasets.download`` could not fetch or verify some files; ``report`` is what it wrote to manifest.json."""

    def __init__(self, message: str, report: Mapping[str, Any]) -> None:
        self.report = dict(report)
        super().__init__(message)


API_KEY_FORMAT = "ak_ followed by 16 to 128 letters, digits, _ or -"
_API_KEY = re.compile(r"^ak_[A-Za-z0-9_-]{16,128}$")


def api_key_problem(key: str) -> str | None:
    """Why ``key`` is not an API key, in words that never quote it; None when it has the format."""
    k = key.strip()
    if _API_KEY.match(k):
        return None
    if k == "":
        return "it is empty"
    if not k.startswith("ak_"):
        return f"it does not start with ak_ ({len(k)} characters)"
    rest = k[3:]
    if re.search(r"[^A-Za-z0-9_-]", rest):
        what = (
            " (a space or a line break)"
            if re.search(r"\s", rest)
            else " (a quote)"
            if re.search("[\"'`\u2018\u2019\u201c\u201d]", rest)
            else ""
        )
        return f"it contains a character other than letters, digits, _ and -{what}"
    return f"it has {len(rest)} characters after ak_, not 16 to 128"


class MalformedApiKeyError(FleetError):
    """The API key given is not one (a truncated paste, a quote or a space in it): nothing was sent."""

    code = "malformed_api_key"

    def __init__(self, problem: str, source: str = "api_key") -> None:
        self.problem = problem
        super().__init__(f"malformed API key ({source}): expected {API_KEY_FORMAT}; {problem}")
