"""docs/python.md runs as written: every ```python block, in order, in one namespace, against a
real cloud (FLEET_URL, FLEET_API_KEY) with one fleet-sim robot (FLEET_ROBOT_ID, set here).
Blocks fenced ```python no-test need the reader's bucket or GPU; the test pins which ones those
are, so that no block stops running unnoticed."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DOC = os.path.join(REPO, "docs", "python.md")
SIM_CLI = os.path.join(REPO, "simulator", "dist", "cli.js")
FLEET_URL = os.environ.get("FLEET_URL")
FLEET_API_KEY = os.environ.get("FLEET_API_KEY")
FENCE = re.compile(r"^```python([^\n]*)\n(.*?)^```$", re.S | re.M)


def blocks() -> list[tuple[str, str]]:
    with open(DOC, encoding="utf-8") as f:
        return [(m.group(1).strip(), m.group(2)) for m in FENCE.finditer(f.read())]


def test_only_the_bucket_block_is_left_out() -> None:
    left_out = [code for info, code in blocks() if info == "no-test"]
    assert len(left_out) == 1 and "datasets.download(" in left_out[0]
    assert all(info in ("", "no-test") for info, _ in blocks())


@pytest.fixture
def robot(tmp_path: Any) -> Iterator[str]:
    """One connected fleet-sim robot of the key's organization (no uploads, no auto episodes)."""
    if not (FLEET_URL and FLEET_API_KEY):
        pytest.skip("FLEET_URL and FLEET_API_KEY are not set (no cloud to test against)")
    node = shutil.which("node")
    if node is None or not os.path.exists(SIM_CLI):
        pytest.skip("node or simulator/dist/cli.js is missing (run npm run build)")
    base = FLEET_URL.rstrip("/").removesuffix("/v1")
    with httpx.Client(base_url=base, headers={"authorization": f"Bearer {FLEET_API_KEY}"}, timeout=30) as http:
        r = http.post(
            "/v1/robots/enrollment-tokens",
            json={"max_uses": 1, "name_prefix": "pysdk-docs"},
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
            base,
            "--count",
            "1",
            "--data-dir",
            str(tmp_path / "sim"),
            "--no-sync",
            "--log-level",
            "warn",
        ]
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
        try:
            assert proc.stdout is not None
            robot_id = next(
                (json.loads(line)["robots"][0] for line in proc.stdout if line.startswith('{"robots":')), None
            )
            assert robot_id is not None, f"fleet-sim ended before its robot connected (exit {proc.wait()})"
            # The simulator prints once its robot is on the broker; the cloud learns it a moment later.
            with httpx.Client(base_url=base, headers={"authorization": f"Bearer {FLEET_API_KEY}"}) as h:
                from fleet.events import EventStream

                if not h.get(f"/v1/robots/{robot_id}").json().get("connected"):
                    with EventStream(h, types=["robot.status"], robot_id=robot_id, last_event_id="evt_0") as events:
                        next(e for e in events if e.data.online)  # type: ignore[union-attr]
            yield robot_id
        finally:
            proc.terminate()
            proc.wait(30)


def test_the_walk_runs_as_written(robot: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    monkeypatch.setenv("FLEET_ROBOT_ID", robot)
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"__name__": "__docs__"}
    ran = 0
    for i, (info, code) in enumerate(blocks()):
        if info == "no-test":
            continue
        try:
            exec(compile(code, f"docs/python.md block {i + 1}", "exec"), namespace)  # noqa: S102 (running the walk as written is the test)
        except Exception as e:
            raise AssertionError(f"docs/python.md block {i + 1} failed:\n{code}") from e
        ran += 1
    assert ran >= 8
