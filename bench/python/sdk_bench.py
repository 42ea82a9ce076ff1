"""The Python SDK's side of `npm run bench -- python` (bench/python.ts), run in the SDK's venv with
PYTHONPATH=python/src and FLEET_URL / FLEET_API_KEY set.

    sdk_bench.py iterate      [--limit N] [--profile FILE]   fleet.episodes.iterate(): models, /v1/episodes pages
    sdk_bench.py export       [--limit N] [--profile FILE]   fleet.episodes.export(): models, NDJSON export pages
    sdk_bench.py export-lines [--limit N] [--profile FILE]   fleet.episodes.export_lines(): dicts, NDJSON export pages
    sdk_bench.py to-pandas --dataset ID [--limit N] [--profile FILE]   fleet.datasets.to_pandas()
    sdk_bench.py run -- COMMAND [ARG ...]

Each SDK mode prints one JSON line: rows read, distinct ids (the run fails in bench/python.ts when
either differs from what was seeded), seconds spent importing and running, and the process's
peak RSS (ru_maxrss) after the imports and at the end. `run` is the one stopwatch of every side:
it runs COMMAND (an SDK mode above, or the `fleet` CLI), reaps it with wait4 and prints
{"wall_s", "maxrss_kib", "exit"} as its last line, so both sides are timed from spawn to exit
and their peak memory is the kernel's figure for the child, the same way for Node and Python.
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()

# The import time of everything below counts in the figure (import_s), so it follows the clock.
import argparse
import cProfile
import io
import json
import os
import pstats
import resource
import subprocess
import sys
from collections.abc import Callable
from typing import Any


def maxrss_kib() -> int:
    # Linux reports ru_maxrss in KiB.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def run_child(argv: list[str]) -> int:
    if not argv:
        print("run: no command given", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    child = subprocess.Popen(argv)
    # wait4 instead of Popen.wait: it hands back the child's own rusage (its peak RSS).
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    sys.stdout.flush()
    print(
        json.dumps(
            {"wall_s": wall, "maxrss_kib": usage.ru_maxrss, "exit": child.returncode}
        ),
        flush=True,
    )
    return 0


def measured(
    mode: str,
    work: Callable[[], Any],
    summary: Callable[[Any], dict[str, Any]],
    profile: str | None,
    imported: float,
) -> None:
    rss_before = maxrss_kib()
    profiler = cProfile.Profile() if profile else None
    t0 = time.perf_counter()
    if profiler:
        profiler.enable()
    value = work()
    if profiler:
        profiler.disable()
    run_s = time.perf_counter() - t0
    rss_after = maxrss_kib()
    # Counted after the clock stopped: checking the rows is not part of reading them.
    result = summary(value)
    if profiler and profile:
        # The top entries by own time and by cumulative time, as text the bench prints.
        out = io.StringIO()
        stats = pstats.Stats(profiler, stream=out)
        stats.sort_stats("tottime").print_stats(18)
        stats.sort_stats("cumulative").print_stats(18)
        with open(profile, "w", encoding="utf-8") as f:
            f.write(out.getvalue())
    print(
        json.dumps(
            {
                "mode": mode,
                "import_s": imported - STARTED,
                "run_s": run_s,
                "maxrss_kib_before": rss_before,
                "maxrss_kib": rss_after,
                **result,
            }
        ),
        flush=True,
    )


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "run":
        rest = sys.argv[2:]
        return run_child(rest[1:] if rest[:1] == ["--"] else rest)
    parser = argparse.ArgumentParser(prog="sdk_bench.py")
    parser.add_argument(
        "mode", choices=["iterate", "export", "export-lines", "to-pandas"]
    )
    parser.add_argument(
        "--limit", type=int, default=None, help="page size (default: the API's)"
    )
    parser.add_argument("--dataset", default=None)
    parser.add_argument(
        "--profile", default=None, help="write cProfile's top entries to this file"
    )
    args = parser.parse_args()

    import fleet

    if args.mode == "to-pandas":
        # Loaded before the clock and before the RSS baseline: the libraries are not the DataFrame.
        import pandas  # noqa: F401
        import pyarrow  # type: ignore[import-untyped,unused-ignore]  # noqa: F401
    imported = time.perf_counter()
    client = fleet.Fleet()

    def work() -> Any:
        # Each row's id is all a loop keeps (one list append a row): a caller that kept nothing
        # would not look like a notebook, one that kept every model would measure its own memory.
        if args.mode == "iterate":
            return [e.id for e in client.episodes.iterate(limit=args.limit)]
        if args.mode == "export":
            return [e.id for e in client.episodes.export(limit=args.limit)]
        if args.mode == "export-lines":
            return [
                line["id"] for line in client.episodes.export_lines(limit=args.limit)
            ]
        return client.datasets.to_pandas(args.dataset, limit=args.limit)

    def summary(value: Any) -> dict[str, Any]:
        if args.mode != "to-pandas":
            return {"rows": len(value), "unique": len(set(value))}
        return {
            "rows": int(value.shape[0]),
            "unique": int(value["id"].nunique()),
            "columns": int(value.shape[1]),
            "frame_mib": float(value.memory_usage(deep=True).sum()) / 2**20,
        }

    if args.mode == "to-pandas" and not args.dataset:
        raise SystemExit("to-pandas needs --dataset ID")
    try:
        measured(args.mode, work, summary, args.profile, imported)
    finally:
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
