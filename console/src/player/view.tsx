import type { ComponentChildren } from 'preact';
import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import type { Episode, FleetClient, Segment } from '@fleet/client';
import { httpRangeSource, openMcap, type McapRecording } from '@fleet/recordings';
import { PlaybackEngine, SPEEDS, type CameraFrame, type EngineSnapshot } from './engine.js';
import { drawFrame } from './frames.js';
import { actionOf, PLAYER_KEYS } from './keys.js';
import { explain, isMcapPath, readLinks, replicaProblem, type Problem } from './links.js';
import { TopicPlot, SERIES_COLORS } from './plot.js';
import { RecordingSet } from './recording-set.js';
import { seriesId } from './series.js';
import type { PlayerProps, PlayerState, PlayerStatus } from './types.js';

/**
 * The episode player: asks read links for the episode's MCAP files, opens them by HTTP range
 * reads straight from the customer's bucket, and plays camera frames and numeric plots on one
 * playhead. Every state without a picture is said in words (see links.ts). The links stay in
 * this component's memory: a link that expires is renewed with a new read-links call, the
 * playhead kept.
 */

type Opened = { phase: 'loading'; step: string } | { phase: 'problem'; problem: Problem } | { phase: 'ready'; engine: PlaybackEngine };

/** What makes the player start again: another episode, or a replica that became verified. */
function readyKey(e: Episode): string {
  return `${e.id} ${e.replicas.map((r) => `${r.destination_id}:${r.state}:${r.error ?? ''}`).join(',')}`;
}

async function openEpisode(client: FleetClient, episode: Episode, signal: AbortSignal, onStep: (s: string) => void): Promise<PlaybackEngine> {
  onStep('Reading the manifest');
  const files = await client.episodes.files(episode.id, { signal });
  const mcap = files.files.filter((f) => isMcapPath(f.path));
  if (mcap.length === 0) throw new NoMcapError(files.files.map((f) => f.path));
  onStep('Asking for read links');
  const links = await readLinks(client, episode.id, { files: mcap.map((f) => f.path) }, signal);
  onStep('Opening the recording');
  const opened: McapRecording[] = [];
  try {
    for (const link of links.files) {
      const source = httpRangeSource({
        url: link.url,
        size: link.size_bytes,
        signal,
        // An expired link: a fresh one for the same file from the same destination.
        renew: async () => {
          const again = await readLinks(client, episode.id, { destination_id: links.destination_id, files: [link.path] }, signal);
          const fresh = again.files.find((f) => f.path === link.path);
          if (!fresh) throw new Error(`read links answered no link for ${link.path}`);
          return fresh.url;
        },
      });
      opened.push(await openMcap(source, { recover: true, name: link.path }));
    }
  } catch (err) {
    await Promise.all(opened.map((r) => r.close().catch(() => undefined)));
    throw err;
  }
  const set = new RecordingSet(opened);
  if (set.channels.length === 0) {
    await set.close();
    throw new EmptyRecordingError();
  }
  onStep('Reading the first frame');
  const engine = new PlaybackEngine(set);
  try {
    await engine.start();
  } catch (err) {
    await engine.close();
    throw err;
  }
  return engine;
}

class NoMcapError extends Error {
  constructor(readonly paths: string[]) {
    super('no MCAP file');
  }
}
class EmptyRecordingError extends Error {}

function problemOf(err: unknown): Problem {
  if (err instanceof NoMcapError) {
    return { problem: 'no_mcap', title: 'No MCAP recording', text: `The player reads MCAP files (rosbag2's mcap storage, Foxglove's format); this episode's manifest lists ${err.paths.length === 0 ? 'no file' : err.paths.slice(0, 5).join(', ')}.` };
  }
  if (err instanceof EmptyRecordingError) return { problem: 'empty', title: 'Empty recording', text: 'The recording holds no channel: there is nothing to play.' };
  return explain(err);
}

export function PlayerView(props: PlayerProps) {
  const { episode, client } = props;
  const [opened, setOpened] = useState<Opened>({ phase: 'loading', step: 'Starting' });
  const key = readyKey(episode);
  const onState = useRef(props.onState);
  onState.current = props.onState;

  useEffect(() => {
    const pre = replicaProblem(episode);
    if (pre) {
      setOpened({ phase: 'problem', problem: pre });
      return;
    }
    const ac = new AbortController();
    let engine: PlaybackEngine | undefined;
    setOpened({ phase: 'loading', step: 'Starting' });
    openEpisode(client, episode, ac.signal, (step) => !ac.signal.aborted && setOpened({ phase: 'loading', step })).then(
      (e) => {
        if (ac.signal.aborted) return void e.close();
        engine = e;
        setOpened({ phase: 'ready', engine: e });
      },
      (err: unknown) => {
        if (!ac.signal.aborted) setOpened({ phase: 'problem', problem: problemOf(err) });
      },
    );
    return () => {
      ac.abort();
      void engine?.close();
    };
  }, [key, client]);

  useEffect(() => {
    if (opened.phase === 'problem') onState.current?.({ status: 'unavailable', problem: opened.problem.problem, message: `${opened.problem.title}: ${opened.problem.text}`, speed: 1 });
    if (opened.phase === 'loading') onState.current?.({ status: 'loading', speed: 1 });
  }, [opened]);

  return (
    <div class="player" data-status={opened.phase === 'ready' ? undefined : opened.phase === 'loading' ? 'loading' : 'unavailable'}>
      {opened.phase === 'loading' ? (
        <div class="player-state" role="status" aria-live="polite">
          <span class="player-spinner" aria-hidden="true" /> {opened.step}…
        </div>
      ) : null}
      {opened.phase === 'problem' ? <ProblemNotice problem={opened.problem} /> : null}
      {opened.phase === 'ready' ? <Stage engine={opened.engine} episode={episode} client={client} autoplay={props.autoplay ?? false} keyboard={props.keyboard ?? true} onState={onState} /> : null}
    </div>
  );
}

function ProblemNotice({ problem, inline }: { problem: Problem; inline?: boolean }) {
  const tone = ['robot_only', 'syncing'].includes(problem.problem) ? 'info' : ['replica_error', 'unsupported', 'no_mcap', 'empty'].includes(problem.problem) ? 'warn' : 'error';
  return (
    <div class={`notice ${tone} player-problem${inline ? ' inline' : ''}`} role={tone === 'error' ? 'alert' : 'status'} data-problem={problem.problem}>
      <strong>{problem.title}</strong>
      <p>{problem.text}</p>
      {problem.code || problem.requestId ? (
        <p class="muted small">
          {problem.code ? <code>{problem.code}</code> : null}
          {problem.requestId ? (
            <>
              {' '}
              request_id <code>{problem.requestId}</code>
            </>
          ) : null}
        </p>
      ) : null}
    </div>
  );
}

/** `m:ss.mmm` of ns from the start. */
export function clock(ns: bigint): string {
  const ms = Number(ns / 1_000_000n);
  const m = Math.floor(ms / 60_000);
  const s = (ms - m * 60_000) / 1000;
  return `${m}:${s.toFixed(3).padStart(6, '0')}`;
}

function formatValue(v: number): string {
  if (!Number.isFinite(v)) return String(v);
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e6)) return v.toExponential(4);
  return Number(v.toFixed(4)).toString();
}

/**
 * Segments to log time: offsets count from the episode's start. When the recording's clock is
 * the episode's (log times near `started_at`) that is `started_at + offset`; a recording on
 * another clock (simulated time) is placed from its own first message.
 */
function segmentStartNs(episode: Episode, recordingStartNs: bigint, offsetS: number): bigint {
  const startedNs = BigInt(Date.parse(episode.started_at)) * 1_000_000n;
  const base = !Number.isNaN(Date.parse(episode.started_at)) && (startedNs - recordingStartNs < 3_600_000_000_000n && recordingStartNs - startedNs < 3_600_000_000_000n) ? startedNs : recordingStartNs;
  return base + BigInt(Math.round(offsetS * 1e9));
}

function Stage(props: { engine: PlaybackEngine; episode: Episode; client: FleetClient; autoplay: boolean; keyboard: boolean; onState: { current: ((s: PlayerState) => void) | undefined } }) {
  const { engine, episode } = props;
  const [snap, setSnap] = useState<EngineSnapshot>(() => engine.snapshot());
  const [selection, setSelection] = useState(() => ({ cameras: [...engine.selectedCameras], series: [...engine.selectedSeries] }));
  const [segments, setSegments] = useState<Segment[] | undefined>(undefined);
  const start = engine.startNs;
  const end = engine.endNs;
  const duration = end - start;

  useEffect(() => engine.subscribe(setSnap), [engine]);
  useEffect(() => {
    if (props.autoplay) engine.play();
  }, [engine]);
  useEffect(() => {
    const ac = new AbortController();
    props.client.episodes.segments(episode.id, { signal: ac.signal }).then(
      (r) => !ac.signal.aborted && setSegments(r.segments),
      () => undefined,
    );
    return () => ac.abort();
  }, [episode.id]);

  const status: PlayerStatus = snap.playing ? (snap.buffering ? 'buffering' : 'playing') : snap.playheadNs >= end && duration > 0n ? 'ended' : 'paused';
  useEffect(() => {
    const problem = snap.error === undefined ? undefined : explain(snap.error);
    props.onState.current?.({
      status,
      ...(problem ? { problem: problem.problem, message: `${problem.title}: ${problem.text}` } : {}),
      playheadNs: snap.playheadNs.toString(),
      startNs: start.toString(),
      endNs: end.toString(),
      speed: snap.speed,
      truncated: engine.set.truncated,
    });
  }, [status, snap.playheadNs, snap.speed, snap.error]);

  useEffect(() => {
    if (!props.keyboard) return;
    const onKey = (e: KeyboardEvent) => {
      const action = actionOf(e);
      if (!action) return;
      e.preventDefault();
      switch (action) {
        case 'toggle':
          return engine.toggle();
        case 'prev-frame':
          return void engine.step(-1);
        case 'next-frame':
          return void engine.step(1);
        case 'back-1s':
          return engine.seekBy(-1_000_000_000n);
        case 'forward-1s':
          return engine.seekBy(1_000_000_000n);
        case 'start':
          return engine.seek(start);
        case 'end':
          return engine.seek(end);
        case 'slower':
          return engine.stepSpeed(-1);
        case 'faster':
          return engine.stepSpeed(1);
      }
    };
    document.addEventListener('keydown', onKey);
    return () => document.removeEventListener('keydown', onKey);
  }, [engine, props.keyboard]);

  const applySelection = (cameras: string[], series: string[]) => {
    setSelection({ cameras, series });
    engine.setSelection(cameras, series);
  };

  const offsetMs = Number((snap.playheadNs - start) / 1_000_000n);
  const durationMs = Number(duration / 1_000_000n);
  const problem = snap.error === undefined ? undefined : explain(snap.error);
  const defs = engine.seriesDefs();
  const colorOf = (id: string) => SERIES_COLORS[Math.max(0, selection.series.indexOf(id)) % SERIES_COLORS.length]!;
  const w = snap.window;

  return (
    <div class="player-stage" data-playhead-ns={snap.playheadNs.toString()} data-start-ns={start.toString()} data-end-ns={end.toString()} data-status={status}>
      {engine.set.truncated ? (
        <div class="notice warn player-truncated" role="status">
          <strong>Recording ends early at {clock(duration)}</strong>
          <p>The file was cut short (the recorder stopped without closing it, e.g. the robot lost power): it plays up to its last complete part.</p>
        </div>
      ) : null}
      {problem ? <ProblemNotice problem={problem} inline /> : null}

      {engine.cameras.length === 0 ? <p class="muted small">This recording has no camera topic.</p> : null}
      {selection.cameras.length > 0 ? (
        <div class={`player-cameras n${Math.min(selection.cameras.length, 4)}`}>
          {selection.cameras.map((topic) => (
            <CameraTile key={topic} topic={topic} frame={snap.frames.get(topic)} startNs={start} />
          ))}
        </div>
      ) : engine.cameras.length > 0 ? (
        <p class="muted small">No camera shown: pick one under Topics.</p>
      ) : null}

      <div class="player-controls" role="group" aria-label="Playback">
        <button type="button" class="primary player-play" onClick={() => engine.toggle()} aria-label={snap.playing ? 'Pause' : 'Play'} title={snap.playing ? 'Pause (Space)' : 'Play (Space)'}>
          <Icon name={snap.playing ? 'pause' : 'play'} />
        </button>
        <button type="button" onClick={() => void engine.step(-1)} aria-label="Previous frame" title="Previous frame (←)">
          <Icon name="prev" />
        </button>
        <button type="button" onClick={() => void engine.step(1)} aria-label="Next frame" title="Next frame (→)">
          <Icon name="next" />
        </button>
        <span class="player-time" aria-live="off">
          <time>{clock(snap.playheadNs - start)}</time> / <time>{clock(duration)}</time>
        </span>
        {snap.buffering ? (
          <span class="pill info" role="status">
            buffering
          </span>
        ) : null}
        <label class="player-speed">
          Speed{' '}
          <select value={String(snap.speed)} onChange={(e) => engine.setSpeed(Number(e.currentTarget.value))}>
            {SPEEDS.map((s) => (
              <option key={s} value={String(s)}>
                {s}x
              </option>
            ))}
          </select>
        </label>
        <details class="player-keys">
          <summary>Keys</summary>
          <dl>
            {PLAYER_KEYS.map((k) => (
              <div key={k.keys}>
                <dt>
                  <kbd>{k.keys}</kbd>
                </dt>
                <dd>{k.action}</dd>
              </div>
            ))}
          </dl>
        </details>
      </div>
      <input
        class="player-seek"
        type="range"
        min={0}
        max={Math.max(durationMs, 0)}
        step={1}
        value={offsetMs}
        aria-label="Seek"
        aria-valuetext={`${clock(snap.playheadNs - start)} of ${clock(duration)}`}
        onInput={(e) => engine.seek(start + BigInt(Math.round(Number(e.currentTarget.value))) * 1_000_000n)}
      />
      {segments && segments.length > 0 ? <SegmentStrip segments={segments} episode={episode} startNs={start} endNs={end} playheadNs={snap.playheadNs} onSeek={(t) => engine.seek(t)} /> : null}

      <TopicPicker engine={engine} selection={selection} onChange={applySelection} topicErrors={snap.topicErrors} />

      {selection.series.length > 0 ? (
        <div class="player-numeric">
          <div class="player-plots">
            {engine.numeric
              .map((n) => ({ n, keys: n.keys.filter((k) => selection.series.includes(seriesId(n.topic, k))) }))
              .filter((x) => x.keys.length > 0)
              .map(({ n, keys }) => (
                <figure key={n.topic} class="player-plot-figure">
                  <figcaption>
                    <code>{n.topic}</code>
                  </figcaption>
                  {w && w.topics.get(n.topic) ? (
                    <TopicPlot topic={n.topic} keys={keys} colors={keys.map((k) => colorOf(seriesId(n.topic, k)))} data={w.topics.get(n.topic)!} fromS={Number(w.fromNs - start) / 1e9} toS={Number(w.toNs - start) / 1e9} playheadS={Number(snap.playheadNs - start) / 1e9} />
                  ) : (
                    <p class="muted small" role="status">
                      Reading the window…
                    </p>
                  )}
                </figure>
              ))}
            {w?.capped ? <p class="muted small">This window holds more messages than are plotted at once; its end is not drawn.</p> : null}
          </div>
          <Readout defs={defs.filter((d) => selection.series.includes(d.id))} readout={snap.readout} colorOf={colorOf} startNs={start} />
        </div>
      ) : null}
    </div>
  );
}

function CameraTile({ topic, frame, startNs }: { topic: string; frame: CameraFrame | undefined; startNs: bigint }) {
  const canvas = useRef<HTMLCanvasElement>(null);
  const drawing = useRef(0);
  const [drawError, setDrawError] = useState<string | undefined>(undefined);
  useEffect(() => {
    const c = canvas.current;
    if (!c || !frame?.image) return;
    const n = ++drawing.current;
    drawFrame(c, frame.image, frame.logTimeNs, () => n === drawing.current).then(
      (drawn) => drawn && setDrawError(undefined),
      (err: unknown) => n === drawing.current && setDrawError(`the browser could not decode this frame (${err instanceof Error ? err.message : String(err)})`),
    );
  }, [frame]);
  const error = frame?.error ?? drawError;
  return (
    <figure class="player-camera" data-topic={topic}>
      <div class="player-canvas-wrap">
        <canvas ref={canvas} class={frame?.image && !error ? 'drawn' : 'blank'} data-topic={topic} width={640} height={360} aria-label={`Camera ${topic}${frame ? ` at ${clock(frame.logTimeNs - startNs)}` : ''}`} role="img" />
        {!frame ? <p class="player-canvas-note">No frame of this camera before the playhead.</p> : null}
        {error ? (
          <p class="player-canvas-note bad" role="status">
            Cannot draw <code>{topic}</code>: {error}
          </p>
        ) : null}
      </div>
      <figcaption>
        <code>{topic}</code>
        {frame ? <span class="muted small"> frame at {clock(frame.logTimeNs - startNs)}</span> : null}
      </figcaption>
    </figure>
  );
}

function SegmentStrip(props: { segments: Segment[]; episode: Episode; startNs: bigint; endNs: bigint; playheadNs: bigint; onSeek: (t: bigint) => void }) {
  const span = Number(props.endNs - props.startNs) || 1;
  const placed = useMemo(
    () =>
      props.segments.map((s) => {
        const from = segmentStartNs(props.episode, props.startNs, s.start_offset_s);
        const to = segmentStartNs(props.episode, props.startNs, s.end_offset_s);
        const left = Math.max(0, Math.min(100, (Number(from - props.startNs) / span) * 100));
        const right = Math.max(left, Math.min(100, (Number(to - props.startNs) / span) * 100));
        return { s, from, left, width: Math.max(0.5, right - left) };
      }),
    [props.segments, props.startNs, props.endNs],
  );
  const label = (s: Segment) => s.subtask_name ?? s.subtask_id ?? `segment ${s.segment_index + 1}`;
  return (
    <div class="player-segments" role="group" aria-label="Segments: click one to seek to its start">
      {placed.map(({ s, from, left, width }, i) => (
        <button
          key={s.segment_index}
          type="button"
          class={`player-segment seg-${i % 6}${props.playheadNs >= from && (placed[i + 1] === undefined || props.playheadNs < placed[i + 1]!.from) ? ' current' : ''}`}
          style={{ left: `${left}%`, width: `${width}%` }}
          onClick={() => props.onSeek(from < props.startNs ? props.startNs : from)}
          title={`${label(s)}: seek to its start`}
          aria-label={`Seek to ${label(s)}`}
        >
          <span>{label(s)}</span>
        </button>
      ))}
    </div>
  );
}

function TopicPicker(props: { engine: PlaybackEngine; selection: { cameras: string[]; series: string[] }; onChange: (cameras: string[], series: string[]) => void; topicErrors: ReadonlyMap<string, string> }) {
  const { engine, selection } = props;
  const toggle = (list: string[], item: string) => (list.includes(item) ? list.filter((x) => x !== item) : [...list, item]);
  const byTopic = engine.numeric;
  return (
    <details class="player-topics">
      <summary>
        Topics ({selection.cameras.length} {selection.cameras.length === 1 ? 'camera' : 'cameras'}, {selection.series.length} series)
      </summary>
      <div class="player-topic-groups">
        <fieldset class="checks">
          <legend>Cameras</legend>
          {engine.cameras.length === 0 ? <p class="muted small">None in this recording.</p> : null}
          {engine.cameras.map((c) => (
            <label key={c.topic} class="check">
              <input type="checkbox" checked={selection.cameras.includes(c.topic)} onChange={() => props.onChange(toggle(selection.cameras, c.topic), selection.series)} />
              <code>{c.topic}</code> <span class="muted small">{c.schemaName}</span>
            </label>
          ))}
        </fieldset>
        {byTopic.map((n) => (
          <fieldset key={n.topic} class="checks">
            <legend>
              <code>{n.topic}</code> <span class="muted small">{n.schemaName}</span>
            </legend>
            {n.keys.map((k) => {
              const id = seriesId(n.topic, k);
              return (
                <label key={id} class="check">
                  <input type="checkbox" checked={selection.series.includes(id)} onChange={() => props.onChange(selection.cameras, toggle(selection.series, id))} />
                  {k}
                </label>
              );
            })}
          </fieldset>
        ))}
        {[...props.topicErrors].map(([topic, why]) => (
          <p key={topic} class="muted small">
            <code>{topic}</code> is not plotted: {why}
          </p>
        ))}
      </div>
    </details>
  );
}

function Readout(props: { defs: { id: string; topic: string; key: string }[]; readout: EngineSnapshot['readout']; colorOf: (id: string) => string; startNs: bigint }) {
  return (
    <div class="table-wrap player-readout">
      <table>
        <caption>At the playhead</caption>
        <thead>
          <tr>
            <th scope="col">Series</th>
            <th scope="col" class="num">
              Value
            </th>
            <th scope="col" class="num hide-narrow">
              Sample at
            </th>
          </tr>
        </thead>
        <tbody>
          {props.defs.map((d) => {
            const v = props.readout.get(d.id);
            return (
              <tr key={d.id} data-series={d.id} data-value={v ? String(v.value) : undefined} data-log-time={v ? v.logTimeNs.toString() : undefined}>
                <th scope="row">
                  <Swatch color={props.colorOf(d.id)} /> <code class="muted">{breakable(d.topic)}</code> {breakable(d.key)}
                </th>
                <td class="num">{v ? formatValue(v.value) : '–'}</td>
                <td class="num hide-narrow">{v ? clock(v.logTimeNs - props.startNs) : '–'}</td>
              </tr>
            );
          })}
        </tbody>
      </table>
    </div>
  );
}

/**
 * A topic or series name with line-break opportunities after its separators (`/`, `.`, `_`, `[`):
 * in a narrow column `position.shoulder_pan` wraps as `position.` / `shoulder_pan`, never inside a
 * word. `<wbr>` adds no text, so the name reads and copies as it is.
 */
function breakable(name: string): ComponentChildren {
  const parts = name.split(/(?<=[/._[])/);
  return parts.map((part, i) => (i < parts.length - 1 ? [part, <wbr key={i} />] : part));
}

const SWATCH_CLASSES = new Map(SERIES_COLORS.map((c, i) => [c, `swatch-${i}`]));

function Swatch({ color }: { color: string }): ComponentChildren {
  return <span class={`player-swatch ${SWATCH_CLASSES.get(color) ?? ''}`} aria-hidden="true" />;
}

/** Control icons as SVG (no icon font: the console loads nothing from elsewhere, and system fonts lack these glyphs). */
function Icon({ name }: { name: 'play' | 'pause' | 'prev' | 'next' }) {
  const paths = {
    play: 'M4 2.5v11l9-5.5z',
    pause: 'M4 2.5h3v11H4zM9 2.5h3v11H9z',
    prev: 'M3 2.5h2v11H3zM13 2.5v11L6 8z',
    next: 'M11 2.5h2v11h-2zM3 2.5v11L10 8z',
  } as const;
  return (
    <svg class="player-icon" viewBox="0 0 16 16" width="16" height="16" aria-hidden="true" focusable="false">
      <path d={paths[name]} fill="currentColor" />
    </svg>
  );
}
