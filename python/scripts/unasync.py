"""Writes python/src/fleet/_sync_client.py (``Fleet``) from python/src/fleet/_async_client.py (``AsyncFleet``).

The async client is the only hand-written one; this drops ``async``/``await`` and maps each
async name to its sync twin (the technique httpcore uses), so the two clients cannot drift.
``--check`` exits 1 when the checked-in file differs (tests run it).

    python python/scripts/unasync.py [--check]
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

FLEET = Path(__file__).resolve().parents[1] / "src" / "fleet"
SOURCE = FLEET / "_async_client.py"
TARGET = FLEET / "_sync_client.py"
HEADER = "# Generated from fleet/_async_client.py by python/scripts/unasync.py: do not edit.\n"

# Applied in order; word-bounded so that only whole names change.
RULES: list[tuple[str, str]] = [
    (r"\basync def\b", "def"),
    (r"\basync for\b", "for"),
    (r"\basync with\b", "with"),
    (r"\bawait ", ""),
    (r"\bAsyncIterator\b", "Iterator"),
    (r"\bAsyncBaseTransport\b", "BaseTransport"),
    (r"\bAsyncClient\b", "Client"),
    (r"\bAsync([A-Z]\w*)\b", r"\1"),
    (r"\baclose\b", "close"),
    (r"\baread\b", "read"),
    (r"\baiter_bytes\b", "iter_bytes"),
    (r"\b__aenter__\b", "__enter__"),
    (r"\b__aexit__\b", "__exit__"),
    (r"\bsleep_async\b", "sleep_sync"),
    (r"\brun_blocking_async\b", "run_blocking_sync"),
    (r"The async client, ", "The sync client, "),
]


def render() -> str:
    text = SOURCE.read_text(encoding="utf-8")
    for pattern, replacement in RULES:
        text = re.sub(pattern, replacement, text)
    return HEADER + text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the checked-in file differs")
    args = parser.parse_args(argv)
    wanted = render()
    if args.check:
        if not TARGET.exists() or TARGET.read_text(encoding="utf-8") != wanted:
            print(f"{TARGET} is out of date: run python python/scripts/unasync.py", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
