"""The Kubernetes API's error answers as one exception hierarchy, shared by the async and the sync client.

Callers catch what they mean (`except NotFound`, `except Conflict`) instead of comparing status codes. A 409 is
`AlreadyExists` (a create of a name in use) or a plain `Conflict` (a stale resourceVersion); both are `Conflict`.
When no answer came at all, the async client raises `TransportError`, whatever its HTTP library said, so that no
program imports that library to catch it.
"""

from __future__ import annotations

import json
from typing import Any


class ApiError(Exception):
    """The API server answered with an error status; `reason` and `message` come from its Status object."""

    def __init__(self, status: int, reason: str, message: str, body: Any = None) -> None:
        self.status, self.reason, self.message, self.body = status, reason, message, body
        super().__init__(f"{status} {reason}: {message}")


class TransportError(OSError):
    """No answer from the API server: the request could not be sent (no connection, TLS failed, the token file
    unreadable), the connection broke, or the request's own deadline passed before the answer was read in full.
    The request may or may not have taken effect; worth a retry. An OSError, as the socket errors it stands for, so
    that code guarding files and sockets alike still catches it. `cause` names what the HTTP library raised (the
    original is `__cause__`)."""

    def __init__(self, method: str, path: str, cause: BaseException) -> None:
        self.method, self.path, self.cause = method, path, type(cause).__name__
        detail = str(cause)
        super().__init__(f"{method} {path}: {self.cause}: {detail}" if detail else f"{method} {path}: {self.cause}")


class BadRequest(ApiError):
    """400: the request itself is malformed."""


class Unauthorized(ApiError):
    """401: no or invalid credentials."""


class Forbidden(ApiError):
    """403: RBAC or an admission plugin refused the request."""


class NotFound(ApiError):
    """404: the object (or its namespace, or the resource) does not exist."""


class MethodNotAllowed(ApiError):
    """405: the verb is not served for this path."""


class Conflict(ApiError):
    """409: a stale resourceVersion, or (`AlreadyExists`) a create of a name in use."""


class AlreadyExists(Conflict):
    """409 with reason AlreadyExists."""


class Gone(ApiError):
    """410: the resourceVersion a LIST or WATCH asked for is too old."""


class RequestEntityTooLarge(ApiError):
    """413: the body is over the server's limit."""


class Invalid(ApiError):
    """422: the object failed validation (including ValidatingAdmissionPolicies' field errors)."""


class TooManyRequests(ApiError):
    """429: throttled, or an eviction a PodDisruptionBudget does not allow."""


class ServerError(ApiError):
    """5xx: the server (or a webhook it called) failed; usually worth a retry."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    405: MethodNotAllowed,
    409: Conflict,
    410: Gone,
    413: RequestEntityTooLarge,
    422: Invalid,
    429: TooManyRequests,
}


def error_for(status: int, text: str, reason_phrase: str = "") -> ApiError:
    """The exception for an error answer: `text` is its body, a Status object when the apiserver sent it."""
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    if isinstance(body, dict):
        return _make(status, str(body.get("reason") or reason_phrase), str(body.get("message", text)), body)
    return _make(status, reason_phrase, text, None)


def from_status(status: dict[str, Any]) -> ApiError:
    """The exception for a Status object a watch sent as an ERROR event (410 Gone when its resourceVersion is too
    old)."""
    code = status.get("code")
    return _make(
        code if isinstance(code, int) else 500, str(status.get("reason", "")), str(status.get("message", "")), status
    )


def _make(status: int, reason: str, message: str, body: Any) -> ApiError:
    if status == 409 and reason == "AlreadyExists":
        cls: type[ApiError] = AlreadyExists
    else:
        cls = _BY_STATUS.get(status, ServerError if status >= 500 else ApiError)
    return cls(status, reason, message, body)
