"""The SSE parser and ``fleet.events`` streams: against scripted servers (httpx.MockTransport and
a threaded http.server on a real socket), then against a real cloud when FLEET_URL and
FLEET_API_KEY are set (with robots of ``fleet-sim`` making the events)."""

from __future__ import annotations

import json
import os
import socket
import socketserver
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from fleet._sse import SseComment, SseMessage, SseParser, SsePosition, SseRetry
from fleet.errors import FleetConnectionError, FleetStreamError, InsufficientScopeError, UnauthenticatedError
from fleet.events import AsyncEventStream, EpisodeEvent, EventStream, Reconnect, RobotStatusChange

# ---------------------------------------------------------------------------------------------
# The parser


def parse(*chunks: bytes) -> list[Any]:
    p = SseParser()
    out: list[Any] = []
    for c in chunks:
        out.extend(p.feed(c))
    return out


def test_parser_reads_the_clouds_frames() -> None:
    body = b'retry: 2000\n\nid: evt_start\n\n: heartbeat\n\nid: evt_a\nevent: robot.status\ndata: {"x":1}\n\n'
    assert parse(body) == [
        SseRetry(2000),
        SsePosition("evt_start"),
        SseComment("heartbeat"),
        SseMessage("evt_a", "robot.status", '{"x":1}'),
    ]


def test_parser_takes_every_line_ending_also_split_across_chunks() -> None:
    # CRLF split between two chunks must end one line, not two (which would dispatch early).
    items = parse(b"\xef\xbb\xbfid: 1\r", b"\ndata: a\r", b"\r", b"data:b\n", b"data:  c\r\n\r\n")
    # Only one leading space goes: "data:  c" keeps the second.
    assert items == [SseMessage("1", "message", "a"), SseMessage("1", "message", "b\n c")]
    items = parse(b"id: 1\r\ndata: a\r\n\r\n", b"data: b\rdata:c\n\n")
    # The id carries over to later events, as the standard says.
    assert items == [SseMessage("1", "message", "a"), SseMessage("1", "message", "b\nc")]


def test_parser_joins_data_lines_and_ignores_what_it_must() -> None:
    items = parse(b"data: one\ndata: two\nfoo: bar\nid: x\0y\nretry: 1s\n\n", b"data: dropped unfinished")
    assert items == [SseMessage(None, "message", "one\ntwo")]


def test_parser_decodes_utf8_split_inside_a_character() -> None:
    text = 'data: {"name":"bras-épaule"}\n\n'.encode()
    cut = text.index("é".encode()) + 1
    assert parse(text[:cut], text[cut:]) == [SseMessage(None, "message", '{"name":"bras-épaule"}')]


def test_parser_refuses_a_line_past_its_bound() -> None:
    p = SseParser(max_length=64)
    with pytest.raises(FleetStreamError) as e:
        p.feed(b"data: " + b"x" * 100)
    assert e.value.reason == "line_too_long"


# ---------------------------------------------------------------------------------------------
# A scripted server: a log of events; each connection replays after Last-Event-ID, then does
# what its script says (drop mid-frame, end, go silent, or answer an error).


def robot_status(robot: str, online: bool) -> str:
    return json.dumps(
        {"schema_version": 1, "robot_id": robot, "online": online, "recording_state": "idle", "last_seen_at": None}
    )


def finalized(seq: int) -> str:
    return json.dumps(
        {
            "schema_version": 1,
            "episode_id": f"ep_{seq}",
            "robot_id": "rbt_1",
            "recording_session_id": "rs_1",
            "episode_seq": seq,
            "state": "reported",
        }
    )


LOG = [
    (
        f"evt_{i:02d}",
        "robot.status" if i % 2 else "episode.finalized",
        robot_status("rbt_1", True) if i % 2 else finalized(i),
    )
    for i in range(1, 9)
]


def frame(event_id: str, kind: str, data: str) -> bytes:
    return f"id: {event_id}\nevent: {kind}\ndata: {data}\n\n".encode()


@dataclass
class Step:
    """One connection: send `events` frames (None: all), then `then` (drop, end, silent, or an HTTP status)."""

    events: int | None = None
    then: str = "end"
    status: int = 200
    replay_from: int | None = None  # send from this log index instead of after Last-Event-ID
    retry_after: str | None = None


class Chunks(httpx.SyncByteStream, httpx.AsyncByteStream):
    def __init__(self, chunks: list[bytes], fault: Exception | None) -> None:
        self.chunks = chunks
        self.fault = fault

    def __iter__(self) -> Iterator[bytes]:
        yield from self.chunks
        if self.fault is not None:
            raise self.fault

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for c in self.chunks:
            yield c
        if self.fault is not None:
            raise self.fault


@dataclass
class ScriptedServer:
    steps: list[Step]
    seen_last_ids: list[str | None] = field(default_factory=list)
    queries: list[str] = field(default_factory=list)

    def handle(self, request: httpx.Request) -> httpx.Response:
        step = self.steps[len(self.seen_last_ids)] if len(self.seen_last_ids) < len(self.steps) else Step(status=401)
        last = request.headers.get("last-event-id")
        self.seen_last_ids.append(last)
        self.queries.append(str(request.url.query, "ascii"))
        if step.status != 200:
            headers = {"retry-after": step.retry_after} if step.retry_after else {}
            code = {401: "unauthenticated", 403: "insufficient_scope", 503: "not_ready", 429: "rate_limited"}[
                step.status
            ]
            return httpx.Response(
                step.status,
                headers=headers,
                json={"error": {"code": code, "message": "scripted", "request_id": "req_1"}},
            )
        ids = [e[0] for e in LOG]
        # evt_00 is the position before the first event: where a stream without Last-Event-ID starts.
        start = step.replay_from if step.replay_from is not None else ids.index(last) + 1 if last in ids else 0
        rest = LOG[start:] if step.events is None else LOG[start : start + step.events]
        position = last or "evt_00"
        body = (
            b"retry: 2000\n\n" + f"id: {position}\n\n".encode() + b": heartbeat\n\n" + b"".join(frame(*e) for e in rest)
        )
        # Chunks cut at odd places, so that frames and line ends straddle them.
        chunks = [body[i : i + 7] for i in range(0, len(body), 7)]
        fault: Exception | None = None
        if step.then == "drop":
            chunks.append(b"id: evt_half\nevent: robot.st")  # a frame cut off by the drop
            fault = httpx.ReadError("connection reset by peer")
        elif step.then == "silent":
            fault = httpx.ReadTimeout("timed out")
        return httpx.Response(
            200, headers={"content-type": "text/event-stream; charset=utf-8"}, stream=Chunks(chunks, fault)
        )


class Waits:
    def __init__(self) -> None:
        self.waits: list[float] = []

    def __call__(self, s: float) -> None:
        self.waits.append(s)

    async def asleep(self, s: float) -> None:
        self.waits.append(s)


def sync_stream(server: ScriptedServer, waits: Waits, **kw: Any) -> EventStream:
    http = httpx.Client(
        base_url="http://fleet.test",
        transport=httpx.MockTransport(server.handle),
        headers={"authorization": "Bearer ak_test"},
    )
    return EventStream(http, sleep=waits, random=lambda: 0.5, **kw)


def take(stream: EventStream, n: int) -> list[str]:
    ids = [e.id for _, e in zip(range(n), stream, strict=False)]
    stream.close()
    return ids


ALL_IDS = [e[0] for e in LOG]


def test_resumes_after_a_dropped_connection_with_nothing_lost_or_repeated() -> None:
    server = ScriptedServer([Step(events=3, then="drop"), Step(events=2, then="end"), Step()])
    waits = Waits()
    reconnects: list[Reconnect] = []
    stream = sync_stream(server, waits, on_reconnect=reconnects.append)
    assert take(stream, len(LOG)) == ALL_IDS
    assert server.seen_last_ids == [None, "evt_03", "evt_05"]
    # The server's retry: 2000, jitter at its midpoint; the second drop follows a good open.
    assert waits.waits == [2.0, 2.0]
    assert isinstance(reconnects[0].error, FleetConnectionError) and reconnects[0].last_event_id == "evt_03"


def test_events_are_typed_by_type() -> None:
    server = ScriptedServer([Step(events=2)])
    events = list(zip(range(2), sync_stream(server, Waits()), strict=False))
    first, second = (e for _, e in events)
    assert isinstance(first, RobotStatusChange) and first.data.online is True and first.type == "robot.status"
    assert isinstance(second, EpisodeEvent) and second.data.episode_seq == 2 and second.type == "episode.finalized"


def test_never_yields_an_event_twice_when_a_server_replays_older_ones() -> None:
    server = ScriptedServer([Step(events=4, then="drop"), Step(replay_from=1, then="end")])
    assert take(sync_stream(server, Waits()), len(LOG)) == ALL_IDS


def test_a_connection_silent_past_its_heartbeat_is_replaced() -> None:
    server = ScriptedServer([Step(events=2, then="silent"), Step()])
    reconnects: list[Reconnect] = []
    assert (
        take(sync_stream(server, Waits(), on_reconnect=reconnects.append, heartbeat_timeout_s=45), len(LOG)) == ALL_IDS
    )
    assert server.seen_last_ids == [None, "evt_02"]
    assert "nothing received for 45 s" in str(reconnects[0].error)


def test_resumes_from_the_position_the_server_started_at_when_no_event_came() -> None:
    server = ScriptedServer([Step(events=0, then="drop"), Step(events=1)])
    assert take(sync_stream(server, Waits()), 1) == ["evt_01"]
    assert server.seen_last_ids == [None, "evt_00"]


def test_sends_types_robot_and_last_event_id() -> None:
    server = ScriptedServer([Step(events=1)])
    stream = sync_stream(
        server, Waits(), types=["robot.status", "episode.finalized"], robot_id="rbt_1", last_event_id="evt_02"
    )
    assert take(stream, 1) == ["evt_03"]
    assert server.seen_last_ids == ["evt_02"]
    assert server.queries == ["types=robot.status%2Cepisode.finalized&robot_id=rbt_1"]


def test_refuses_bad_options_before_sending() -> None:
    server = ScriptedServer([])
    with pytest.raises(ValueError):
        sync_stream(server, Waits(), types=["robot.state"])
    with pytest.raises(TypeError):
        sync_stream(server, Waits(), types="robot.status")
    with pytest.raises(ValueError):
        sync_stream(server, Waits(), last_event_id="42")
    assert server.seen_last_ids == []


def test_a_4xx_raises_the_api_error_and_is_not_retried() -> None:
    server = ScriptedServer([Step(status=401)])
    with pytest.raises(UnauthenticatedError):
        take(sync_stream(server, Waits()), 1)
    server = ScriptedServer([Step(events=1, then="drop"), Step(status=403)])
    waits = Waits()
    stream = sync_stream(server, waits)
    assert next(stream).id == "evt_01"
    with pytest.raises(InsufficientScopeError):
        next(stream)
    assert len(server.seen_last_ids) == 2 and waits.waits == [2.0]


def test_a_503_after_the_first_connection_is_waited_out_honouring_retry_after() -> None:
    server = ScriptedServer([Step(events=1, then="drop"), Step(status=503, retry_after="7"), Step()])
    waits = Waits()
    assert take(sync_stream(server, waits), len(LOG)) == ALL_IDS
    assert waits.waits == [2.0, 7.0]


def test_the_first_connection_failing_raises_at_once() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused")

    http = httpx.Client(base_url="http://fleet.test", transport=httpx.MockTransport(refuse))
    with pytest.raises(FleetConnectionError):
        next(EventStream(http, sleep=Waits()))


def test_reconnections_back_off_and_are_bounded() -> None:
    opened = threading.Event()

    def handle(request: httpx.Request) -> httpx.Response:
        if opened.is_set():
            raise httpx.ConnectError("connection refused")
        opened.set()
        return ScriptedServer([Step(events=1, then="drop")]).handle(request)

    waits = Waits()
    http = httpx.Client(base_url="http://fleet.test/v1/", transport=httpx.MockTransport(handle))
    stream = EventStream(http, sleep=waits, random=lambda: 0.5, max_attempts=7)
    assert next(stream).id == "evt_01"
    with pytest.raises(FleetConnectionError):
        next(stream)
    assert waits.waits == [2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]


def test_a_frame_that_is_not_its_payload_is_a_stream_error() -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, headers={"content-type": "text/event-stream"}, content=frame("evt_1", "robot.status", '{"robot_id":1}')
        )

    http = httpx.Client(base_url="http://fleet.test", transport=httpx.MockTransport(handle))
    with pytest.raises(FleetStreamError) as e:
        next(EventStream(http, sleep=Waits()))
    assert e.value.reason == "invalid_event"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_async_stream_resumes_after_drops_and_silence() -> None:
    server = ScriptedServer([Step(events=3, then="drop"), Step(events=2, then="silent"), Step()])
    waits = Waits()
    http = httpx.AsyncClient(base_url="http://fleet.test", transport=httpx.MockTransport(server.handle))
    stream = AsyncEventStream(http, sleep=waits.asleep, random=lambda: 0.5)
    ids: list[str] = []
    async for e in stream:
        ids.append(e.id)
        if len(ids) == len(LOG):
            break
    await stream.aclose()
    await http.aclose()
    assert ids == ALL_IDS
    assert server.seen_last_ids == [None, "evt_03", "evt_05"]


# ---------------------------------------------------------------------------------------------
# A real socket: a threaded http.server whose connections really drop and really go silent, so
# httpx's own read timeout is what replaces the silent one.


class SseHandler(BaseHTTPRequestHandler):
    server: SseServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        srv = self.server
        last = self.headers.get("last-event-id")
        n = len(srv.seen)
        srv.seen.append(last)
        ids = [e[0] for e in LOG]
        start = ids.index(last) + 1 if last in ids else 0
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        self.wfile.write(b"retry: 10\n\n")
        if n == 0:
            # Two events, half a third, then the socket closes under the client.
            self.wfile.write(b"".join(frame(*e) for e in LOG[start : start + 2]) + frame(*LOG[start + 2])[:20])
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
        elif n == 1:
            # One event, then silence until the client gives up on this connection.
            self.wfile.write(frame(*LOG[start]))
            self.wfile.flush()
            srv.release.wait(30)
        else:
            self.wfile.write(b"".join(frame(*e) for e in LOG[start:]))
            self.wfile.flush()


class SseServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), SseHandler)
        self.seen: list[str | None] = []
        self.release = threading.Event()


def test_real_socket_drop_and_silence() -> None:
    srv = SseServer()
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        http = httpx.Client(base_url=f"http://127.0.0.1:{srv.server_address[1]}")
        stream = EventStream(http, heartbeat_timeout_s=0.5, sleep=lambda s: None)
        assert take(stream, len(LOG)) == ALL_IDS
        assert srv.seen == [None, "evt_02", "evt_03"]
    finally:
        srv.release.set()
        srv.shutdown()
        srv.server_close()


# ---------------------------------------------------------------------------------------------
# The real cloud: robots of fleet-sim make events; the stream goes through a TCP proxy that
# cuts every connection mid-stream; a second stream replayed from the first id is the truth.

FLEET_URL = os.environ.get("FLEET_URL")
FLEET_API_KEY = os.environ.get("FLEET_API_KEY")
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SIM_CLI = os.path.join(REPO, "simulator", "dist", "cli.js")

live = pytest.mark.skipif(
    not (FLEET_URL and FLEET_API_KEY), reason="FLEET_URL and FLEET_API_KEY are not set (no cloud to test against)"
)


class CuttingProxy:
    """A TCP proxy to the cloud whose open connections ``cut()`` closes at once (both sides)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.conns: list[socket.socket] = []
        self.lock = threading.Lock()
        proxy = self

        class Pipe(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                upstream = socket.create_connection(proxy.target)
                with proxy.lock:
                    proxy.conns += [self.request, upstream]
                t = threading.Thread(target=proxy.pump, args=(upstream, self.request), daemon=True)
                t.start()
                proxy.pump(self.request, upstream)
                t.join()

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Pipe)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.port = self.server.server_address[1]

    @staticmethod
    def pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self) -> None:
        with self.lock:
            conns, self.conns = self.conns, []
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        self.cut()
        self.server.shutdown()
        self.server.server_close()


def admin_http() -> httpx.Client:
    assert FLEET_URL and FLEET_API_KEY
    return httpx.Client(
        base_url=FLEET_URL.rstrip("/").removesuffix("/v1"),
        headers={"authorization": f"Bearer {FLEET_API_KEY}"},
        timeout=30,
    )


@pytest.fixture
def simulated_robots(tmp_path: Any) -> Iterator[list[str]]:
    """Two fleet-sim robots recording an episode every few seconds (the events to stream)."""
    import shutil
    import subprocess

    node = shutil.which("node")
    if node is None or not os.path.exists(SIM_CLI):
        pytest.skip("node or simulator/dist/cli.js is missing (run npm run build)")
    with admin_http() as http:
        r = http.post(
            "/v1/robots/enrollment-tokens",
            json={"max_uses": 2, "name_prefix": "pysdk-events"},
            headers={"idempotency-key": str(uuid.uuid4())},
        )
        r.raise_for_status()
        token = r.json()["token"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
    env["FLEET_SIM_TOKEN"] = token  # in the environment: a flag would show in ps
    args = [
        node,
        SIM_CLI,
        "fleet",
        "--api",
        FLEET_URL or "",
        "--count",
        "2",
        "--data-dir",
        str(tmp_path / "sim"),
        "--auto-episodes",
        "120",
        "--subtask-ms",
        "200",
        "--no-sync",
        "--log-level",
        "warn",
    ]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith('{"robots":'):
                robots: list[str] = json.loads(line)["robots"]
                break
        else:
            raise AssertionError(f"fleet-sim ended before its robots connected (exit {proc.wait()})")
        yield robots
    finally:
        proc.terminate()
        proc.wait(30)


def drain(stream: EventStream, n: int, each: Callable[[int], None] = lambda i: None) -> list[str]:
    ids: list[str] = []
    for e in stream:
        ids.append(e.id)
        each(len(ids))
        if len(ids) == n:
            break
    stream.close()
    return ids


@live
def test_live_stream_resumed_after_a_cut_connection_loses_and_repeats_nothing(simulated_robots: list[str]) -> None:
    assert FLEET_URL
    url = httpx.URL(FLEET_URL)
    proxy = CuttingProxy((url.host, url.port or (443 if url.scheme == "https" else 80)))
    reconnects: list[Reconnect] = []
    try:
        headers = {"authorization": f"Bearer {FLEET_API_KEY}"}
        with httpx.Client(base_url=f"{url.scheme}://127.0.0.1:{proxy.port}", headers=headers) as http:
            stream = EventStream(http, sleep=lambda s: None, on_reconnect=reconnects.append, max_attempts=3)
            # Cut every connection after the 3rd and the 7th event: whatever the cloud had sent
            # and the client had not yet read is gone with the socket.
            got = drain(stream, 10, lambda i: proxy.cut() if i in (3, 7) else None)
    finally:
        proxy.close()
    assert len(reconnects) >= 2
    assert len(set(got)) == len(got)
    # The truth: the log replayed from the first id, on a connection nobody cuts.
    with admin_http() as http:
        truth = drain(EventStream(http, last_event_id=got[0], max_attempts=1), len(got) - 1)
    assert got[1:] == truth
