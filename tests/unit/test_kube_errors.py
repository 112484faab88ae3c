"""The API's error answers map onto one exception hierarchy (shared by the async and the sync client)."""

import json

import pytest

from gpu_scheduling.kube import errors


def status(code: int, reason: str, message: str = "m") -> str:
    return json.dumps(
        {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason, "message": message}
    )


@pytest.mark.parametrize(
    "code, reason, cls",
    [
        (400, "BadRequest", errors.BadRequest),
        (401, "Unauthorized", errors.Unauthorized),
        (403, "Forbidden", errors.Forbidden),
        (404, "NotFound", errors.NotFound),
        (405, "MethodNotAllowed", errors.MethodNotAllowed),
        (409, "AlreadyExists", errors.AlreadyExists),
        (409, "Conflict", errors.Conflict),
        (410, "Expired", errors.Gone),
        (413, "RequestEntityTooLarge", errors.RequestEntityTooLarge),
        (422, "Invalid", errors.Invalid),
        (429, "TooManyRequests", errors.TooManyRequests),
        (500, "InternalError", errors.ServerError),
        (504, "Timeout", errors.ServerError),
        (418, "Teapot", errors.ApiError),
    ],
)
def test_each_status_has_its_class(code, reason, cls):
    exc = errors.error_for(code, status(code, reason, "what went wrong"), "phrase")
    assert type(exc) is cls and isinstance(exc, errors.ApiError)
    assert (exc.status, exc.reason, exc.message) == (code, reason, "what went wrong")
    assert exc.body["kind"] == "Status"


def test_already_exists_is_a_conflict():
    assert isinstance(errors.error_for(409, status(409, "AlreadyExists")), errors.Conflict)
    assert not isinstance(errors.error_for(409, status(409, "Conflict")), errors.AlreadyExists)


@pytest.mark.parametrize("text", ["not json", "[1, 2]", "", "null"])
def test_a_body_that_is_not_a_status_keeps_its_text(text):
    exc = errors.error_for(404, text, "Not Found")
    assert type(exc) is errors.NotFound
    assert (exc.reason, exc.message, exc.body) == ("Not Found", text, None)


def test_a_watch_error_event_becomes_the_same_class():
    exc = errors.from_status({"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"})
    assert type(exc) is errors.Gone and exc.message == "too old"
    assert type(errors.from_status({"kind": "Status"})) is errors.ServerError
