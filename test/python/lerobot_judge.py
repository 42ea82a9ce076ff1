"""LeRobot itself judges an exported dataset: its loader reads every frame, its trainer trains.

    python3 lerobot_judge.py <dataset dir> <expectations.json>

The expectations name the source recordings and the mapping the export was given:

    {"repo_id": "fleet/judge", "num_episodes": 2, "min_psnr_db": 24,
     "mapping": {"fps": 10, "features": {...}, "stateRule": "hold"},
     "episodes": [{"episode_id": "ep_...", "task": "pick-cube", "recording": "/path/to/recording.mcap or bag dir"}],
     "train": {"steps": 4, "batch_size": 2}}

Checks, in order, stopping at the first that fails (exit 1, one line `lerobot-judge: FAILED ...`):
1. `LeRobotDataset(repo_id, root=DIR, video_backend="pyav")` loads offline; `len(ds)` and
   `ds.num_episodes` equal what the sources say (the episode lengths are computed here);
2. every item `ds[i]` comes back; its `observation.state` and `action` equal the source messages
   put on the grid by the rule docs/training.md states, computed here from the recordings read
   with Foxglove's `mcap` reader (`mcap-ros2-support` for cdr, `mcap-protobuf-support` for
   protobuf, json for json), within float32 rounding; its task is the expected one;
3. every camera frame came back at its timestamp (LeRobot's own decoder refuses a frame farther
   than tolerance_s = 1e-4 from it) and is within `min_psnr_db` of the source image nearest in
   time (over the source's pixels; padding to an even or the codec's minimum size, right and
   bottom, must be black in luma within the same bound: 4:2:0 video gives a padding pixel next
   to the source the source's colour); and over each episode, the source images of
   the frames' own times fit the video better (by 5 % in squared error) than those one frame
   earlier or later: a frame-by-frame PSNR alone does not see a one-frame shift of a slow scene.
   (A scene that does not move at all would not tell them apart: the simulator's arm always does.)
4. `lerobot-train` trains a small ACT on the CPU for a few steps and exits 0.
On success, one JSON line on stdout: frames, episodes, PSNR per camera, training step times.

The resampling is written here again from the documented rule, not imported: the judge reads
nothing of the project's code.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

NS = 1_000_000_000


class JudgeError(Exception):
    """A check failed; the message says which and where."""


# ---------------------------------------------------------------------------------------------
# Reading the sources with Foxglove's readers


def mcap_files(recording: Path) -> list[Path]:
    """A recording is one MCAP file, or a rosbag2 directory holding one or more (split) MCAPs."""
    if recording.is_file():
        return [recording]
    files = sorted(recording.rglob('*.mcap'))
    if not files:
        raise JudgeError(f'no MCAP file in {recording}')
    return files


def decoder_factories() -> list[Any]:
    from mcap.decoder import DecoderFactory as BaseFactory
    from mcap_ros2.decoder import DecoderFactory as Ros2Factory

    class JsonFactory(BaseFactory):  # type: ignore[misc]
        """`json` messages: their bytes are the JSON text (mcap has no decoder of its own for them)."""

        def decoder_for(self, message_encoding: str, schema: Any) -> Any:
            if message_encoding != 'json':
                return None
            return lambda data: json.loads(bytes(data))

    # protobuf messages are decoded by Foxglove's own factory from the FileDescriptorSet the MCAP
    # holds: the judge shares no decoding code with the exporter.
    from mcap_protobuf.decoder import DecoderFactory as ProtobufFactory

    return [Ros2Factory(), ProtobufFactory(), JsonFactory()]


@dataclass
class Message:
    log_ns: int
    data: Any  # a dict (json) or a decoded ROS 2 / protobuf message


def read_topic(files: list[Path], topic: str) -> list[Message]:
    """Every message of `topic`, decoded, in log-time order (rosbag2 splits concatenated)."""
    from mcap.reader import make_reader

    out: list[Message] = []
    for path in files:
        with path.open('rb') as f:
            reader = make_reader(f, decoder_factories=decoder_factories())
            for _schema, _channel, message, decoded in reader.iter_decoded_messages(topics=[topic], log_time_order=True):
                out.append(Message(message.log_time, decoded))
    out.sort(key=lambda m: m.log_ns)  # stable: equal times keep the file's order
    return out


def field(msg: Any, path: str) -> Any:
    """A dotted field path (`position`, `twist.linear.x`) of a dict or a decoded message."""
    v = msg
    for part in path.split('.'):
        v = v[part] if isinstance(v, dict) else getattr(v, part)
    return v


def numbers(msg: Any, path: str, topic: str) -> list[float]:
    v = field(msg, path)
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return [float(v)]
    try:
        return [float(x) for x in v]
    except TypeError as err:
        raise JudgeError(f'{topic}: field {path} is not numbers ({type(v).__name__})') from err


def time_of(v: Any) -> int | None:
    """`{sec, nanosec}` (ROS 2), `{sec, nsec}` (Foxglove JSON) or `{seconds, nanos}` (protobuf) in ns."""
    if v is None:
        return None
    get = (lambda k: v.get(k)) if isinstance(v, dict) else (lambda k: getattr(v, k, None))
    sec = get('sec') if get('sec') is not None else get('seconds')
    nsec = next((x for x in (get('nanosec'), get('nsec'), get('nanos')) if x is not None), None)
    if sec is None or nsec is None:
        return None
    return int(sec) * NS + int(nsec)


def stamp_ns(m: Message, stamp: str | None, where: str) -> int:
    """The message's time by the stamp rule: `log` its log time; `header` its header.stamp (or a
    Foxglove schema's `timestamp`); unset, the header stamp of a message that has a header, else
    the log time."""
    if stamp == 'log':
        return m.log_ns
    d = m.data
    header = d.get('header') if isinstance(d, dict) else getattr(d, 'header', None)
    t = time_of(header.get('stamp') if isinstance(header, dict) else getattr(header, 'stamp', None)) if header is not None else None
    if t is not None:
        return t
    if stamp == 'header':
        t = time_of(d.get('timestamp') if isinstance(d, dict) else getattr(d, 'timestamp', None))
        if t is None:
            raise JudgeError(f'{where}: no header.stamp, and the mapping stamps by header')
        return t
    return m.log_ns


def topics_of(files: list[Path]) -> set[str]:
    from mcap.reader import make_reader

    out: set[str] = set()
    for path in files:
        with path.open('rb') as f:
            summary = make_reader(f).get_summary()
            if summary is not None:
                out |= {c.topic for c in summary.channels.values()}
    return out


def choose_topic(topic: str | list[str], present: set[str]) -> str:
    """A topic, or the first of a list the recording has."""
    if isinstance(topic, str):
        return topic
    return next((t for t in topic if t in present), topic[0])


def image_rgb(msg: Any, where: str) -> np.ndarray:
    """A camera message as an HxWx3 uint8 RGB array: raw (foxglove.RawImage, sensor_msgs/msg/Image)
    by its encoding and step, compressed (sensor_msgs/msg/CompressedImage, foxglove.CompressedImage)
    through Pillow."""
    from PIL import Image

    get = (lambda k: msg.get(k)) if isinstance(msg, dict) else (lambda k: getattr(msg, k, None))
    data = get('data')
    if isinstance(data, str):  # JSON messages carry bytes as base64 text
        import base64

        data = base64.b64decode(data)
    data = bytes(data)
    encoding = get('encoding')
    if encoding is None or encoding == '':
        fmt = str(get('format') or '')
        img = Image.open(io.BytesIO(data))
        if fmt and fmt.split(';')[0].strip().lower() not in (img.format or '').lower() and not (fmt.lower().startswith('jpg') and img.format == 'JPEG'):
            raise JudgeError(f'{where}: format {fmt!r} but the bytes are {img.format}')
        return np.asarray(img.convert('RGB'))
    width, height, step = int(get('width')), int(get('height')), int(get('step') or 0)
    channels = {'rgb8': 3, 'bgr8': 3, 'rgba8': 4, 'bgra8': 4, 'mono8': 1}.get(encoding)
    if channels is None:
        raise JudgeError(f'{where}: image encoding {encoding!r} is not one the judge reads')
    step = step or width * channels
    rows = np.frombuffer(data, dtype=np.uint8, count=step * height).reshape(height, step)
    px = rows[:, : width * channels].reshape(height, width, channels)
    if encoding in ('bgr8', 'bgra8'):
        px = px[:, :, [2, 1, 0]]
    elif encoding == 'rgba8':
        px = px[:, :, :3]
    elif encoding == 'mono8':
        px = np.repeat(px, 3, axis=2)
    return np.ascontiguousarray(px)


def image_size(msg: Any, where: str) -> tuple[int, int]:
    w = msg.get('width') if isinstance(msg, dict) else getattr(msg, 'width', None)
    if w is not None and w != 0:
        h = msg.get('height') if isinstance(msg, dict) else msg.height
        return int(w), int(h)
    a = image_rgb(msg, where)
    return a.shape[1], a.shape[0]


# ---------------------------------------------------------------------------------------------
# The documented rule (docs/training.md, "How streams are put on the grid"), written here again


def grid_ns(start: int, fps: int, i: int) -> int:
    """Frame i is at start + i / fps, rounded to the nearest nanosecond."""
    return start + (i * NS * 2 + fps) // (2 * fps)


def hold(times: list[int], values: np.ndarray, t: int) -> np.ndarray:
    """The latest sample at or before t (before the first sample, the first)."""
    j = bisect_right(times, t) - 1
    return values[max(j, 0)]


def linear(times: list[int], values: np.ndarray, t: int) -> np.ndarray:
    j = bisect_right(times, t) - 1
    if j < 0:
        return values[0]
    if j + 1 >= len(times) or times[j] == t:
        return values[j]
    frac = (t - times[j]) / (times[j + 1] - times[j])
    return values[j] + (values[j + 1] - values[j]) * frac


def nearest(times: list[int], t: int) -> int:
    """Index of the sample nearest in time to t; a tie goes to the earlier one."""
    j = bisect_right(times, t) - 1
    if j < 0:
        return 0
    if j + 1 < len(times) and times[j + 1] - t < t - times[j]:
        return j + 1
    return j


def nearest_value(times: list[int], values: np.ndarray, t: int) -> np.ndarray:
    """The `nearest` rule for vectors: the sample nearest in time, as for cameras."""
    return values[nearest(times, t)]


RULES = {'hold': hold, 'linear': linear, 'nearest': nearest_value}


@dataclass
class Vector:
    times: list[int]
    values: np.ndarray  # float64, len(times) x dim


@dataclass
class Camera:
    times: list[int]
    messages: list[Message]
    size: tuple[int, int]


@dataclass
class SourceEpisode:
    episode_id: str
    task: str
    start: int
    length: int
    vectors: dict[str, np.ndarray]  # key -> length x dim, the expected values on the grid
    cameras: dict[str, tuple[Camera, list[int]]]  # key -> (camera, source index per frame)


def read_vector(files: list[Path], spec: dict[str, Any], topic: str, stamp: str | None) -> Vector:
    """The feature's samples: its fields concatenated; with `joints`, those joints in that order,
    picked by name from `names_from` (default `name`) of every message."""
    msgs = read_topic(files, topic)
    if not msgs:
        raise JudgeError(f'{topic}: no message in the recording')
    joints: list[str] | None = spec.get('joints')
    times: list[int] = []
    rows: list[list[float]] = []
    for m in msgs:
        t = stamp_ns(m, stamp, f'{topic} at {m.log_ns} ns')
        row: list[float] = []
        for f in spec['fields']:
            xs = numbers(m.data, f, topic)
            if joints is not None:
                names = list(field(m.data, spec.get('names_from', 'name')))
                xs = [xs[names.index(j)] for j in joints]
            row.extend(xs)
        if times and t == times[-1]:  # two samples at one time: the later one is the value
            rows[-1] = row
            continue
        times.append(t)
        rows.append(row)
    return Vector(times, np.asarray(rows, dtype=np.float64))


def read_camera(files: list[Path], topic: str, stamp: str | None) -> Camera:
    msgs = read_topic(files, topic)
    if not msgs:
        raise JudgeError(f'{topic}: no message in the recording')
    size = image_size(msgs[0].data, f'{topic} first frame')
    # A last frame of another size is a recorder's cut-short frame (the simulator's JSON recorder
    # writes one when it stops between two frames at a byte rate): it is not part of the video.
    if len(msgs) > 1 and image_size(msgs[-1].data, f'{topic} last frame') != size:
        msgs = msgs[:-1]
    return Camera([stamp_ns(m, stamp, f'{topic} at {m.log_ns} ns') for m in msgs], msgs, size)


def source_episode(recording: Path, mapping: dict[str, Any], episode_id: str, task: str) -> SourceEpisode:
    files = mcap_files(recording)
    present = topics_of(files)
    fps = int(mapping.get('fps', 10))
    rule = mapping.get('stateRule', 'hold')
    feats: dict[str, dict[str, Any]] = mapping['features']
    state = feats.get('observation.state', {})
    vectors: dict[str, Vector] = {}
    joined: dict[str, list[Vector]] = {}
    cameras: dict[str, Camera] = {}
    for k, spec in feats.items():
        if k.startswith('observation.images.'):
            cameras[k] = read_camera(files, choose_topic(spec['topic'], present), spec.get('stamp', mapping.get('stamp')))
        elif 'join' in spec:
            # Several topics, each read on its own; concatenated in order once on the grid.
            joined[k] = [read_vector(files, p, choose_topic(p['topic'], present), p.get('stamp', mapping.get('stamp'))) for p in spec['join']]
        elif not spec.get('from_next_state') or 'topic' in spec:
            vectors[k] = read_vector(files, spec, choose_topic(spec['topic'], present), spec.get('stamp', mapping.get('stamp')))
        else:
            # The state topic again, with the state's joints, names and stamp unless given here.
            inherited = {'joints': state.get('joints'), 'names_from': state.get('names_from', 'name')} | {x: y for x, y in spec.items() if y is not None}
            if inherited['joints'] is None:
                del inherited['joints']
            vectors[k] = read_vector(files, inherited, choose_topic(state['topic'], present), spec.get('stamp', state.get('stamp', mapping.get('stamp'))))
    # Every mapped stream bounds the grid, start and end: vectors, each part of a joined one, cameras.
    streams = [v.times for v in vectors.values()] + [p.times for ps in joined.values() for p in ps] + [c.times for c in cameras.values()]
    start = max(s[0] for s in streams)
    end = min(s[-1] for s in streams)
    if end < start:
        raise JudgeError(f'{episode_id}: the streams never overlap in the source')
    length = (end - start) * fps // NS + 1
    ts = [grid_ns(start, fps, i) for i in range(length)]
    on_grid: dict[str, np.ndarray] = {}
    for k, ps in joined.items():
        f = RULES[feats[k].get('rule', rule)]
        on_grid[k] = np.concatenate([np.stack([f(p.times, p.values, t) for t in ts]) for p in ps], axis=1)
    for k, v in vectors.items():
        f = RULES[feats[k].get('rule', rule)]
        if feats[k].get('from_next_state'):
            # Frame i's action is frame i+1's state; the last frame keeps its own (docs/training.md).
            on_grid[k] = np.stack([f(v.times, v.values, grid_ns(start, fps, min(i + 1, length - 1))) for i in range(length)])
        else:
            on_grid[k] = np.stack([f(v.times, v.values, t) for t in ts])
    return SourceEpisode(
        episode_id,
        task,
        start,
        length,
        on_grid,
        {k: (c, [nearest(c.times, t) for t in ts]) for k, c in cameras.items()},
    )


# ---------------------------------------------------------------------------------------------
# The checks


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return math.inf if mse == 0 else 10 * math.log10(255.0**2 / mse)


def padded_to(image: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Odd sizes and sizes under the codec's minimum are padded on the right and at the bottom
    with black; the source pixels keep their place at (0, 0) (docs/training.md). Another size
    comes back as it is, for the size check to name."""
    if image.shape == shape or shape[0] < image.shape[0] or shape[1] < image.shape[1]:
        return image
    out = np.zeros(shape, dtype=image.dtype)
    out[: image.shape[0], : image.shape[1]] = image
    return out


def luma(rgb: np.ndarray) -> np.ndarray:
    """BT.601 luma of RGB pixels (... x 3), on the same 0-255 scale."""
    return rgb.astype(np.float64) @ np.array([0.299, 0.587, 0.114])


def equal_f32(actual: np.ndarray, expected: np.ndarray) -> bool:
    """Equal within float32 rounding: the stored float32 is the source value rounded once."""
    e32 = expected.astype(np.float32)
    tol = np.spacing(np.abs(e32)) + np.float32(1e-12)
    return actual.shape == e32.shape and bool(np.all(np.abs(actual.astype(np.float32) - e32) <= tol))


def load_dataset(repo_id: str, root: Path) -> Any:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    try:
        return LeRobotDataset(repo_id, root=root, video_backend='pyav')
    except Exception as err:  # any refusal of LeRobot's loader is the finding
        raise JudgeError(f'LeRobotDataset({repo_id!r}, root={str(root)!r}) refused the dataset: {type(err).__name__}: {err}') from err


def check_items(ds: Any, sources: list[SourceEpisode], min_psnr: float) -> dict[str, Any]:
    fps = ds.meta.fps
    by_id: dict[str, SourceEpisode] = {s.episode_id: s for s in sources}
    episodes = ds.meta.episodes
    if 'meta/episode_id' not in episodes.column_names:
        raise JudgeError('meta/episodes has no meta/episode_id column: no way back to the source recordings')
    order = [by_id.get(e) for e in episodes['meta/episode_id']]
    for idx, s in enumerate(order):
        if s is None:
            raise JudgeError(f'episode {idx} is {episodes["meta/episode_id"][idx]!r}, not one of the expected recordings')
    camera_keys = list(ds.meta.video_keys)
    psnrs: dict[str, list[float]] = {k: [] for k in camera_keys}
    # Per (episode, camera): squared error of every decoded frame against the source image of its
    # own grid time, and of the grid times one frame before and after. Frame by frame a neighbour
    # can be as close (a slow scene; AV1 at CRF 30 sometimes repeats a P-frame whole), but over an
    # episode the frame's own time must fit best: a video shifted by one frame does not.
    shifts: dict[tuple[int, str], np.ndarray] = {}
    decoded: dict[tuple[int, str, int], np.ndarray] = {}

    def source_image(ep: int, key: str, cam: Camera, index: int) -> np.ndarray:
        k = (ep, key, index)
        if k not in decoded:
            msg = cam.messages[index]
            decoded[k] = image_rgb(msg.data, f'{key} source at {msg.log_ns} ns')
        return decoded[k]

    expected_total = sum(s.length for s in order if s is not None)
    if len(ds) != expected_total:
        raise JudgeError(f'len(ds) is {len(ds)}, the sources give {expected_total} frames ({", ".join(f"{s.episode_id}: {s.length}" for s in order if s)})')
    seen = [0] * len(order)
    for i in range(len(ds)):
        try:
            item = ds[i]
        except Exception as err:  # an item LeRobot cannot read is the finding
            raise JudgeError(f'ds[{i}] failed: {type(err).__name__}: {err}') from err
        ep = int(item['episode_index'])
        fi = int(item['frame_index'])
        s = order[ep]
        assert s is not None
        where = f'ds[{i}] (episode {ep} = {s.episode_id}, frame {fi})'
        if fi != seen[ep]:
            raise JudgeError(f'{where}: frame_index {fi}, expected {seen[ep]}')
        seen[ep] += 1
        if abs(float(item['timestamp']) - fi / fps) > 1e-4:
            raise JudgeError(f'{where}: timestamp {float(item["timestamp"])}, expected {fi / fps}')
        if 'task' in item and item['task'] != s.task:
            raise JudgeError(f'{where}: task {item["task"]!r}, expected {s.task!r}')
        for key, values in s.vectors.items():
            got = item[key].numpy()
            if not equal_f32(got, values[fi]):
                raise JudgeError(f'{where}: {key} is {got.tolist()}, the source gives {values[fi].astype(np.float32).tolist()}')
        for key in camera_keys:
            cam, picks = s.cameras[key]
            # LeRobot decoded the frame at `timestamp` or refused (tolerance_s); CHW float in [0, 1].
            got = (item[key].numpy().transpose(1, 2, 0) * 255.0).round().clip(0, 255).astype(np.uint8)
            msg = cam.messages[picks[fi]]
            want = source_image(ep, key, cam, picks[fi])
            h, w = want.shape[:2]
            if got.shape != want.shape and (got.shape[0] < h or got.shape[1] < w):
                raise JudgeError(f'{where}: {key} is {got.shape[1]}x{got.shape[0]}, the source image {w}x{h}')
            # The PSNR is the source region's: black padding would flatter it. The padding itself
            # must still be black within the same bound.
            p = psnr(got[:h, :w], want)
            if p < min_psnr:
                raise JudgeError(f'{where}: {key} is {p:.1f} dB PSNR from the source image at {msg.log_ns} ns (at least {min_psnr} dB expected)')
            if got.shape != want.shape:
                # Black in brightness: yuv420p keeps one colour sample per 2x2 pixels, so a padding
                # column next to an odd-width source shares the source's colour and cannot come back
                # black in RGB (measured: 22 to 24 dB from black next to a saturated scene, lossless
                # too), while its luma stays within 28 dB of black. Source pixels or garbage in the
                # padding are bright and still fail.
                mask = np.ones(got.shape[:2], dtype=bool)
                mask[:h, :w] = False
                pp = psnr(luma(got[mask]), np.zeros(int(mask.sum())))
                if pp < min_psnr:
                    raise JudgeError(f'{where}: {key} padding ({w}x{h} source in a {got.shape[1]}x{got.shape[0]} frame) is {pp:.1f} dB PSNR (luma) from black')
            psnrs[key].append(p)
            around = [picks[min(max(fi + d, 0), s.length - 1)] for d in (-1, 0, 1)]
            err = [float(np.mean((got.astype(np.float64) - padded_to(source_image(ep, key, cam, q), got.shape)) ** 2)) for q in around]
            shifts[(ep, key)] = shifts.get((ep, key), np.zeros(3)) + np.asarray(err)
    for ep, s in enumerate(order):
        if s is not None and seen[ep] != s.length:
            raise JudgeError(f'episode {ep} ({s.episode_id}) has {seen[ep]} frames, the source gives {s.length}')
    fit: dict[str, float] = {}
    for (ep, key), err in shifts.items():
        # How much better the frame's own time fits than the better of one frame early or late.
        ratio = float(min(err[0], err[2]) / err[1]) if err[1] > 0 else math.inf
        if ratio < 1.05:
            s = order[ep]
            raise JudgeError(
                f'episode {ep} ({s.episode_id if s else "?"}) {key}: the video fits the source images one frame '
                f'{"earlier" if err[0] <= err[2] else "later"} about as well or better (mean squared error {err[1] / s.length if s else 0:.1f} '
                f'at the frame times, {err[0] / s.length if s else 0:.1f} one frame early, {err[2] / s.length if s else 0:.1f} one frame late)'
            )
        fit[key] = min(fit.get(key, math.inf), ratio)

    def finite(xs: list[float]) -> list[float]:  # a frame equal to its source is inf dB
        return [x for x in xs if math.isfinite(x)] or [99.0]

    return {k: {'min_db': round(min(finite(v)), 2), 'mean_db': round(float(np.mean(finite(v))), 2), 'shift_error_ratio': round(fit.get(k, math.inf), 2)} for k, v in psnrs.items()}


STEP_LINE = re.compile(r'step:(\S+).*?updt_s:([0-9.]+)')


def train(repo_id: str, root: Path, steps: int, batch_size: int) -> dict[str, Any]:
    """A few ACT steps on the CPU: small dimensions, no pretrained backbone (nothing to download)."""
    exe = Path(sys.executable).parent / 'lerobot-train'
    out = Path(tempfile.mkdtemp(prefix='lerobot-judge-train-'))
    args = [
        str(exe),
        f'--dataset.repo_id={repo_id}',
        f'--dataset.root={root}',
        '--dataset.video_backend=pyav',
        '--policy.type=act',
        '--policy.device=cpu',
        '--policy.push_to_hub=false',
        '--policy.pretrained_backbone_weights=null',
        '--policy.dim_model=32',
        '--policy.n_heads=2',
        '--policy.dim_feedforward=64',
        '--policy.n_encoder_layers=1',
        '--policy.n_decoder_layers=1',
        '--policy.n_vae_encoder_layers=1',
        '--policy.latent_dim=8',
        '--policy.chunk_size=5',
        '--policy.n_action_steps=5',
        f'--steps={steps}',
        f'--batch_size={batch_size}',
        '--num_workers=0',
        '--log_freq=1',
        '--save_checkpoint=false',
        '--wandb.enable=false',
        f'--output_dir={out / "run"}',
    ]
    started = time.monotonic()
    try:
        proc = subprocess.run(args, check=False, capture_output=True, text=True, cwd=out, env=os.environ.copy())
    finally:
        shutil.rmtree(out, ignore_errors=True)
    wall = time.monotonic() - started
    log = proc.stdout + proc.stderr
    if proc.returncode != 0:
        tail = '\n'.join(log.strip().splitlines()[-25:])
        raise JudgeError(f'lerobot-train exited {proc.returncode}: {" ".join(args)}\n{tail}')
    step_s = [float(m.group(2)) for m in STEP_LINE.finditer(log)]
    if len(step_s) < steps:
        raise JudgeError(f'lerobot-train exited 0 but logged {len(step_s)} of {steps} steps:\n' + '\n'.join(log.strip().splitlines()[-15:]))
    return {'steps': len(step_s), 'step_s': step_s, 'wall_s': round(wall, 1), 'command': ' '.join(args[1:])}


def judge(root: Path, expect: dict[str, Any]) -> dict[str, Any]:
    repo_id = expect.get('repo_id', 'fleet/judge')
    mapping = expect['mapping']
    t0 = time.monotonic()
    sources = [source_episode(Path(e['recording']), mapping, e['episode_id'], e['task']) for e in expect['episodes']]
    ds = load_dataset(repo_id, root)
    if ds.num_episodes != expect['num_episodes']:
        raise JudgeError(f'ds.num_episodes is {ds.num_episodes}, expected {expect["num_episodes"]}')
    psnrs = check_items(ds, sources, float(expect.get('min_psnr_db', 25)))
    t1 = time.monotonic()
    tr = expect.get('train', {})
    training = train(repo_id, root, int(tr.get('steps', 4)), int(tr.get('batch_size', 2))) if tr is not False else None
    return {
        'ok': True,
        'episodes': ds.num_episodes,
        'frames': len(ds),
        'cameras': {k: {'size': list(ds.meta.features[k]['shape'])} | v for k, v in psnrs.items()},
        'check_s': round(t1 - t0, 1),
        'train': training,
    }


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print('usage: lerobot_judge.py <dataset dir> <expectations.json>', file=sys.stderr)
        return 2
    # Nothing is fetched from the Hub: the dataset is on disk, ACT's backbone starts from scratch.
    os.environ['HF_HUB_OFFLINE'] = '1'
    scratch = tempfile.mkdtemp(prefix='lerobot-judge-hf-')
    os.environ.setdefault('HF_HOME', scratch)  # the datasets library's arrow cache goes here, not to ~
    try:
        expect = json.loads(Path(argv[2]).read_text())
        summary = judge(Path(argv[1]), expect)
    except JudgeError as err:
        print(f'lerobot-judge: FAILED {err}', file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(json.dumps(summary))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
