"""A rosbag2 directory (storage mcap) written by Python's `rosbags`, the way a ROS 2 robot's
`ros2 bag record --storage mcap` leaves one: cdr messages, ros2msg schemas from rosbags' Jazzy
typestore. Used by the TypeScript tests as input written by code that is not the project's.

    python write_rosbag2.py OUT_DIR EXPECTED_JSON

Topics (2 s, starting at 1_700_000_000 s; header stamps are log time - 3 ms):
  /joint_states                 sensor_msgs/msg/JointState    50 Hz, joints j3, j1, j2 (not sorted)
  /joint_commands               sensor_msgs/msg/JointState    25 Hz
  /cmd_vel                      geometry_msgs/msg/TwistStamped 20 Hz
  /camera/front/image_raw/compressed  sensor_msgs/msg/CompressedImage  jpeg 10 Hz, 57x43
  /camera/front/image_raw       sensor_msgs/msg/Image rgb8    7 Hz, 57x43 (row padding: step 176)
  /camera/bgr/image_raw         sensor_msgs/msg/Image bgr8    5 Hz, 8x6
  /camera/mono/image_raw        sensor_msgs/msg/Image mono8   5 Hz, 8x6
  /camera/depth/image_raw       sensor_msgs/msg/Image 16UC1   5 Hz, 8x6
EXPECTED_JSON gets what the bag holds, computed here: per message its log time, header stamp and
values (times as decimal strings: they exceed a double's integers); per image the sha256 of its packed RGB pixels (raw) or of its JPEG bytes (compressed).
"""

import hashlib
import io
import json
import math
import sys
from pathlib import Path

import numpy as np
from PIL import Image as PILImage
from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.typesys import Stores, get_typestore

T0 = 1_700_000_000 * 1_000_000_000
STAMP_OFFSET = 3_000_000
DURATION = 2_000_000_000
W, H = 57, 43
JOINTS = ["j3", "j1", "j2"]


def pixels(width, height, frame):
    y, x = np.mgrid[0:height, 0:width]
    rgb = np.stack([(x * 7 + y * 13 + frame * 29 + c * 80) % 256 for c in range(3)], axis=-1)
    return rgb.astype(np.uint8)


def main(out_dir, expected_path):
    ts = get_typestore(Stores.ROS2_JAZZY)
    JointState = ts.types["sensor_msgs/msg/JointState"]
    CompressedImage = ts.types["sensor_msgs/msg/CompressedImage"]
    Image = ts.types["sensor_msgs/msg/Image"]
    TwistStamped = ts.types["geometry_msgs/msg/TwistStamped"]
    Twist = ts.types["geometry_msgs/msg/Twist"]
    Vector3 = ts.types["geometry_msgs/msg/Vector3"]
    Header = ts.types["std_msgs/msg/Header"]
    Time = ts.types["builtin_interfaces/msg/Time"]

    def header(t, frame_id):
        s = t - STAMP_OFFSET
        return Header(stamp=Time(sec=s // 1_000_000_000, nanosec=s % 1_000_000_000), frame_id=frame_id)

    expected = {"stamp_offset_ns": STAMP_OFFSET, "topics": {}}
    messages = []  # (t, topic, type, msg)

    def every(topic, hz):
        period = 1_000_000_000 // hz
        return [T0 + i * period for i in range(DURATION // period + 1)]

    rows = expected.setdefault("joint_states", [])
    for i, t in enumerate(every("/joint_states", 50)):
        pos = [math.sin(i / 10 + k) for k in range(3)]
        vel = [math.cos(i / 10 + k) for k in range(3)]
        messages.append((t, "/joint_states", JointState(header=header(t, "base_link"), name=JOINTS, position=np.array(pos), velocity=np.array(vel), effort=np.zeros(3))))
        rows.append({"t": str(t), "name": JOINTS, "position": pos, "velocity": vel})
    rows = expected.setdefault("joint_commands", [])
    for i, t in enumerate(every("/joint_commands", 25)):
        pos = [0.5 * math.sin(i / 5 + k) for k in range(3)]
        messages.append((t, "/joint_commands", JointState(header=header(t, "base_link"), name=JOINTS, position=np.array(pos), velocity=np.zeros(0), effort=np.zeros(0))))
        rows.append({"t": str(t), "name": JOINTS, "position": pos})
    rows = expected.setdefault("cmd_vel", [])
    for i, t in enumerate(every("/cmd_vel", 20)):
        lin = [i * 0.01, -i * 0.02, 0.5]
        messages.append((t, "/cmd_vel", TwistStamped(header=header(t, "base_link"), twist=Twist(linear=Vector3(x=lin[0], y=lin[1], z=lin[2]), angular=Vector3(x=0.0, y=0.0, z=i * 0.1)))))
        rows.append({"t": str(t), "linear": lin, "angular_z": i * 0.1})

    def image_rows(topic):
        return expected.setdefault("images", {}).setdefault(topic, [])

    topic = "/camera/front/image_raw/compressed"
    for i, t in enumerate(every(topic, 10)):
        buf = io.BytesIO()
        PILImage.fromarray(pixels(W, H, i)).save(buf, format="JPEG", quality=90)
        data = buf.getvalue()
        messages.append((t, topic, CompressedImage(header=header(t, "camera_front"), format="jpeg", data=np.frombuffer(data, dtype=np.uint8))))
        image_rows(topic).append({"t": str(t), "format": "jpeg", "sha256": hashlib.sha256(data).hexdigest(), "frame": i})

    topic = "/camera/front/image_raw"
    step = 176  # 57 * 3 = 171, padded
    for i, t in enumerate(every(topic, 7)):
        rgb = pixels(W, H, i)
        padded = np.zeros((H, step), dtype=np.uint8)
        padded[:, : W * 3] = rgb.reshape(H, W * 3)
        messages.append((t, topic, Image(header=header(t, "camera_front"), height=H, width=W, encoding="rgb8", is_bigendian=0, step=step, data=padded.reshape(-1))))
        image_rows(topic).append({"t": str(t), "width": W, "height": H, "sha256": hashlib.sha256(rgb.tobytes()).hexdigest(), "frame": i})

    for topic, encoding in (("/camera/bgr/image_raw", "bgr8"), ("/camera/mono/image_raw", "mono8"), ("/camera/depth/image_raw", "16UC1")):
        for i, t in enumerate(every(topic, 5)):
            rgb = pixels(8, 6, i)
            if encoding == "bgr8":
                data, step = rgb[:, :, ::-1].copy().reshape(-1), 24
            elif encoding == "mono8":
                grey = rgb[:, :, 0].copy()
                data, step = grey.reshape(-1), 8
                rgb = np.repeat(grey[:, :, None], 3, axis=2)
            else:
                data, step = np.arange(48, dtype="<u2").view(np.uint8), 16
            messages.append((t, topic, Image(header=header(t, "camera"), height=6, width=8, encoding=encoding, is_bigendian=0, step=step, data=data)))
            image_rows(topic).append({"t": str(t), "width": 8, "height": 6, "encoding": encoding, "sha256": hashlib.sha256(rgb.tobytes()).hexdigest(), "frame": i})

    messages.sort(key=lambda m: m[0])
    with Writer(Path(out_dir), version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        conns = {}
        for t, topic, msg in messages:
            if topic not in conns:
                conns[topic] = writer.add_connection(topic, msg.__msgtype__, typestore=ts)
                expected["topics"][topic] = {"type": msg.__msgtype__, "count": 0}
            writer.write(conns[topic], t, ts.serialize_cdr(msg, msg.__msgtype__))
            expected["topics"][topic]["count"] += 1
    Path(expected_path).write_text(json.dumps(expected))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
