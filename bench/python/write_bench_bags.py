"""The LeRobot bench's ROS 2 inputs: rosbag2 directories (storage mcap, cdr, ros2msg schemas from
rosbags' Jazzy typestore) as `ros2 bag record --storage mcap` leaves them, written by Python's
`rosbags`, code that is not the project's.

    python3 write_bench_bags.py OUT_DIR --episodes N --seconds S --camera jpeg|rgb8
        [--width 640] [--height 480] [--camera-hz 30] [--state-hz 50] [--jpeg-out DIR]

Each episode is OUT_DIR/ep_<i>/bag/{metadata.yaml, bag_0.mcap} with
  /joint_states                        sensor_msgs/msg/JointState  state-hz, 7 joints
  /joint_commands                      sensor_msgs/msg/JointState  state-hz, the targets
  /camera/front/image_raw/compressed   sensor_msgs/msg/CompressedImage jpeg (--camera jpeg), or
  /camera/front/image_raw              sensor_msgs/msg/Image rgb8 (--camera rgb8)
Every stream starts at the episode's first instant, header stamps equal log times, and camera
frame k is at exactly start + round(k / camera-hz s): on an export grid of camera-hz fps, grid
frame k is camera frame k. `--jpeg-out DIR` also writes DIR/ep_<i>.mjpeg, the episode's JPEG
frames back to back (ffmpeg's mjpeg demuxer reads them; the bench's baseline decodes them).
Prints one JSON line: episodes, frames per episode, bytes written.
"""

import argparse
import io
import json
import math
from pathlib import Path

import numpy as np
from PIL import Image as PILImage
from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.typesys import Stores, get_typestore

JOINTS = ["shoulder_pan", "shoulder_lift", "elbow", "wrist_1", "wrist_2", "wrist_3", "gripper"]
NS = 1_000_000_000
JPEG_QUALITY = 90
T0 = 1_780_000_000 * NS


class Scene:
    """A camera-like picture: lit table gradient, sensor noise (fixed, so it compresses like a real
    camera's and not like flat colour), a moving block and the arm's gripper."""

    def __init__(self, width, height, seed):
        rng = np.random.default_rng(seed)
        y, x = np.mgrid[0:height, 0:width].astype(np.float32)
        base = np.stack([90 + 60 * x / width, 80 + 50 * y / height, 70 + 30 * (x + y) / (width + height)], axis=-1)
        self.background = np.clip(base + rng.normal(0, 6, base.shape), 0, 255).astype(np.uint8)
        self.width, self.height = width, height

    def frame(self, t):
        img = self.background.copy()
        w, h = self.width, self.height
        bx = int((0.5 + 0.35 * math.sin(t * 0.9)) * (w - w // 8))
        by = int((0.55 + 0.25 * math.cos(t * 0.7)) * (h - h // 8))
        img[by : by + h // 8, bx : bx + w // 8] = (200, 40, 40)
        gx = int((0.5 + 0.4 * math.sin(t * 1.3 + 1)) * (w - w // 12))
        gy = int((0.3 + 0.2 * math.sin(t * 1.1)) * (h - h // 6))
        img[gy : gy + h // 6, gx : gx + w // 12] = (60, 60, 70)
        return img


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--episodes", type=int, required=True)
    p.add_argument("--seconds", type=int, required=True)
    p.add_argument("--camera", choices=["jpeg", "rgb8"], required=True)
    p.add_argument("--width", type=int, default=640)
    p.add_argument("--height", type=int, default=480)
    p.add_argument("--camera-hz", type=int, default=30)
    p.add_argument("--state-hz", type=int, default=50)
    p.add_argument("--jpeg-out")
    a = p.parse_args()

    ts = get_typestore(Stores.ROS2_JAZZY)
    JointState = ts.types["sensor_msgs/msg/JointState"]
    CompressedImage = ts.types["sensor_msgs/msg/CompressedImage"]
    Image = ts.types["sensor_msgs/msg/Image"]
    Header = ts.types["std_msgs/msg/Header"]
    Time = ts.types["builtin_interfaces/msg/Time"]

    def header(t, frame_id):
        return Header(stamp=Time(sec=t // NS, nanosec=t % NS), frame_id=frame_id)

    out = Path(a.out)
    jpeg_out = Path(a.jpeg_out) if a.jpeg_out else None
    if jpeg_out:
        jpeg_out.mkdir(parents=True, exist_ok=True)
    duration = a.seconds * NS
    # Same instants as the exporter's grid: start + round(k * 1e9 / hz) ns.
    cam_times = [(k * NS * 2 + a.camera_hz) // (2 * a.camera_hz) for k in range(a.seconds * a.camera_hz + 1)]
    state_times = [(k * NS * 2 + a.state_hz) // (2 * a.state_hz) for k in range(a.seconds * a.state_hz + 1)]
    assert cam_times[-1] == duration and state_times[-1] == duration
    written = 0
    for ep in range(a.episodes):
        start = T0 + ep * (duration + 5 * NS)
        scene = Scene(a.width, a.height, ep)
        messages = []
        for k, dt in enumerate(state_times):
            t = start + dt
            s = dt / NS
            pos = np.array([0.6 * math.sin(s * 0.8 + j + ep) for j in range(len(JOINTS))])
            vel = np.array([0.48 * math.cos(s * 0.8 + j + ep) for j in range(len(JOINTS))])
            messages.append((t, 0, "/joint_states", JointState(header=header(t, "base_link"), name=JOINTS, position=pos, velocity=vel, effort=np.zeros(len(JOINTS)))))
            target = np.array([0.6 * math.sin((s + 0.1) * 0.8 + j + ep) for j in range(len(JOINTS))])
            messages.append((t, 1, "/joint_commands", JointState(header=header(t, "base_link"), name=JOINTS, position=target, velocity=np.zeros(0), effort=np.zeros(0))))
        jpegs = open(jpeg_out / f"ep_{ep:05d}.mjpeg", "wb") if jpeg_out else None
        for k, dt in enumerate(cam_times):
            t = start + dt
            rgb = scene.frame(dt / NS)
            if a.camera == "jpeg":
                buf = io.BytesIO()
                PILImage.fromarray(rgb).save(buf, format="JPEG", quality=JPEG_QUALITY)
                data = buf.getvalue()
                if jpegs:
                    jpegs.write(data)
                messages.append((t, 2, "/camera/front/image_raw/compressed", CompressedImage(header=header(t, "camera_front"), format="jpeg", data=np.frombuffer(data, dtype=np.uint8))))
            else:
                messages.append((t, 2, "/camera/front/image_raw", Image(header=header(t, "camera_front"), height=a.height, width=a.width, encoding="rgb8", is_bigendian=0, step=a.width * 3, data=rgb.reshape(-1))))
        if jpegs:
            jpegs.close()
        messages.sort(key=lambda m: (m[0], m[1]))
        bag = out / f"ep_{ep:05d}" / "bag"
        bag.parent.mkdir(parents=True, exist_ok=True)
        with Writer(bag, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
            conns = {}
            for t, _, topic, msg in messages:
                if topic not in conns:
                    conns[topic] = writer.add_connection(topic, msg.__msgtype__, typestore=ts)
                writer.write(conns[topic], t, ts.serialize_cdr(msg, msg.__msgtype__))
        written += sum(f.stat().st_size for f in bag.iterdir())
    print(json.dumps({"episodes": a.episodes, "camera_frames": len(cam_times), "bytes": written}))


if __name__ == "__main__":
    main()
