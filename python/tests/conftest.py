"""Fixtures of the tests that run against a live cloud. test/python-sdk.test.ts starts the cloud,
a simulated fleet and an S3-compatible bucket and passes them in the environment; without
FLEET_URL those tests are skipped (the MockTransport ones still run)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

import fleet


@dataclass(frozen=True)
class LiveEnv:
    url: str
    robots: list[str]
    episodes: list[str]
    destination_id: str
    s3_endpoint: str
    s3_bucket: str
    #: Kept out of the repr, which pytest prints with a failing test.
    admin_key: str = field(repr=False, default="")


def _live() -> LiveEnv | None:
    url = os.environ.get("FLEET_URL")
    if not url:
        return None
    return LiveEnv(
        url=url,
        admin_key=os.environ["FLEET_API_KEY"],
        robots=[r for r in os.environ.get("FLEET_TEST_ROBOTS", "").split(",") if r],
        episodes=[e for e in os.environ.get("FLEET_TEST_EPISODES", "").split(",") if e],
        destination_id=os.environ.get("FLEET_TEST_DESTINATION_ID", ""),
        s3_endpoint=os.environ.get("FLEET_TEST_S3_ENDPOINT", ""),
        s3_bucket=os.environ.get("FLEET_TEST_S3_BUCKET", ""),
    )


@pytest.fixture(scope="session")
def live() -> LiveEnv:
    env = _live()
    if env is None:
        pytest.skip("no live cloud: FLEET_URL is not set (test/python-sdk.test.ts sets it)")
    return env


@pytest.fixture(scope="session")
def api(live: LiveEnv) -> Iterator[fleet.Fleet]:
    with fleet.Fleet(url=live.url, api_key=live.admin_key) as client:
        yield client
