"""``datasets.download``: a snapshot's recordings fetched from the customer's own bucket with
boto3 (the ``s3`` extra) and checked against the manifest. The platform never holds the bytes
or the storage credentials; the caller's boto3 credentials chain (or the keys given) is used.

Layout: ``dir/<episode_id>/<path>``, and ``dir/manifest.json`` saying, per file, whether it
was fetched, skipped (already complete and verified) or failed, and why. A file is written to
``<name>.part`` while its SHA-256 and size are computed, and renamed only when both match, so a
partial or wrong file never looks complete; a rerun re-hashes what is there and skips it when it
matches (resumable)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import unquote, urlsplit

from .errors import DownloadError
from .models import EpisodeWithLocations

_CHUNK = 1024 * 1024


def _chunks(body: Any) -> Iterable[bytes]:
    """A botocore StreamingBody read in _CHUNK pieces until it is exhausted."""
    while chunk := body.read(_CHUNK):
        yield chunk


#: Location states whose bytes are complete at the destination, best first.
_READABLE = ("verified", "synced")


@dataclass(frozen=True)
class S3Source:
    bucket: str
    prefix: str

    @classmethod
    def parse(cls, url: str) -> S3Source:
        u = urlsplit(url)
        if u.scheme != "s3" or not u.netloc:
            raise ValueError(f"source: expected s3://bucket[/prefix], got {url[:200]!r}")
        prefix = unquote(u.path.lstrip("/"))
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        return cls(bucket=u.netloc, prefix=prefix)


@dataclass
class FileRecord:
    episode_id: str
    path: str
    key: str | None
    size_bytes: int
    sha256: str
    status: str  # fetched | skipped | failed
    reason: str


@dataclass
class DownloadReport:
    """What ``download`` did; the same as ``dir/manifest.json``."""

    dataset_id: str
    source: str
    dir: str
    files: list[FileRecord] = field(default_factory=list)

    def _of(self, status: str) -> list[FileRecord]:
        return [f for f in self.files if f.status == status]

    @property
    def fetched(self) -> list[FileRecord]:
        return self._of("fetched")

    @property
    def skipped(self) -> list[FileRecord]:
        return self._of("skipped")

    @property
    def failed(self) -> list[FileRecord]:
        return self._of("failed")

    def as_json(self) -> dict[str, Any]:
        return {
            "dataset_id": self.dataset_id,
            "source": self.source,
            "counts": {s: len(self._of(s)) for s in ("fetched", "skipped", "failed")},
            "files": [asdict(f) for f in self.files],
        }


def _safe_relative(path: str) -> PurePosixPath:
    p = PurePosixPath(path)
    if path == "" or p.is_absolute() or ".." in p.parts or "\\" in path:
        raise ValueError(f"manifest path {path[:200]!r} leaves the episode directory")
    return p


def _hash_file(path: Path) -> tuple[str, int]:
    h = hashlib.sha256()
    size = 0
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size


def _s3_client(
    endpoint_url: str | None,
    path_style: bool,
    region: str | None,
    key_id: str | None,
    secret: str | None,
    token: str | None,
) -> Any:
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        raise ImportError("datasets.download needs boto3: pip install 'fleet-client[s3]'") from None
    config = Config(
        s3={"addressing_style": "path" if path_style else "auto"}, retries={"max_attempts": 3, "mode": "standard"}
    )
    return boto3.client(
        "s3",
        endpoint_url=endpoint_url,
        region_name=region or "us-east-1",
        aws_access_key_id=key_id,
        aws_secret_access_key=secret,
        aws_session_token=token,
        config=config,
    )


def _location(member: EpisodeWithLocations) -> tuple[str, str] | None:
    """(destination id, object key) of the best readable location, or None."""
    for state in _READABLE:
        for loc in member.locations:
            if loc.state == state and loc.object_key:
                return loc.destination_id, loc.object_key
    return None


def download_members(
    dataset_id: str,
    members: Iterable[EpisodeWithLocations],
    dir: Path,
    source: S3Source,
    *,
    endpoint_url: str | None = None,
    path_style: bool = False,
    region: str | None = None,
    aws_access_key_id: str | None = None,
    aws_secret_access_key: str | None = None,
    aws_session_token: str | None = None,
    s3_client: Any = None,
    strict: bool = True,
) -> DownloadReport:
    s3 = (
        s3_client
        if s3_client is not None
        else _s3_client(endpoint_url, path_style, region, aws_access_key_id, aws_secret_access_key, aws_session_token)
    )
    dir.mkdir(parents=True, exist_ok=True)
    report = DownloadReport(dataset_id=dataset_id, source=f"s3://{source.bucket}/{source.prefix}", dir=str(dir))
    for member in members:
        where = _location(member)
        for f in member.files:
            size = int(f.size_bytes)
            record = FileRecord(member.id, f.path, None, size, f.sha256, "failed", "")
            report.files.append(record)
            try:
                rel = _safe_relative(f.path)
                _safe_relative(member.id)
            except ValueError as err:
                record.reason = str(err)
                continue
            if where is None:
                states = ", ".join(f"{loc.destination_id} ({loc.state})" for loc in member.locations) or "none"
                record.reason = f"no verified or synced location (locations: {states})"
                continue
            record.key = f"{source.prefix}{where[1]}{f.path}"
            local = dir / member.id / Path(*rel.parts)
            if local.is_file():
                digest, got = _hash_file(local)
                if digest == f.sha256 and got == size:
                    record.status, record.reason = "skipped", "already complete: size and sha256 match the manifest"
                    continue
            local.parent.mkdir(parents=True, exist_ok=True)
            part = local.with_name(local.name + ".part")
            try:
                body = s3.get_object(Bucket=source.bucket, Key=record.key)["Body"]
                h = hashlib.sha256()
                got = 0
                with part.open("wb") as out:
                    for chunk in _chunks(body):
                        h.update(chunk)
                        got += len(chunk)
                        out.write(chunk)
            except Exception as err:  # boto3 and botocore raise many kinds; each is reported, none hides another file
                part.unlink(missing_ok=True)
                record.reason = f"fetch failed: {type(err).__name__}: {err}"[:500]
                continue
            digest = h.hexdigest()
            if got != size or digest != f.sha256:
                part.unlink(missing_ok=True)
                record.reason = (
                    f"checksum mismatch: expected {size} bytes sha256 {f.sha256}, got {got} bytes sha256 {digest}"
                )
                continue
            os.replace(part, local)
            record.status, record.reason = "fetched", "size and sha256 match the manifest"
    tmp = dir / "manifest.json.part"
    tmp.write_text(json.dumps(report.as_json(), indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, dir / "manifest.json")
    if strict and report.failed:
        first = report.failed[0]
        raise DownloadError(
            f"{len(report.failed)} of {len(report.files)} file(s) not downloaded; first: {first.episode_id}/{first.path}: {first.reason} (see {dir / 'manifest.json'})",
            report.as_json(),
        )
    return report
