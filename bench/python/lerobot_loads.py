"""Does LeRobot load this dataset? The bench's one question to LeRobot itself (the test venv's
lerobot 0.6.1), asked of our export and of the peer converter's output alike.

    HF_HUB_OFFLINE=1 python3 lerobot_loads.py DATASET_DIR [DATASET_DIR ...]

For each directory: LeRobotDataset(repo_id, root=DIR, video_backend='pyav') offline, len(), and
the first and last items (each decodes its camera frames). Prints one JSON line per directory:
{"dir", "loaded", "frames", "episodes", "error"} with the error's type and first line.
"""

import json
import os
import sys
import traceback


def check(root):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    try:
        ds = LeRobotDataset(f"bench/{os.path.basename(root.rstrip('/'))}", root=root, video_backend="pyav")
        n = len(ds)
        for i in sorted({0, n - 1}):
            item = ds[i]
            if not isinstance(item, dict) or not item:
                raise ValueError(f"item {i} is empty")
        return {"dir": root, "loaded": True, "frames": n, "episodes": ds.num_episodes, "error": None}
    except Exception as e:  # noqa: BLE001 - the answer is the error itself
        first = (str(e).strip().splitlines() or [""])[0]
        tb = traceback.extract_tb(e.__traceback__)
        where = f" ({os.path.basename(tb[-1].filename)}:{tb[-1].lineno})" if tb else ""
        return {"dir": root, "loaded": False, "frames": None, "episodes": None, "error": f"{type(e).__name__}: {first}{where}"}


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    for d in sys.argv[1:]:
        print(json.dumps(check(d)), flush=True)
