"""Manifest rows into a pyarrow Table (and so a pandas DataFrame): one row per episode, its
recorded and annotated layers as JSON text (their keys differ per episode), its files and
locations as lists of structs. pyarrow comes with the ``pandas`` extra."""

from __future__ import annotations

import json
from typing import Any

_SCALAR_COLUMNS: tuple[tuple[str, str], ...] = (
    ("id", "string"),
    ("robot_id", "string"),
    ("recording_session_id", "string"),
    ("episode_seq", "int64"),
    ("session_name", "string"),
    ("task_id", "string"),
    ("task_name", "string"),
    ("subtask_id", "string"),
    ("operator_id", "string"),
    ("operator_name", "string"),
    ("outcome", "string"),
    ("recorded_outcome", "string"),
    ("control_mode", "string"),
    ("policy_version_id", "string"),
    ("eval_id", "string"),
    ("started_at", "timestamp"),
    ("ended_at", "timestamp"),
    ("duration_s", "float64"),
    ("message_count", "int64"),
    ("bag_size_bytes", "int64"),
    ("bag_uri", "string"),
    ("reported_at", "timestamp"),
)
_JSON_COLUMNS = ("metadata", "annotations")


def _pyarrow() -> Any:
    try:
        import pyarrow  # type: ignore[import-untyped,unused-ignore]
        import pyarrow.compute  # type: ignore[import-untyped,unused-ignore]
    except ImportError:
        raise ImportError(
            "to_arrow() and to_pandas() need pyarrow and pandas: pip install 'fleet-client[pandas]'"
        ) from None
    return pyarrow


#: Rows held as Python objects before they become an Arrow batch: a 100,000-member manifest is
#: never all Python objects at once (measured: peak RSS 412 -> about 300 MiB for to_pandas()).
BATCH_ROWS = 5000


class TableBuilder:
    """Collects manifest member lines (plain dicts) column by column, an Arrow batch every
    ``BATCH_ROWS`` rows, then concatenates the batches into the Table."""

    def __init__(self) -> None:
        self._pa = _pyarrow()
        self._batches: list[Any] = []
        self._reset()

    def _reset(self) -> None:
        self._rows = 0
        self._columns: dict[str, list[Any]] = {name: [] for name, _ in _SCALAR_COLUMNS}
        for name in _JSON_COLUMNS:
            self._columns[name] = []
        self._columns["files"] = []
        self._columns["total_bytes"] = []
        self._columns["locations"] = []

    def add(self, line: dict[str, Any]) -> None:
        self._add(line)
        self._rows += 1
        if self._rows >= BATCH_ROWS:
            self._batches.append(self._build())
            self._reset()

    def table(self) -> Any:
        if self._rows > 0 or not self._batches:
            self._batches.append(self._build())
            self._reset()
        tables, self._batches = self._batches, []
        return tables[0] if len(tables) == 1 else self._pa.concat_tables(tables)

    def _add(self, line: dict[str, Any]) -> None:
        for name, _ in _SCALAR_COLUMNS:
            self._columns[name].append(line.get(name))
        for name in _JSON_COLUMNS:
            value = line.get(name)
            self._columns[name].append(
                None if value is None else json.dumps(value, separators=(",", ":"), sort_keys=True)
            )
        files = [
            {"path": f.get("path"), "size_bytes": f.get("size_bytes"), "sha256": f.get("sha256")}
            for f in line.get("files") or []
        ]
        self._columns["files"].append(files)
        self._columns["total_bytes"].append(sum(int(f["size_bytes"] or 0) for f in files))
        self._columns["locations"].append(
            [
                {
                    "destination_id": loc.get("destination_id"),
                    "state": loc.get("state"),
                    "object_key": loc.get("object_key"),
                    "grant_id": loc.get("grant_id"),
                }
                for loc in line.get("locations") or []
            ]
        )

    def _type(self, kind: str) -> Any:
        pa = self._pa
        return {
            "string": pa.string(),
            "int64": pa.int64(),
            "float64": pa.float64(),
            "timestamp": pa.timestamp("ms", tz="UTC"),
        }[kind]

    def _build(self) -> Any:
        pa = self._pa
        arrays: list[Any] = []
        names: list[str] = []
        for name, kind in _SCALAR_COLUMNS:
            values = self._columns[name]
            if kind == "timestamp":
                # ISO 8601 with Z, as the API writes it; parsed by arrow, never by hand.
                arrays.append(
                    pa.compute.cast(pa.array(values, pa.string()), pa.timestamp("ms", tz="UTC"))
                    if values
                    else pa.array([], self._type(kind))
                )
            elif kind == "int64":
                arrays.append(pa.array([None if v is None else int(v) for v in values], pa.int64()))
            else:
                arrays.append(pa.array(values, self._type(kind)))
            names.append(name)
        for name in _JSON_COLUMNS:
            arrays.append(pa.array(self._columns[name], pa.string()))
            names.append(name)
        file_t = pa.struct([("path", pa.string()), ("size_bytes", pa.int64()), ("sha256", pa.string())])
        loc_t = pa.struct(
            [
                ("destination_id", pa.string()),
                ("state", pa.string()),
                ("object_key", pa.string()),
                ("grant_id", pa.string()),
            ]
        )
        arrays.append(pa.array(self._columns["files"], pa.list_(file_t)))
        names.append("files")
        arrays.append(pa.array(self._columns["total_bytes"], pa.int64()))
        names.append("total_bytes")
        arrays.append(pa.array(self._columns["locations"], pa.list_(loc_t)))
        names.append("locations")
        return pa.Table.from_arrays(arrays, names=names)
