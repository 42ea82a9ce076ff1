"""Small rosbag2 directories (storage mcap) written by Python's `rosbags`, one good and one per
fault an exporter must survive: the input of the export's fault tests, written by code that is not
the project's. Every fault here is one rosbags can write (it writes any schema text and any message
bytes it is given), so no bag is edited by hand.

    python write_faulty_rosbag2.py OUT_DIR

writes OUT_DIR/<kind>/bag/ for each kind below. Every bag: 1 s from 1_700_000_000 s,
  /joint_states      sensor_msgs/msg/JointState  20 Hz, joints j1, j2
  /joint_commands    sensor_msgs/msg/JointState  20 Hz
  /camera/front/image_raw  sensor_msgs/msg/Image rgb8 10 Hz, 8x6
with, per kind:
  good          nothing wrong
  bad_schema    /joint_commands' schema (its own type name) is text that does not parse as .msg
  bad_message   one /joint_states message is 7 bytes of CDR that do not decode
  yuv422        the camera's encoding is yuv422 (2 bytes a pixel)
  32FC1         the camera's encoding is 32FC1 (a float depth image)
  mono16        the camera's encoding is mono16 (16-bit grey)
  size_change   the camera's frames are 8x6, then 10x6 from 0.5 s
  stamps_back   the header stamp of one /joint_states message is 200 ms before the previous one
  no_overlap    joints only in [0, 0.4] s, the camera only in [0.6, 1] s
"""

import sys
from pathlib import Path

import numpy as np
from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.typesys import Stores, get_typestore

T0 = 1_700_000_000 * 1_000_000_000
MS = 1_000_000
KINDS = ["good", "bad_schema", "bad_message", "yuv422", "32FC1", "mono16", "size_change", "stamps_back", "no_overlap"]
# Not a .msg: an unknown type and an unclosed array bracket.
BROKEN_MSGDEF = "std_msgs/Header header\nstring[ name\nnot_a_type{ position\n"


def write(kind, out_dir):
    ts = get_typestore(Stores.ROS2_JAZZY)
    JointState = ts.types["sensor_msgs/msg/JointState"]
    Image = ts.types["sensor_msgs/msg/Image"]
    Header = ts.types["std_msgs/msg/Header"]
    Time = ts.types["builtin_interfaces/msg/Time"]

    def header(stamp):
        return Header(stamp=Time(sec=stamp // 1_000_000_000, nanosec=stamp % 1_000_000_000), frame_id="base")

    messages = []  # (log time, topic, cdr bytes)
    joints_until = 400 if kind == "no_overlap" else 1000
    for i, t in enumerate(range(0, joints_until + 1, 50)):
        stamp = T0 + t * MS
        if kind == "stamps_back" and i == 10:
            stamp -= 250 * MS
        for topic, scale in (("/joint_states", 1.0), ("/joint_commands", 0.5)):
            msg = JointState(header=header(stamp), name=["j1", "j2"], position=np.array([scale * i, -scale * i]), velocity=np.zeros(0), effort=np.zeros(0))
            data = ts.serialize_cdr(msg, "sensor_msgs/msg/JointState")
            if kind == "bad_message" and topic == "/joint_states" and i == 5:
                data = bytes(data[:7])
            messages.append((T0 + t * MS, topic, data))
    camera_from = 600 if kind == "no_overlap" else 0
    encoding, depth = {"yuv422": ("yuv422", 2), "32FC1": ("32FC1", 4), "mono16": ("mono16", 2)}.get(kind, ("rgb8", 3))
    for i, t in enumerate(range(camera_from, 1001, 100)):
        width, height = (10, 6) if kind == "size_change" and t >= 500 else (8, 6)
        pixels = (np.arange(width * height * depth) + i * 7) % 256
        msg = Image(header=header(T0 + t * MS), height=height, width=width, encoding=encoding, is_bigendian=0, step=width * depth, data=pixels.astype(np.uint8))
        messages.append((T0 + t * MS, "/camera/front/image_raw", ts.serialize_cdr(msg, "sensor_msgs/msg/Image")))

    messages.sort(key=lambda m: m[0])
    with Writer(Path(out_dir), version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        conns = {}
        for topic, msgtype in (("/joint_states", "sensor_msgs/msg/JointState"), ("/joint_commands", "sensor_msgs/msg/JointState"), ("/camera/front/image_raw", "sensor_msgs/msg/Image")):
            if kind == "bad_schema" and topic == "/joint_commands":
                # Its own type name: rosbags stores one schema per type, so the good JointState stays.
                conns[topic] = writer.add_connection(topic, "fleet_test/msg/Broken", msgdef=BROKEN_MSGDEF, rihs01="RIHS01_" + "0" * 64)
            else:
                conns[topic] = writer.add_connection(topic, msgtype, typestore=ts)
        for t, topic, data in messages:
            writer.write(conns[topic], t, data)


def main(out_root):
    for kind in KINDS:
        write(kind, Path(out_root) / kind / "bag")


if __name__ == "__main__":
    main(sys.argv[1])
