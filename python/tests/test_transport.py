"""The client's transport rules against a local httpx MockTransport (no server): retries as data,
Retry-After, Idempotency-Key, typed errors, no key in any text, NDJSON resume after a drop."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

import fleet
from fleet import errors

KEY = "ak_" + "k" * 40
URL = "http://fleet.test"


def error_body(code: str, message: str = "no", details: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "error": {
            "code": code,
            "message": message,
            "request_id": "req_test",
            **({"details": details} if details else {}),
        }
    }


class Recorder:
    """A MockTransport handler answering from a script, recording every request it got."""

    def __init__(self, answers: list[Callable[[httpx.Request], httpx.Response]]) -> None:
        self.answers = answers
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers[min(len(self.requests), len(self.answers)) - 1]
        return answer(request)


def status(
    code: int, body: Any = None, headers: dict[str, str] | None = None
) -> Callable[[httpx.Request], httpx.Response]:
    return lambda _req: httpx.Response(code, json=body, headers=headers)


def client(handler: Recorder, **kw: Any) -> tuple[fleet.Fleet, list[float]]:
    waits: list[float] = []
    c = fleet.Fleet(url=URL, api_key=KEY, transport=httpx.MockTransport(handler), sleep=waits.append, **kw)
    return c, waits


ENTITLEMENTS = {
    "tier": "free",
    "features": {"api.access": True},
    "limits": {"api_keys": 5},
    "key": {"id": "key_1", "name": "k", "scopes": ["admin"], "expires_at": None},
}


def test_429_is_retried_after_retry_after_then_succeeds() -> None:
    h = Recorder([status(429, error_body("rate_limited"), {"retry-after": "3"}), status(200, ENTITLEMENTS)])
    c, waits = client(h)
    assert c.entitlements().tier == "free"
    assert len(h.requests) == 2
    assert waits == [3.0]


def test_retries_are_bounded_by_the_policy_and_the_last_answer_is_raised() -> None:
    h = Recorder([status(503, error_body("not_ready"), {"retry-after": "0"})])
    c, waits = client(h, retry=fleet.RetryPolicy(schedule=(0.1, 0.2), jitter=0))
    with pytest.raises(errors.NotReadyError) as info:
        c.entitlements()
    assert len(h.requests) == 3  # max_attempts = len(schedule) + 1
    assert waits == [0.1, 0.2]
    assert info.value.status == 503 and info.value.code == "not_ready" and info.value.request_id == "req_test"


def test_a_retry_after_longer_than_the_maximum_is_not_waited_for() -> None:
    h = Recorder([status(429, error_body("rate_limited"), {"retry-after": "120"})])
    c, waits = client(h, retry=fleet.RetryPolicy(max_retry_after_s=10))
    with pytest.raises(errors.RateLimitedError) as info:
        c.entitlements()
    assert waits == [] and len(h.requests) == 1
    assert info.value.retry_after_s == 120


def test_a_4xx_is_not_retried_and_maps_to_its_class() -> None:
    for code, http, cls in [
        ("validation_failed", 400, errors.ValidationFailedError),
        ("unauthenticated", 401, errors.UnauthenticatedError),
        ("insufficient_scope", 403, errors.InsufficientScopeError),
        ("not_found", 404, errors.NotFoundError),
        ("conflict", 409, errors.ConflictError),
        ("idempotency_key_reused", 422, errors.IdempotencyKeyReusedError),
    ]:
        h = Recorder([status(http, error_body(code, details={"why": 1}))])
        c, waits = client(h)
        with pytest.raises(cls) as info:
            c.episodes.get("ep_x")
        assert (info.value.status, info.value.code, info.value.details) == (http, code, {"why": 1})
        assert len(h.requests) == 1 and waits == []


def test_an_unknown_code_or_a_proxy_page_is_a_plain_fleet_api_error() -> None:
    h = Recorder([lambda _r: httpx.Response(502, text="<html>bad gateway</html>")])
    c, _ = client(h, retry=fleet.RetryPolicy.none())
    with pytest.raises(errors.FleetApiError) as info:
        c.entitlements()
    assert type(info.value) is errors.FleetApiError and info.value.code == "http_error" and info.value.status == 502


def test_every_post_carries_an_idempotency_key_kept_across_retries() -> None:
    dataset: dict[str, Any] = {
        "id": "ds_1",
        "name": "n",
        "description": None,
        "filter": {},
        "snapshot_at": None,
        "episode_count": None,
        "created_by": "key_1",
        "created_at": "2026-01-01T00:00:00.000Z",
    }
    h = Recorder([status(503, error_body("not_ready")), status(201, dataset)])
    c, _ = client(h)
    c.datasets.create(name="n", filter={})
    keys = [r.headers.get("idempotency-key") for r in h.requests]
    assert keys[0] and keys[0] == keys[1]
    h2 = Recorder([status(201, dataset)])
    c2, _ = client(h2)
    c2.datasets.create(name="n", filter={}, idempotency_key="mine-1")
    assert h2.requests[0].headers["idempotency-key"] == "mine-1"
    # GETs carry none.
    h3 = Recorder([status(200, ENTITLEMENTS)])
    c3, _ = client(h3)
    c3.entitlements()
    assert "idempotency-key" not in h3.requests[0].headers


def test_robot_commands_retry_503_but_never_504_or_500() -> None:
    ok = {"status": "ok", "result": {"ok": True, "cmd_id": "c1", "command": "go_home", "robot_id": "rbt_1"}}
    h = Recorder([status(503, error_body("robot_offline")), status(200, ok)])
    c, waits = client(h)
    result = c.robots.go_home("rbt_1")
    assert result.ok and len(h.requests) == 2 and len(waits) == 1
    for code, http, cls in [
        ("command_timeout", 504, errors.CommandTimeoutError),
        ("internal", 500, errors.InternalError),
    ]:
        h = Recorder([status(http, error_body(code))])
        c, waits = client(h)
        with pytest.raises(cls):
            c.robots.go_home("rbt_1")
        assert len(h.requests) == 1 and waits == []


def test_a_decline_is_a_result() -> None:
    declined = {
        "status": "ok",
        "result": {
            "ok": False,
            "error": {"code": "invalid_state", "message": "stack stopped"},
            "cmd_id": "c1",
            "command": "go_home",
            "robot_id": "rbt_1",
        },
    }
    c, _ = client(Recorder([status(200, declined, {"idempotent-replayed": "true"})]))
    r = c.robots.go_home("rbt_1")
    assert r.declined and r.error == fleet.CommandDecline("invalid_state", "stack stopped") and r.replayed


def test_a_network_failure_becomes_fleet_connection_error_after_the_retries() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    h = Recorder([refuse])
    c, waits = client(h, retry=fleet.RetryPolicy(schedule=(0.0,), jitter=0))
    with pytest.raises(errors.FleetConnectionError) as info:
        c.entitlements()
    assert len(h.requests) == 2 and waits == [0.0]
    assert KEY not in str(info.value)


def test_patch_is_not_retried_after_a_5xx() -> None:
    h = Recorder([status(500, error_body("internal"))])
    c, waits = client(h)
    with pytest.raises(errors.InternalError):
        c.episodes.annotate("ep_1", {"qa": "ok"})
    assert len(h.requests) == 1 and waits == []


def test_the_key_is_in_no_repr_log_or_exception(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    h = Recorder(
        [status(429, error_body("rate_limited"), {"retry-after": "0"}), status(401, error_body("unauthenticated"))]
    )
    c, _ = client(h)
    with pytest.raises(errors.UnauthenticatedError) as info:
        c.entitlements()
    texts = [repr(c), str(c), str(info.value), repr(info.value), caplog.text, repr(c.http)]
    assert all(KEY not in t for t in texts), texts
    assert h.requests[0].headers["authorization"] == f"Bearer {KEY}"


def test_a_malformed_key_is_refused_before_sending_without_quoting_it() -> None:
    bad = "ak_short"
    with pytest.raises(errors.MalformedApiKeyError) as info:
        fleet.Fleet(url=URL, api_key=bad)
    assert bad not in str(info.value) and "after ak_" in str(info.value)


def test_url_and_key_fall_back_to_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEET_URL", "http://env.test/v1/")
    monkeypatch.setenv("FLEET_API_KEY", KEY)
    h = Recorder([status(200, ENTITLEMENTS)])
    c = fleet.Fleet(transport=httpx.MockTransport(h))
    c.entitlements()
    assert str(h.requests[0].url) == "http://env.test/v1/entitlements"
    assert h.requests[0].headers["authorization"] == f"Bearer {KEY}"
    monkeypatch.delenv("FLEET_URL")
    with pytest.raises(ValueError, match="FLEET_URL"):
        fleet.Fleet()


def test_arguments_the_types_refuse_are_refused_before_sending() -> None:
    h = Recorder([status(200, {})])
    c, _ = client(h)
    with pytest.raises(ValueError):
        c.datasets.create(name="", filter={})
    with pytest.raises(ValueError):
        c.episodes.list(limit=0)
    with pytest.raises(ValueError):
        c.episodes.list(outcome="great")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        c.api_keys.create(name="x", scopes=["root"])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        c.episodes.list(colour="red")  # type: ignore[call-arg]
    with pytest.raises(ValueError):
        c.robots.command("rbt_1", "self-destruct")
    assert h.requests == []


def test_filters_are_encoded_as_query_pairs() -> None:
    h = Recorder([status(200, {"episodes": [], "cursor": None})])
    c, _ = client(h)
    c.episodes.list(task_id="pick", metadata={"site": "lab&2", "n": 3}, annotation={"qa": True}, limit=10)
    q = h.requests[0].url.params
    assert (
        q["task_id"] == "pick"
        and q["metadata.site"] == "lab&2"
        and q["metadata.n"] == "3"
        and q["annotation.qa"] == "true"
        and q["limit"] == "10"
    )


def test_presence_filters_are_encoded_as_true_or_false_and_checked_before_sending() -> None:
    h = Recorder([status(200, {"episodes": [], "cursor": None})])
    c, _ = client(h)
    c.episodes.list(has_annotation={"qa_status": False, "a&b": True}, has_metadata={"site": True})
    q = h.requests[0].url.params
    assert (
        q["has_annotation.qa_status"] == "false"
        and q["has_annotation.a&b"] == "true"
        and q["has_metadata.site"] == "true"
    )
    for bad in ({"qa_status": "false"}, {"qa_status": 0}, {"": True}, {"k" * 257: True}):
        with pytest.raises(ValueError):
            c.episodes.list(has_annotation=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        c.episodes.list(has_metadata=["site"])  # type: ignore[arg-type]
    assert len(h.requests) == 1


def test_a_dataset_of_keyword_presence_filters_stores_their_string_form() -> None:
    h = Recorder(
        [
            status(
                201,
                {
                    "id": "ds_1",
                    "name": "todo",
                    "description": None,
                    "filter": {"has_annotation.qa_status": "false"},
                    "snapshot_at": None,
                    "episode_count": None,
                    "created_by": "key_1",
                    "created_at": "2026-01-01T00:00:00.000Z",
                },
            )
        ]
    )
    c, _ = client(h)
    c.datasets.create(name="todo", has_annotation={"qa_status": False})
    assert json.loads(h.requests[0].content)["filter"] == {"has_annotation.qa_status": "false"}


class DroppingStream(httpx.SyncByteStream):
    """Sends some lines, then fails as a dropped connection would."""

    def __init__(self, lines: list[bytes], drop_after: int | None) -> None:
        self.lines = lines
        self.drop_after = drop_after

    def __iter__(self) -> Iterator[bytes]:
        for i, line in enumerate(self.lines):
            if self.drop_after is not None and i == self.drop_after:
                raise httpx.ReadError("connection reset")
            yield line


def test_an_export_resumes_a_dropped_page_without_repeating_or_losing_a_line() -> None:
    rows = [json.dumps({"n": i}).encode() + b"\n" for i in range(5)]
    calls: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        cursor = request.url.params.get("cursor")
        if cursor is None:
            drop = 2 if len(calls) == 1 else None
            return httpx.Response(200, stream=DroppingStream(rows[:3], drop), headers={"x-next-cursor": "c2"})
        return httpx.Response(200, stream=DroppingStream(rows[3:], None))

    c, waits = client(Recorder([handler]))
    got = [line["n"] for line in c.episodes.export_lines()]
    assert got == [0, 1, 2, 3, 4]
    assert len(calls) == 3 and len(waits) == 1
    assert calls[1].url.params.get("cursor") is None and calls[2].url.params["cursor"] == "c2"


def test_a_line_that_is_not_json_is_a_stream_error() -> None:
    c, _ = client(Recorder([lambda _r: httpx.Response(200, content=b'{"n":1}\nnot json\n')]))
    with pytest.raises(errors.FleetStreamError) as info:
        list(c.episodes.export_lines())
    assert info.value.reason == "invalid_json"


def test_the_async_client_follows_the_same_rules() -> None:
    async def run() -> None:
        h = Recorder([status(429, error_body("rate_limited"), {"retry-after": "1"}), status(200, ENTITLEMENTS)])
        waits: list[float] = []

        async def sleep(s: float) -> None:
            waits.append(s)

        async with fleet.AsyncFleet(url=URL, api_key=KEY, transport=httpx.MockTransport(h), sleep=sleep) as c:
            assert (await c.entitlements()).tier == "free"
        assert waits == [1.0] and len(h.requests) == 2

    asyncio.run(run())


def test_the_sync_client_is_generated_from_the_async_one() -> None:
    import importlib.util
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "scripts" / "unasync.py"
    spec = importlib.util.spec_from_file_location("unasync", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--check"]) == 0, (
        "python/src/fleet/_sync_client.py is out of date: run python python/scripts/unasync.py"
    )


def test_timeouts_are_configurable() -> None:
    c = fleet.Fleet(url=URL, api_key=KEY, timeout=httpx.Timeout(5.0, connect=2.0))
    assert (c.http.timeout.read, c.http.timeout.connect) == (5.0, 2.0)
    assert fleet.Fleet(url=URL, timeout=7).http.timeout.read == 7


def test_a_failed_export_to_file_leaves_no_file(tmp_path: Any) -> None:
    c, _ = client(Recorder([lambda _r: httpx.Response(200, content=b'{"n":1}\nnot json\n')]))
    with pytest.raises(errors.FleetStreamError):
        c.episodes.export_to_file(tmp_path / "out.ndjson")
    assert list(tmp_path.iterdir()) == []
