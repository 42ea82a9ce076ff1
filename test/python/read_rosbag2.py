"""Reads a rosbag2 directory with readers that are not ours, and prints what they saw as JSON.

    python3 read_rosbag2.py <bag directory>

Two independent readers:
- rosbags' AnyReader over the directory: reads metadata.yaml, then the MCAP it names, and
  deserializes every message with its own CDR code and the bag's message definitions;
- mcap-ros2-support's read_ros2_messages over the MCAP file alone, decoding by each channel's
  ros2msg schema.
Pillow decodes the CompressedImage JPEG frames. rosbags' typestore for ROS 2 Jazzy computes the
type hashes the bag should carry.
"""

from __future__ import annotations

import io
import json
import sys
from collections import Counter
from pathlib import Path

from mcap_ros2.reader import read_ros2_messages
from PIL import Image
from rosbags.highlevel import AnyReader
from rosbags.typesys import Stores, get_typestore


def stamp_ns(msg: object) -> int:
    stamp = msg.header.stamp  # type: ignore[attr-defined]
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


def with_rosbags(bag: Path) -> dict[str, object]:
    out: dict[str, object] = {'topics': {}, 'stamp_mismatches': 0, 'messages': 0}
    topics: dict[str, dict[str, object]] = out['topics']  # type: ignore[assignment]
    with AnyReader([bag]) as reader:
        out['message_count'] = reader.message_count
        out['start_time'] = reader.start_time
        out['end_time'] = reader.end_time
        for conn in reader.connections:
            topics[conn.topic] = {
                'type': conn.msgtype,
                'metadata_count': conn.msgcount,
                'read': 0,
                'frame_ids': [],
                'digest': conn.digest,
                'qos': [q.reliability.name.lower() for q in conn.ext.offered_qos_profiles],  # type: ignore[union-attr]
            }
        for conn, timestamp, raw in reader.messages():
            msg = reader.deserialize(raw, conn.msgtype)
            t = topics[conn.topic]
            t['read'] = int(t['read']) + 1  # type: ignore[arg-type]
            out['messages'] = int(out['messages']) + 1  # type: ignore[arg-type]
            if stamp_ns(msg) != timestamp:
                out['stamp_mismatches'] = int(out['stamp_mismatches']) + 1  # type: ignore[arg-type]
            frame_ids: list[str] = t['frame_ids']  # type: ignore[assignment]
            if msg.header.frame_id not in frame_ids:
                frame_ids.append(msg.header.frame_id)
            if conn.msgtype == 'sensor_msgs/msg/JointState':
                t['names'] = list(msg.name)
                t['lengths'] = sorted({len(msg.position), len(msg.velocity), len(msg.effort)})
            elif conn.msgtype == 'sensor_msgs/msg/Image':
                t.setdefault('images', []).append(  # type: ignore[union-attr]
                    {'width': msg.width, 'height': msg.height, 'step': msg.step, 'encoding': msg.encoding, 'bytes': len(msg.data)}
                )
            elif conn.msgtype == 'sensor_msgs/msg/CompressedImage':
                picture = Image.open(io.BytesIO(bytes(msg.data)))
                picture.load()
                t.setdefault('jpegs', []).append(  # type: ignore[union-attr]
                    {'format': msg.format, 'pil_format': picture.format, 'width': picture.width, 'height': picture.height, 'mode': picture.mode}
                )
    return out


def with_mcap_ros2(mcap: Path) -> dict[str, object]:
    counts: Counter[str] = Counter()
    types: dict[str, str] = {}
    mismatches = 0
    with mcap.open('rb') as f:
        for m in read_ros2_messages(f):
            counts[m.channel.topic] += 1
            types[m.channel.topic] = m.schema.name if m.schema else ''
            if stamp_ns(m.ros_msg) != m.log_time_ns:
                mismatches += 1
    return {'counts': dict(counts), 'types': types, 'stamp_mismatches': mismatches}


def main() -> None:
    bag = Path(sys.argv[1])
    store = get_typestore(Stores.ROS2_JAZZY)
    hashes = {t: store.hash_rihs01(t) for t in ('sensor_msgs/msg/JointState', 'sensor_msgs/msg/CompressedImage', 'sensor_msgs/msg/Image')}
    mcaps = sorted(bag.glob('*.mcap'))
    print(json.dumps({'rosbags': with_rosbags(bag), 'mcap_ros2': with_mcap_ros2(mcaps[0]), 'jazzy_hashes': hashes}))


if __name__ == '__main__':
    main()
