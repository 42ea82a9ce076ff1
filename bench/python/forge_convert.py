"""Runs the peer converter, forge-robotics 0.2.0, on rosbag2 episodes as its `forge convert`
command does (forge.convert.convert, target lerobot-v3, everything else its defaults), one
dataset per bag: forge reads one recording as one episode.

    python3 forge_convert.py ROUTE OUT_ROOT BAG_DIR [BAG_DIR ...]

ROUTE `dir`: the bag directory (forge detects it as "rosbag": its rosbags reader, camera only);
ROUTE `mcap`: the .mcap file inside it (forge's "mcap" reader with its auto-generated topic
config: state, action and camera aligned on the busiest topic).
Prints one JSON line per bag ({bag, ok, episodes, frames, error}), then a last line with this
process's maxRSS (bytes; PyAV encodes in-process, so the encoder is in it).
"""

import json
import resource
import sys
from pathlib import Path

from forge.convert import convert


def main():
    route, out_root, bags = sys.argv[1], Path(sys.argv[2]), sys.argv[3:]
    for bag in bags:
        bag = Path(bag)
        source = bag if route == "dir" else next(bag.glob("*.mcap"))
        out = out_root / bag.parent.name
        try:
            r = convert(source, out, target_format="lerobot-v3")
            error = r.errors[0] if r.errors else None
            line = {"bag": str(bag), "ok": bool(r.success and r.episodes_converted > 0), "episodes": r.episodes_converted, "frames": r.total_frames, "error": error, "out": str(out)}
        except Exception as e:  # noqa: BLE001 - a refusal is the answer
            line = {"bag": str(bag), "ok": False, "episodes": 0, "frames": 0, "error": f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}", "out": str(out)}
        print(json.dumps(line), flush=True)
    print(json.dumps({"max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}), flush=True)


if __name__ == "__main__":
    main()
