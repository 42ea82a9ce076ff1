"""Recordings for LeRobot's judge (test/lerobot-judge.test.ts), written by libraries that are not
the project's, the way a robot team's own stack leaves them:

    python write_judge_recordings.py rosbag2 OUT_DIR START_NS
    python write_judge_recordings.py protobuf OUT_MCAP START_NS

`rosbag2`: a rosbag2 directory (storage mcap, cdr, ros2msg schemas from rosbags' Jazzy typestore)
as `ros2 bag record --storage mcap` writes it, 2.4 s from START_NS:
  /joint_states                       sensor_msgs/msg/JointState       50 Hz, joints elbow, shoulder,
                                      wrist, gripper, camera_tilt (not the mapping's order, one more)
  /joint_commands                     sensor_msgs/msg/JointState       25 Hz, gripper, wrist, elbow, shoulder
  /camera/front/image_raw/compressed  sensor_msgs/msg/CompressedImage  JPEG 15 Hz, 64x48
  /camera/wrist/image_raw             sensor_msgs/msg/Image            rgb8 12 Hz, 40x30, rows padded (step 128)
  /diagnostics                        std_msgs/msg/String              2 Hz (not mapped)
Header stamps lag the log time by a per-topic latency (4, 2, 30 and 18 ms) plus up to 3 ms of
receive jitter on the log time, so stamping by header and by log time give different episodes.

`protobuf`: one MCAP written by Foxglove's `mcap-protobuf-support` (zstd chunks), 2.4 s from START_NS:
  /arm/joints     arm.JointPositions         40 Hz, a type of the robot's own built here from a
                  descriptor (google.protobuf.Timestamp timestamp, repeated string name, repeated
                  double position, velocity), joints wrist, shoulder, elbow
  /camera/front   foxglove.CompressedImage   JPEG 15 Hz, 48x36
  /camera/side    foxglove.RawImage          rgb8 12 Hz, 32x24, rows padded (step 100)
`timestamp` lags the log time (8, 3 and 6 ms) as above, the joints the most: the grid's start is
then the joints' first message either way, and stamping by log time would give other joint values.

The scene is smooth (codecs keep it well) and moves fast enough that a frame one grid step off is
visibly worse than the right one. START_NS differs per recording, so no two are byte-identical.
"""

from __future__ import annotations

import io
import math
import sys
from pathlib import Path

import numpy as np
from PIL import Image as PILImage

NS = 1_000_000_000
DURATION = 2_400_000_000


def scene(width: int, height: int, t_ns: int) -> np.ndarray:
    """An HxWx3 uint8 frame of the scene at time t (the same scene for every camera)."""
    s = (t_ns % (1000 * NS)) / NS
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    r = 128 + 90 * np.sin(2 * math.pi * (x / width + 0.8 * s))
    g = 128 + 90 * np.sin(2 * math.pi * (y / height + 0.6 * s))
    b = 128 + 90 * np.cos(2 * math.pi * ((x + y) / (width + height) * 1.5 - 0.5 * s))
    return np.stack([r, g, b], axis=-1).round().clip(0, 255).astype(np.uint8)


def jpeg(rgb: np.ndarray) -> bytes:
    buf = io.BytesIO()
    PILImage.fromarray(rgb).save(buf, format='JPEG', quality=92)
    return buf.getvalue()


def padded_rows(rgb: np.ndarray, step: int) -> bytes:
    h, w, _ = rgb.shape
    rows = np.zeros((h, step), dtype=np.uint8)
    rows[:, : w * 3] = rgb.reshape(h, w * 3)
    return rows.tobytes()


def ticks(start: int, hz: int, latency_ns: int) -> list[tuple[int, int]]:
    """(log time, stamp) of a stream at `hz`: stamps regular, log = stamp + latency + jitter (0-3 ms).
    The jitter's period (7 samples) is prime to the samples per grid frame, so a grid time does not
    always find a sample without jitter: stamping by log time instead of header gives other values."""
    period = NS // hz
    out = []
    for i in range(DURATION // period + 1):
        stamp = start + i * period
        jitter = ((i * 7919) % 7) * 500_000
        out.append((stamp + latency_ns + jitter, stamp))
    return out


def joints_at(t_ns: int, names: list[str], scale: float) -> list[float]:
    s = t_ns / NS
    return [scale * math.sin(1.3 * s + 0.7 * k) + 0.1 * k for k, _ in enumerate(names)]


def write_rosbag2(out_dir: Path, start: int) -> None:
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore

    ts = get_typestore(Stores.ROS2_JAZZY)
    JointState = ts.types['sensor_msgs/msg/JointState']
    CompressedImage = ts.types['sensor_msgs/msg/CompressedImage']
    Image = ts.types['sensor_msgs/msg/Image']
    String = ts.types['std_msgs/msg/String']
    Header = ts.types['std_msgs/msg/Header']
    Time = ts.types['builtin_interfaces/msg/Time']

    def header(stamp: int, frame_id: str) -> object:
        return Header(stamp=Time(sec=stamp // NS, nanosec=stamp % NS), frame_id=frame_id)

    # Joint values are a function of the *stamp* (what the robot measured when), so the judge's
    # values differ when the exporter stamps by log time instead.
    state_names = ['elbow', 'shoulder', 'wrist', 'gripper', 'camera_tilt']
    command_names = ['gripper', 'wrist', 'elbow', 'shoulder']
    messages: list[tuple[int, str, object]] = []
    for log, stamp in ticks(start, 50, 4_000_000):
        pos = joints_at(stamp, state_names, 1.0)
        vel = joints_at(stamp + NS // 4, state_names, 1.3)
        messages.append((log, '/joint_states', JointState(header=header(stamp, 'base_link'), name=state_names, position=np.array(pos), velocity=np.array(vel), effort=np.zeros(5))))
    for log, stamp in ticks(start, 25, 2_000_000):
        pos = joints_at(stamp + NS // 10, command_names, 0.8)
        messages.append((log, '/joint_commands', JointState(header=header(stamp, 'base_link'), name=command_names, position=np.array(pos), velocity=np.zeros(0), effort=np.zeros(0))))
    for log, stamp in ticks(start, 15, 30_000_000):
        data = jpeg(scene(64, 48, stamp))
        messages.append((log, '/camera/front/image_raw/compressed', CompressedImage(header=header(stamp, 'camera_front'), format='jpeg', data=np.frombuffer(data, dtype=np.uint8))))
    for log, stamp in ticks(start, 12, 18_000_000):
        data = padded_rows(scene(40, 30, stamp), 128)
        messages.append((log, '/camera/wrist/image_raw', Image(header=header(stamp, 'camera_wrist'), height=30, width=40, encoding='rgb8', is_bigendian=0, step=128, data=np.frombuffer(data, dtype=np.uint8))))
    for log, stamp in ticks(start, 2, 0):
        messages.append((log, '/diagnostics', String(data=f'ok at {stamp}')))
    messages.sort(key=lambda m: m[0])
    with Writer(out_dir, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        conns: dict[str, object] = {}
        for log, topic, msg in messages:
            if topic not in conns:
                conns[topic] = writer.add_connection(topic, msg.__msgtype__, typestore=ts)  # type: ignore[attr-defined]
            writer.write(conns[topic], log, ts.serialize_cdr(msg, msg.__msgtype__))  # type: ignore[attr-defined]


def joint_positions_class() -> type:
    """`arm.JointPositions`, a message type of the robot's own, built from a descriptor (as a team's
    generated code would define it), in the default pool next to google.protobuf.Timestamp."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    from google.protobuf import timestamp_pb2  # noqa: F401  (puts timestamp.proto in the default pool)

    pool = descriptor_pool.Default()
    try:
        return message_factory.GetMessageClass(pool.FindMessageTypeByName('arm.JointPositions'))
    except KeyError:
        pass
    f = descriptor_pb2.FileDescriptorProto(name='arm/joint_positions.proto', package='arm', syntax='proto3', dependency=['google/protobuf/timestamp.proto'])
    m = f.message_type.add(name='JointPositions')
    F = descriptor_pb2.FieldDescriptorProto
    m.field.add(name='timestamp', number=1, type=F.TYPE_MESSAGE, type_name='.google.protobuf.Timestamp', label=F.LABEL_OPTIONAL)
    m.field.add(name='name', number=2, type=F.TYPE_STRING, label=F.LABEL_REPEATED)
    m.field.add(name='position', number=3, type=F.TYPE_DOUBLE, label=F.LABEL_REPEATED)
    m.field.add(name='velocity', number=4, type=F.TYPE_DOUBLE, label=F.LABEL_REPEATED)
    pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName('arm.JointPositions'))


def write_protobuf(out_path: Path, start: int) -> None:
    from foxglove_schemas_protobuf.CompressedImage_pb2 import CompressedImage
    from foxglove_schemas_protobuf.RawImage_pb2 import RawImage
    from mcap.writer import CompressionType
    from mcap_protobuf.writer import Writer

    JointPositions = joint_positions_class()
    names = ['wrist', 'shoulder', 'elbow']
    messages: list[tuple[int, str, object]] = []
    for log, stamp in ticks(start, 40, 8_000_000):
        msg = JointPositions(name=names, position=joints_at(stamp, names, 1.0), velocity=joints_at(stamp + NS // 4, names, 1.3))
        msg.timestamp.FromNanoseconds(stamp)
        messages.append((log, '/arm/joints', msg))
    for log, stamp in ticks(start, 15, 3_000_000):
        msg = CompressedImage(frame_id='cam_front', format='jpeg', data=jpeg(scene(48, 36, stamp)))
        msg.timestamp.FromNanoseconds(stamp)
        messages.append((log, '/camera/front', msg))
    for log, stamp in ticks(start, 12, 6_000_000):
        msg = RawImage(frame_id='cam_side', width=32, height=24, encoding='rgb8', step=100, data=padded_rows(scene(32, 24, stamp), 100))
        msg.timestamp.FromNanoseconds(stamp)
        messages.append((log, '/camera/side', msg))
    messages.sort(key=lambda m: m[0])
    with out_path.open('wb') as f, Writer(f, compression=CompressionType.ZSTD) as writer:
        for log, topic, msg in messages:
            writer.write_message(topic=topic, message=msg, log_time=log, publish_time=log)


def main(argv: list[str]) -> int:
    if len(argv) != 4 or argv[1] not in ('rosbag2', 'protobuf'):
        print('usage: write_judge_recordings.py rosbag2|protobuf OUT START_NS', file=sys.stderr)
        return 2
    out, start = Path(argv[2]), int(argv[3])
    if argv[1] == 'rosbag2':
        write_rosbag2(out, start)
    else:
        write_protobuf(out, start)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
