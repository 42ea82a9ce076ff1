"""An MCAP of protobuf messages written by Foxglove's Python `mcap-protobuf-support` with the
schemas of `foxglove-schemas-protobuf` (what Foxglove's SDK records), lz4 chunks. Used by the
TypeScript tests as input written by code that is not the project's.

    python write_protobuf_mcap.py OUT_MCAP EXPECTED_JSON

Topics (2 s from 1_700_000_000 s; `timestamp` = log time - 3 ms):
  /pose            foxglove.PoseInFrame      20 Hz (pose.position.x/y/z)
  /camera/raw      foxglove.RawImage         5 Hz, rgb8 16x10 (step 52: padded rows)
  /camera/jpeg     foxglove.CompressedImage  10 Hz, jpeg 16x10
"""

import hashlib
import io
import json
import sys
from pathlib import Path

import numpy as np
from foxglove_schemas_protobuf.CompressedImage_pb2 import CompressedImage
from foxglove_schemas_protobuf.PoseInFrame_pb2 import PoseInFrame
from foxglove_schemas_protobuf.RawImage_pb2 import RawImage
from mcap.writer import CompressionType
from mcap_protobuf.writer import Writer
from PIL import Image as PILImage

T0 = 1_700_000_000 * 1_000_000_000
STAMP_OFFSET = 3_000_000
DURATION = 2_000_000_000
W, H = 16, 10


def pixels(width, height, frame):
    y, x = np.mgrid[0:height, 0:width]
    rgb = np.stack([(x * 7 + y * 13 + frame * 29 + c * 80) % 256 for c in range(3)], axis=-1)
    return rgb.astype(np.uint8)


def every(hz):
    period = 1_000_000_000 // hz
    return [T0 + i * period for i in range(DURATION // period + 1)]


def main(out_path, expected_path):
    expected = {"stamp_offset_ns": STAMP_OFFSET, "pose": [], "images": {"/camera/raw": [], "/camera/jpeg": []}}
    messages = []
    for i, t in enumerate(every(20)):
        msg = PoseInFrame(frame_id="map")
        msg.timestamp.FromNanoseconds(t - STAMP_OFFSET)
        msg.pose.position.x, msg.pose.position.y, msg.pose.position.z = i * 0.1, -i * 0.2, 1.0
        msg.pose.orientation.w = 1.0
        messages.append((t, "/pose", msg))
        expected["pose"].append({"t": str(t), "position": [i * 0.1, -i * 0.2, 1.0]})
    for i, t in enumerate(every(5)):
        rgb = pixels(W, H, i)
        padded = np.zeros((H, 52), dtype=np.uint8)
        padded[:, : W * 3] = rgb.reshape(H, W * 3)
        msg = RawImage(frame_id="cam", width=W, height=H, encoding="rgb8", step=52, data=padded.tobytes())
        msg.timestamp.FromNanoseconds(t - STAMP_OFFSET)
        messages.append((t, "/camera/raw", msg))
        expected["images"]["/camera/raw"].append({"t": str(t), "sha256": hashlib.sha256(rgb.tobytes()).hexdigest()})
    for i, t in enumerate(every(10)):
        buf = io.BytesIO()
        PILImage.fromarray(pixels(W, H, i)).save(buf, format="JPEG", quality=90)
        msg = CompressedImage(frame_id="cam", format="jpeg", data=buf.getvalue())
        msg.timestamp.FromNanoseconds(t - STAMP_OFFSET)
        messages.append((t, "/camera/jpeg", msg))
        expected["images"]["/camera/jpeg"].append({"t": str(t), "sha256": hashlib.sha256(buf.getvalue()).hexdigest()})
    messages.sort(key=lambda m: m[0])
    with open(out_path, "wb") as f, Writer(f, compression=CompressionType.LZ4) as writer:
        for t, topic, msg in messages:
            writer.write_message(topic=topic, message=msg, log_time=t, publish_time=t)
    Path(expected_path).write_text(json.dumps(expected))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
