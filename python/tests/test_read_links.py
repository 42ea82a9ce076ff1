"""``episodes.read_links``: the request and its typed errors against a MockTransport, then the
links themselves against the live cloud, its reference grant provider and the moto bucket."""

from __future__ import annotations

import asyncio
import hashlib
import json
from typing import Any

import httpx
import pytest

import fleet
from fleet import errors, models

from .conftest import LiveEnv
from .test_transport import KEY, URL, Recorder, client, error_body, status

LINKS = {
    "episode_id": "ep_1",
    "destination_id": "dst_1",
    "files": [
        {
            "path": "recording.mcap",
            "url": "https://bucket.test/k?X-Amz-Signature=s",
            "expires_at": "2026-06-01T00:15:00Z",
            "destination_id": "dst_1",
            "size_bytes": 10,
            "sha256": "a" * 64,
        }
    ],
}


def test_read_links_posts_the_body_asked_and_answers_the_model() -> None:
    h = Recorder([status(200, LINKS)])
    c, _ = client(h)
    links = c.episodes.read_links("ep_1")
    assert isinstance(links, models.ReadLinks) and links.files[0].path == "recording.mcap"
    c.episodes.read_links("ep 1/x", destination_id="dst_1", files=["recording.mcap", "meta.json"])
    first, second = h.requests
    assert first.method == "POST" and first.url.raw_path == b"/v1/episodes/ep_1/read-links"
    assert json.loads(first.content) == {} and first.headers["idempotency-key"]
    # The id is one path segment, whatever it holds.
    assert second.url.raw_path == b"/v1/episodes/ep%201%2Fx/read-links"
    assert json.loads(second.content) == {"destination_id": "dst_1", "files": ["recording.mcap", "meta.json"]}


def test_read_links_arguments_the_schema_refuses_are_refused_before_sending() -> None:
    h = Recorder([status(200, LINKS)])
    c, _ = client(h)
    for files, destination in (([], None), ([f"f{i}" for i in range(65)], None), (None, "")):
        with pytest.raises(ValueError):
            c.episodes.read_links("ep_1", files=files, destination_id=destination)
    with pytest.raises(TypeError):
        c.episodes.read_links("ep_1", files="recording.mcap")
    assert h.requests == []


@pytest.mark.parametrize(
    ("status_code", "code", "cls"),
    [
        (403, "read_links_refused", errors.ReadLinksRefusedError),
        (409, "replica_not_verified", errors.ReplicaNotVerifiedError),
        (501, "read_links_unsupported", errors.ReadLinksUnsupportedError),
        (502, "provider_failed", errors.ProviderFailedError),
        (502, "read_origin_not_allowed", errors.ReadOriginNotAllowedError),
        (504, "provider_timeout", errors.ProviderTimeoutError),
    ],
)
def test_each_read_links_error_is_its_class_and_a_provider_verdict_is_not_asked_again(
    status_code: int, code: str, cls: type[errors.FleetApiError]
) -> None:
    details: dict[str, Any] = {"replicas": [{"destination_id": "dst_1", "state": "syncing"}]}
    h = Recorder([status(status_code, error_body(code, details=details))])
    c, waits = client(h)
    with pytest.raises(cls) as info:
        c.episodes.read_links("ep_1")
    assert info.value.status == status_code and info.value.code == code and info.value.details == details
    assert errors.API_ERROR_CLASSES[code] is cls
    assert len(h.requests) == 1 and waits == []


def test_read_links_retries_a_503_like_any_post() -> None:
    h = Recorder([status(503, error_body("not_ready")), status(200, LINKS)])
    c, waits = client(h)
    assert c.episodes.read_links("ep_1").episode_id == "ep_1"
    assert len(h.requests) == 2 and len(waits) == 1
    assert h.requests[0].headers["idempotency-key"] == h.requests[1].headers["idempotency-key"]


def test_a_replica_not_verified_is_also_a_conflict() -> None:
    assert issubclass(errors.ReplicaNotVerifiedError, errors.ConflictError)


def test_the_async_client_has_it_too() -> None:
    h = Recorder([status(200, LINKS)])

    async def run() -> models.ReadLinks:
        async with fleet.AsyncFleet(url=URL, api_key=KEY, transport=httpx.MockTransport(h)) as api:
            return await api.episodes.read_links("ep_1", files=["recording.mcap"])

    assert asyncio.run(run()).destination_id == "dst_1"
    assert json.loads(h.requests[0].content) == {"files": ["recording.mcap"]}


# -- against the live cloud ------------------------------------------------------------------


def test_read_links_read_the_episode_from_the_bucket(api: fleet.Fleet, live: LiveEnv) -> None:
    episode = live.episodes[0]
    manifest = api.episodes.files(episode).files
    links = api.episodes.read_links(episode)
    assert links.episode_id == episode and links.destination_id == live.destination_id
    assert [(f.path, f.size_bytes, f.sha256) for f in links.files] == [
        (f.path, f.size_bytes, f.sha256) for f in manifest
    ]
    with httpx.Client(timeout=30) as http:
        for link in links.files:
            assert link.url.startswith(live.s3_endpoint + "/")
            got = http.get(link.url)
            assert got.status_code == 200 and hashlib.sha256(got.content).hexdigest() == link.sha256
        big = max(links.files, key=lambda f: f.size_bytes)
        assert big.size_bytes > 100
        ranged = http.get(big.url, headers={"range": "bytes=0-99"})
        assert ranged.status_code == 206 and ranged.content == http.get(big.url).content[:100]

    one = api.episodes.read_links(episode, destination_id=live.destination_id, files=[big.path])
    assert [f.path for f in one.files] == [big.path]
    with pytest.raises(errors.ValidationFailedError) as stray:
        api.episodes.read_links(episode, files=["not/in/the/manifest.bin"])
    assert stray.value.status == 400
    with pytest.raises(errors.NotFoundError):
        api.episodes.read_links(episode, destination_id="dst_doesnotexist")
    with pytest.raises(errors.NotFoundError):
        api.episodes.read_links("ep_doesnotexist")


def test_async_read_links_against_the_live_cloud(live: LiveEnv) -> None:
    async def run() -> models.ReadLinks:
        async with fleet.AsyncFleet(url=live.url, api_key=live.admin_key) as api:
            return await api.episodes.read_links(live.episodes[-1])

    links = asyncio.run(run())
    assert links.episode_id == live.episodes[-1] and links.files
