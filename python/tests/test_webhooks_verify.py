"""``fleet.webhooks.verify``: against headers made by the cloud's own signer (``@fleet/protocol``,
run in node), the documented worked example, and, when FLEET_URL and FLEET_API_KEY are set, real
deliveries of the cloud to an HTTPS receiver in this test (which needs the cloud started with
``--egress-allow-loopback --egress-ca-file <CA>``, a certificate for 127.0.0.1 it trusts and its
key in FLEET_TEST_TLS_CERT_FILE and FLEET_TEST_TLS_KEY_FILE)."""

from __future__ import annotations

import json
import os
import queue
import shutil
import ssl
import subprocess
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from fleet._signature import SIGNATURE_HEADER, WebhookSignatureError, sign, verify
from fleet.errors import FleetError

SECRET = "whsec_receiver_test_secret_0123456789"
OTHER = "whsec_the_other_one_9876543210"
BODY = b'{"schema_version":1,"episode_id":"ep_1","robot_id":"rbt_1","recording_session_id":"rs_1","episode_seq":1,"state":"reported"}'
T = 1_795_435_200
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PROTOCOL = os.path.join(REPO, "packages", "protocol", "dist", "index.js")


def cloud_sign(body: bytes, secrets: list[str], t: int) -> str:
    """The header as the cloud's signer (packages/protocol signPayload) makes it."""
    node = shutil.which("node")
    if node is None or not os.path.exists(PROTOCOL):
        pytest.skip("node or packages/protocol/dist is missing (run npm run build)")
    script = (
        f"import {{ signPayload }} from {json.dumps(PROTOCOL)};"
        "const a = JSON.parse(process.argv[1]);"
        "process.stdout.write(signPayload(Buffer.from(a.body, 'base64'), a.secrets, a.t));"
    )
    import base64

    arg = json.dumps({"body": base64.b64encode(body).decode(), "secrets": secrets, "t": t})
    out = subprocess.run([node, "--input-type=module", "-e", script, arg], capture_output=True, text=True, check=True)
    return out.stdout


def reason(body: bytes, header: str | None, secret: Any = SECRET, **kw: Any) -> str:
    with pytest.raises(WebhookSignatureError) as e:
        verify(body, header, secret, **kw)
    # Whatever failed, the secret is in neither the message nor the repr.
    for s in [SECRET, OTHER]:
        assert s not in str(e.value) and s not in repr(e.value)
    return e.value.reason


def test_the_documented_worked_example() -> None:
    header = "t=1700000000,v1=2958067fb341f4107d85bd87e4ead1f3673785de39f70550579ce7f6177964ff"
    assert sign(b'{"hello":"world"}', "whsec_example", 1_700_000_000) == header
    verify(b'{"hello":"world"}', header, "whsec_example", now=1_700_000_000)


def test_accepts_what_the_cloud_signs() -> None:
    header = cloud_sign(BODY, [SECRET], T)
    assert header == sign(BODY, SECRET, T)
    verify(BODY, header, SECRET, now=T + 10)
    verify(bytearray(BODY), header, SECRET, now=T - 10)


def test_a_rotation_header_matches_by_either_entry() -> None:
    header = cloud_sign(BODY, [OTHER, SECRET], T)
    assert header.count("v1=") == 2
    verify(BODY, header, SECRET, now=T)
    verify(BODY, header, OTHER, now=T)
    # A receiver holding both secrets while it rolls over: one of them matching is enough.
    verify(BODY, cloud_sign(BODY, [OTHER], T), [SECRET, OTHER], now=T)


def test_a_tampered_body_or_the_wrong_secret_is_a_mismatch() -> None:
    header = cloud_sign(BODY, [SECRET], T)
    assert reason(BODY.replace(b'"episode_seq":1', b'"episode_seq":2'), header, now=T) == "mismatch"
    assert reason(BODY + b"\n", header, now=T) == "mismatch"
    assert reason(BODY, header, OTHER, now=T) == "mismatch"
    # The same MAC under another timestamp is another signature.
    assert reason(BODY, header.replace(f"t={T}", f"t={T + 1}"), now=T) == "mismatch"


def test_stale_past_the_tolerance_either_way() -> None:
    header = sign(BODY, SECRET, T)
    verify(BODY, header, SECRET, now=T + 300)
    verify(BODY, header, SECRET, now=T - 300)
    assert reason(BODY, header, now=T + 301) == "stale"
    assert reason(BODY, header, now=T - 301) == "stale"
    assert reason(BODY, header, now=T + 61, tolerance_s=60) == "stale"


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "garbage",
        f"t={T}",
        "v1=" + "0" * 64,
        f"t=abc,v1={'0' * 64}",
        f"t={T},v1={'0' * 63}",
        f"t={T},v1={'A' * 64}",
        f"t={T},v0={'0' * 64}",
        f"t={T}," + ",".join(["v1=" + "0" * 64] * 200),
    ],
)
def test_malformed_headers(header: str | None) -> None:
    assert reason(BODY, header, now=T) == "malformed"


def test_bad_arguments_are_refused_with_a_type_error() -> None:
    header = sign(BODY, SECRET, T)
    with pytest.raises(TypeError):
        verify(BODY.decode(), header, SECRET, now=T)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        verify(BODY, header, [], now=T)
    with pytest.raises(ValueError):
        verify(BODY, header, SECRET, tolerance_s=-1, now=T)


def test_the_error_is_a_fleet_error() -> None:
    assert issubclass(WebhookSignatureError, FleetError)


# ---------------------------------------------------------------------------------------------
# Real deliveries from the cloud.

FLEET_URL = os.environ.get("FLEET_URL")
FLEET_API_KEY = os.environ.get("FLEET_API_KEY")
# test/python-sdk.test.ts names them FLEET_TEST_TLS_CERT_FILE and FLEET_TEST_TLS_KEY_FILE.
TLS_CERT = os.environ.get("FLEET_TEST_TLS_CERT_FILE")
TLS_KEY = os.environ.get("FLEET_TEST_TLS_KEY_FILE")


@dataclass
class Delivery:
    body: bytes
    headers: dict[str, str]


class Receiver(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), ReceiverHandler)
        self.deliveries: queue.Queue[Delivery] = queue.Queue()


class ReceiverHandler(BaseHTTPRequestHandler):
    server: Receiver

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length", "0")))
        self.server.deliveries.put(Delivery(raw, {k.lower(): v for k, v in self.headers.items()}))
        self.send_response(204)
        self.end_headers()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    if not (FLEET_URL and FLEET_API_KEY):
        pytest.skip("FLEET_URL and FLEET_API_KEY are not set (no cloud to test against)")
    if not (TLS_CERT and TLS_KEY):
        pytest.skip(
            "FLEET_TEST_TLS_CERT_FILE and FLEET_TEST_TLS_KEY_FILE are not set (the cloud delivers webhooks over HTTPS only)"
        )
    srv = Receiver()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(TLS_CERT, TLS_KEY)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()


def post(http: httpx.Client, path: str, body: Any = None) -> Any:
    r = http.post(path, json=body, headers={"idempotency-key": str(uuid.uuid4())})
    assert r.is_success, r.text
    return r.json() if r.content else None


def test_a_real_delivery_verifies_and_is_refused_when_tampered_or_stale(receiver: Receiver) -> None:
    assert FLEET_URL
    base = FLEET_URL.rstrip("/").removesuffix("/v1")
    with httpx.Client(base_url=base, headers={"authorization": f"Bearer {FLEET_API_KEY}"}, timeout=30) as http:
        sub = post(
            http,
            "/v1/webhooks",
            {"url": f"https://127.0.0.1:{receiver.server_address[1]}/hooks", "events": ["episode.finalized"]},
        )
        try:
            sent = post(http, f"/v1/webhooks/{sub['id']}/test")
            d = receiver.deliveries.get(timeout=30)
            assert d.headers["x-service-event-id"] == sent["event_id"]
            header = d.headers[SIGNATURE_HEADER.lower()]
            verify(d.body, header, sub["secret"])
            assert json.loads(d.body)["test"] is True
            assert reason(d.body.replace(b'"test":true', b'"test":false'), header, sub["secret"]) == "mismatch"
            t = int(header.split(",")[0].removeprefix("t="))
            assert reason(d.body, header, sub["secret"], now=t + 301) == "stale"

            # During a rotation the cloud signs with both secrets: either verifies alone.
            rotated = post(http, f"/v1/webhooks/{sub['id']}/rotate-secret")
            post(http, f"/v1/webhooks/{sub['id']}/test")
            d = receiver.deliveries.get(timeout=30)
            header = d.headers[SIGNATURE_HEADER.lower()]
            assert header.count("v1=") == 2
            verify(d.body, header, rotated["secret"])
            verify(d.body, header, sub["secret"])
            assert reason(d.body, header, "whsec_not_this_one_at_all") == "mismatch"
        finally:
            http.delete(f"/v1/webhooks/{sub['id']}")
