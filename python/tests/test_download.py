"""datasets.download against the S3-compatible test bucket the robots uploaded to: every file
fetched and checked, a corrupted object refused by its checksum, a rerun resuming."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config

import fleet
from fleet import errors, models

from .conftest import LiveEnv


def s3_client(live: LiveEnv) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=live.s3_endpoint,
        region_name=os.environ.get("AWS_REGION", "us-east-1"),
        config=Config(s3={"addressing_style": "path"}),
    )


@pytest.fixture(scope="module")
def dataset(api: fleet.Fleet, live: LiveEnv) -> tuple[str, list[models.EpisodeWithLocations]]:
    ds = api.datasets.create(name=f"download {uuid.uuid4().hex[:6]}", robot_id=live.robots[0], outcome="success")
    api.datasets.snapshot(ds.id)
    members = list(api.datasets.members(ds.id))
    assert members and all(m.files for m in members)
    return ds.id, members


def read_report(dir: Path) -> dict[str, Any]:
    report: dict[str, Any] = json.loads((dir / "manifest.json").read_text())
    return report


def test_download_fetches_and_verifies_every_file_then_resumes(
    api: fleet.Fleet, live: LiveEnv, dataset: tuple[str, list[models.EpisodeWithLocations]], tmp_path: Path
) -> None:
    ds, members = dataset
    want = {(m.id, f.path): f for m in members for f in m.files}
    report = api.datasets.download(
        ds, tmp_path, source=f"s3://{live.s3_bucket}", endpoint_url=live.s3_endpoint, path_style=True
    )
    assert {(f.episode_id, f.path) for f in report.fetched} == set(want) and not report.failed and not report.skipped
    for (episode, path), file in want.items():
        assert (tmp_path / episode / path).stat().st_size == file.size_bytes
    on_disk = read_report(tmp_path)
    assert on_disk["counts"] == {"fetched": len(want), "skipped": 0, "failed": 0}

    # Resume: one file gone, one truncated; the rest is re-hashed and skipped.
    (gone_ep, gone_path), (cut_ep, cut_path) = next(iter(want)), list(want)[-1]
    (tmp_path / gone_ep / gone_path).unlink()
    with (tmp_path / cut_ep / cut_path).open("r+b") as handle:
        handle.truncate(1)
    again = api.datasets.download(
        ds, tmp_path, source=f"s3://{live.s3_bucket}", endpoint_url=live.s3_endpoint, path_style=True
    )
    assert {(f.episode_id, f.path) for f in again.fetched} == {(gone_ep, gone_path), (cut_ep, cut_path)}
    assert len(again.skipped) == len(want) - 2 and not again.failed
    assert read_report(tmp_path)["counts"]["skipped"] == len(want) - 2


def test_a_corrupted_object_fails_its_checksum_and_is_never_left_in_place(
    api: fleet.Fleet, live: LiveEnv, dataset: tuple[str, list[models.EpisodeWithLocations]], tmp_path: Path
) -> None:
    ds, members = dataset
    member = members[0]
    f = member.files[0]
    loc = next(loc for loc in member.locations if loc.state == "verified")
    key = f"{loc.object_key}{f.path}"
    s3 = s3_client(live)
    original = s3.get_object(Bucket=live.s3_bucket, Key=key)["Body"].read()
    corrupted = bytes([original[0] ^ 0xFF]) + original[1:]
    s3.put_object(Bucket=live.s3_bucket, Key=key, Body=corrupted)
    try:
        with pytest.raises(errors.DownloadError) as info:
            api.datasets.download(ds, tmp_path, source=f"s3://{live.s3_bucket}", s3_client=s3)
        failed = [x for x in info.value.report["files"] if x["status"] == "failed"]
        assert [(x["episode_id"], x["path"]) for x in failed] == [(member.id, f.path)]
        assert failed[0]["reason"].startswith("checksum mismatch")
        assert not (tmp_path / member.id / f.path).exists()
        assert not list(tmp_path.rglob("*.part"))
        # Without strict, the same answer comes back as a report.
        report = api.datasets.download(ds, tmp_path, source=f"s3://{live.s3_bucket}", s3_client=s3, strict=False)
        assert len(report.failed) == 1 and report.failed[0].path == f.path
    finally:
        s3.put_object(Bucket=live.s3_bucket, Key=key, Body=original)
    fixed = api.datasets.download(ds, tmp_path, source=f"s3://{live.s3_bucket}", s3_client=s3)
    assert [(x.episode_id, x.path) for x in fixed.fetched] == [(member.id, f.path)] and not fixed.failed


def test_a_source_that_is_not_s3_is_refused(
    api: fleet.Fleet, dataset: tuple[str, list[models.EpisodeWithLocations]], tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match="s3://bucket"):
        api.datasets.download(dataset[0], tmp_path, source="/some/dir")
