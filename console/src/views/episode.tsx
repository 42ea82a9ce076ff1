import { useEffect, useState } from 'preact/hooks';
import type { Episode, OutcomeChange, Segment } from '@fleet/client';
import { useConsole, useLiveEvent } from '../ui/context.js';
import { useAction, useAsync } from '../ui/hooks.js';
import { ErrorNotice, Facts, Field, KvTable, Link, Loading, PageHeader, Pill, ScopedButton } from '../ui/components.js';
import { dash, formatBytes, formatDuration, formatTime, plural } from '../ui/format.js';
import { can, needs } from '../session.js';
import { episodeEventData, issueAt, OUTCOMES, splitError } from '../ui/episodes-filter.js';
import { outcomePill, syncPill } from './episodes.js';
import { Player } from '../player/index.js';


/** A JSON value as a person reads it: strings as they are, anything else as JSON. */
function showValue(v: unknown): string {
  return typeof v === 'string' ? v : JSON.stringify(v);
}

/**
 * `/console/episodes/<id>`: what the robot recorded (never changed after ingest) and the
 * annotations layer (editable with data:write) side by side, the segment timeline to scale, the
 * outcome with its audit history, and one row per replica, moving with the live `episode.*`
 * events of this episode. The Recording panel plays the recording in the browser, read by range
 * requests straight from the customer's bucket with read links (player/); the cloud never
 * fetches recorded bytes.
 */
export function EpisodeView({ id }: { id: string }) {
  const { session } = useConsole();
  const loaded = useAsync((signal) => session.client.episodes.get(id, { signal }), [id]);
  const [episode, setEpisode] = useState<Episode | undefined>(undefined);
  useEffect(() => {
    if (loaded.data) setEpisode(loaded.data);
  }, [loaded.data]);
  const history = useAsync((signal) => session.client.episodes.outcomeHistory(id, { signal }).then((r) => r.outcome_history), [id]);

  useLiveEvent(['episode.finalized', 'episode.synced', 'episode.verified', 'episode.failed', 'episode.pruned'], (ev) => {
    const d = episodeEventData(ev.data);
    if (d?.episode_id === id) loaded.reload();
  });

  if (!episode) {
    return (
      <section>
        <PageHeader title="Episode" />
        {loaded.error ? <ErrorNotice error={loaded.error} action="Loading the episode" /> : <Loading label="Loading the episode" />}
        <p>
          <Link to="/episodes">Back to episodes</Link>
        </p>
      </section>
    );
  }
  const e = episode;
  return (
    <section class="episode-page">
      <PageHeader title={`Episode ${e.task_name ?? e.task_id ?? ''}`.trim()}>
        <Link to="/episodes" class="button">
          All episodes
        </Link>
      </PageHeader>
      <p class="episode-id">
        <code>{e.id}</code> {outcomePill(e)} {syncPill(e)}
      </p>
      {loaded.error ? <ErrorNotice error={loaded.error} action="Refreshing the episode" /> : null}

      <section class="panel recording-panel" aria-labelledby="recording-title">
        <h2 id="recording-title">Recording</h2>
        <Player episode={e} client={session.client} />
      </section>

      <div class="episode-layers">
        <section class="panel layer recorded" aria-labelledby="recorded-title">
          <h2 id="recorded-title">Recorded by the robot</h2>
          <p class="muted small">Reported when the episode was finalized; these facts never change.</p>
          <RecordedFacts e={e} />
          <h3>Metadata</h3>
          <KeyValues values={e.metadata} empty="The robot recorded no metadata." caption="Recorded metadata" />
          <Files id={id} />
        </section>

        <section class="panel layer annotations" aria-labelledby="annotations-title">
          <h2 id="annotations-title">Annotations (editable)</h2>
          <p class="muted small">Added after recording, by people or pipelines. Changing them never touches the recorded facts.</p>
          {can(session, 'data:write') ? null : <p class="notice warn small">This key can only read them: changing the outcome or the annotations needs the scope data:write.</p>}
          <OutcomeOverride e={e} onChanged={(next) => (setEpisode(next), history.reload())} history={history.data} historyError={history.error} />
          <AnnotationEditor e={e} onChanged={setEpisode} />
        </section>
      </div>

      <Timeline id={id} e={e} />
      <Replicas e={e} />
    </section>
  );
}

function RecordedFacts({ e }: { e: Episode }) {
  const { session } = useConsole();
  const robot = can(session, ['robots:read', 'fleet:read']) ? (
    <Link to={`/robots/${encodeURIComponent(e.robot_id)}`}>
      <code>{e.robot_id}</code>
    </Link>
  ) : (
    <code>{e.robot_id}</code>
  );
  return (
    <Facts
      items={[
        ['Robot', robot],
        ['Session', e.session_name ? <span>{e.session_name} <code class="muted">{e.recording_session_id}</code></span> : <code>{e.recording_session_id}</code>],
        ['Sequence in session', String(e.episode_seq)],
        ['Task', e.task_name ? <span>{e.task_name} <code class="muted">{e.task_id}</code></span> : dash(e.task_id)],
        ['Subtask', dash(e.subtask_id)],
        ['Operator', e.operator_name ? <span>{e.operator_name} <code class="muted">{e.operator_id}</code></span> : dash(e.operator_id)],
        ['Control mode', dash(e.control_mode)],
        ['Policy version', dash(e.policy_version_id)],
        ['Evaluation', dash(e.eval_id)],
        ['Outcome as reported', e.recorded_outcome ?? '–'],
        ['Started', <time dateTime={e.started_at}>{formatTime(e.started_at)}</time>],
        ['Ended', e.ended_at ? <time dateTime={e.ended_at}>{formatTime(e.ended_at)}</time> : '–'],
        ['Duration', e.duration_s === null ? '–' : formatDuration(Math.round(e.duration_s * 1000))],
        ['Messages', e.message_count === null ? '–' : e.message_count.toLocaleString()],
        ['Recording size', formatBytes(e.bag_size_bytes)],
        ['Recording on the robot', e.bag_uri ? <code>{e.bag_uri}</code> : '–'],
        ['Indexed by the cloud', <time dateTime={e.reported_at}>{formatTime(e.reported_at)}</time>],
      ]}
    />
  );
}

function KeyValues({ values, empty, caption }: { values: Record<string, unknown> | null; empty: string; caption: string }) {
  const entries = Object.entries(values ?? {});
  if (entries.length === 0) return <p class="muted small">{empty}</p>;
  return <KvTable caption={caption} valueClass="value" rows={entries.map(([k, v]) => ({ key: k, name: <code>{k}</code>, value: showValue(v) }))} />;
}

function Files({ id }: { id: string }) {
  const { session } = useConsole();
  const files = useAsync((signal) => session.client.episodes.files(id, { signal }), [id]);
  return (
    <>
      <h3>Files</h3>
      {files.error ? <ErrorNotice error={files.error} action="Listing the files" /> : null}
      {files.loading && !files.data ? <Loading label="Loading the file list" /> : null}
      {files.data ? (
        files.data.files.length === 0 ? (
          <p class="muted small">The manifest lists no file.</p>
        ) : (
          <>
            <p class="muted small">
              {plural(files.data.files.length, 'file')}, {formatBytes(files.data.total_bytes)} in all, as the robot's manifest lists them (the Recording panel reads them from your storage, never through the cloud).
            </p>
            <div class="table-wrap">
              <table class="files">
                <caption class="sr-only">Files of the episode</caption>
                <thead>
                  <tr>
                    <th scope="col">Path</th>
                    <th scope="col" class="num">
                      Size
                    </th>
                    <th scope="col">SHA-256</th>
                  </tr>
                </thead>
                <tbody>
                  {files.data.files.map((f) => (
                    <tr key={f.path}>
                      <td class="path">
                        <code>{f.path}</code>
                      </td>
                      <td class="num" title={`${f.size_bytes.toLocaleString()} bytes`}>
                        {formatBytes(f.size_bytes)}
                      </td>
                      <td>
                        <code class="sha">{f.sha256}</code>
                      </td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          </>
        )
      ) : null}
    </>
  );
}

function OutcomeOverride({ e, onChanged, history, historyError }: { e: Episode; onChanged: (e: Episode) => void; history: OutcomeChange[] | undefined; historyError: unknown }) {
  const { session } = useConsole();
  const mayWrite = can(session, 'data:write');
  const [outcome, setOutcome] = useState<(typeof OUTCOMES)[number]>(e.outcome === 'success' ? 'failure' : 'success');
  const [reason, setReason] = useState('');
  const act = useAction(() => session.client.episodes.setOutcome(e.id, { outcome, reason: reason.trim() }));
  const reasonErr = issueAt(act.error, 'reason');
  const outcomeErr = issueAt(act.error, 'outcome');
  return (
    <div class="outcome-block">
      <h3>Outcome</h3>
      <p>
        Effective outcome: {outcomePill(e)}
        {e.recorded_outcome && e.recorded_outcome !== e.outcome ? <span class="muted small"> (overridden; the robot reported {e.recorded_outcome})</span> : null}
      </p>
      <form
        class="outcome-form"
        onSubmit={(ev) => {
          ev.preventDefault();
          if (!mayWrite || reason.trim() === '') return;
          void act.run().then((next) => {
            if (next) {
              setReason('');
              onChanged(next);
            }
          });
        }}
      >
        <div class="filters">
          <Field label="New outcome" id="ov-outcome" error={outcomeErr}>
            <select id="ov-outcome" value={outcome} onChange={(ev) => setOutcome(ev.currentTarget.value as (typeof OUTCOMES)[number])} disabled={!mayWrite}>
              {OUTCOMES.map((o) => (
                <option key={o} value={o}>
                  {o}
                </option>
              ))}
            </select>
          </Field>
          <Field label="Reason (kept in the audit history)" id="ov-reason" error={reasonErr}>
            <input id="ov-reason" value={reason} onInput={(ev) => setReason(ev.currentTarget.value)} maxLength={1024} required disabled={!mayWrite} aria-invalid={reasonErr ? true : undefined} autoComplete="off" />
          </Field>
          <ScopedButton type="submit" allowed={mayWrite} why={needs('data:write')} disabled={act.busy || reason.trim() === ''}>
            {act.busy ? 'Saving…' : 'Override outcome'}
          </ScopedButton>
        </div>
        {reasonErr || outcomeErr ? null : <ErrorNotice error={act.error} action="Overriding the outcome" />}
      </form>
      <h3>Outcome history</h3>
      {historyError ? <ErrorNotice error={historyError} action="Loading the outcome history" /> : null}
      {history === undefined && !historyError ? <Loading label="Loading the history" /> : null}
      {history && history.length === 0 ? <p class="muted small">Never overridden.</p> : null}
      {history && history.length > 0 ? (
        <div class="table-wrap">
          <table class="history">
            <caption class="sr-only">Outcome overrides, oldest first</caption>
            <thead>
              <tr>
                <th scope="col">When</th>
                <th scope="col">Change</th>
                <th scope="col">Reason</th>
                <th scope="col" class="hide-narrow">
                  By key
                </th>
              </tr>
            </thead>
            <tbody>
              {history.map((h, i) => (
                <tr key={i}>
                  <td>
                    <time dateTime={h.at}>{formatTime(h.at)}</time>
                  </td>
                  <td class="nowrap">
                    {h.from} → {h.to}
                  </td>
                  <td class="value">{h.reason}</td>
                  <td class="hide-narrow">
                    <code>{h.actor}</code>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      ) : null}
    </div>
  );
}

type ValueKind = 'text' | 'json';

function parseValue(kind: ValueKind, text: string): { ok: true; value: unknown } | { ok: false; message: string } {
  if (kind === 'text') return { ok: true, value: text };
  try {
    const value = JSON.parse(text) as unknown;
    if (value === null) return { ok: false, message: 'null deletes a key; use Delete instead' };
    return { ok: true, value };
  } catch {
    return { ok: false, message: 'not valid JSON (for plain text choose "text")' };
  }
}

/**
 * The annotations layer: change or delete a key, add one. Each save is one
 * `PATCH /v1/episodes/{id}` with `{annotations: {key: value}}` (null deletes); the API's errors
 * show at the field they concern.
 */
function AnnotationEditor({ e, onChanged }: { e: Episode; onChanged: (e: Episode) => void }) {
  const { session } = useConsole();
  const mayWrite = can(session, 'data:write');
  const [editing, setEditing] = useState<{ key: string; kind: ValueKind; text: string; localError?: string } | null>(null);
  const [adding, setAdding] = useState<{ key: string; kind: ValueKind; text: string; localError?: string }>({ key: '', kind: 'text', text: '' });
  // Where the last save came from, so its error shows there.
  const [where, setWhere] = useState<{ form: 'edit' | 'add' | 'delete'; key: string } | null>(null);
  const patch = useAction((key: string, value: unknown) => session.client.episodes.annotate(e.id, { annotations: { [key]: value } }));
  const entries = Object.entries(e.annotations ?? {});
  const apiErr = (key: string) => issueAt(patch.error, 'annotations', key) ?? issueAt(patch.error, 'annotations');
  const errAt = (form: 'edit' | 'add' | 'delete', key: string) => (where?.form === form && where.key === key ? apiErr(key) : undefined);
  const noticeAt = (form: 'edit' | 'add' | 'delete') => (where?.form === form && patch.error !== undefined && !apiErr(where.key) ? <ErrorNotice error={patch.error} action="Annotating" /> : null);
  const save = async (form: 'edit' | 'add' | 'delete', key: string, value: unknown) => {
    setWhere({ form, key });
    const next = await patch.run(key, value);
    if (next) onChanged(next);
    return next;
  };
  const addKey = adding.key.trim();

  return (
    <div class="annotation-editor">
      <h3>Annotations</h3>
      {entries.length === 0 ? <p class="muted small">No annotations yet.</p> : null}
      {entries.length > 0 ? (
        <div class="table-wrap">
          <table class="kv annotations-table">
            <caption class="sr-only">Annotations</caption>
            <thead>
              <tr>
                <th scope="col">Key</th>
                <th scope="col">Value</th>
                <th scope="col">
                  <span class="sr-only">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {entries.map(([k, v]) => {
                const isEditing = editing?.key === k;
                const err = isEditing ? (editing.localError ?? errAt('edit', k)) : errAt('delete', k);
                return (
                  <tr key={k} data-annotation={k}>
                    <th scope="row">
                      <code>{k}</code>
                    </th>
                    <td class="value">
                      {isEditing ? (
                        <form
                          class="inline-edit"
                          onSubmit={(ev) => {
                            ev.preventDefault();
                            const parsed = parseValue(editing.kind, editing.text);
                            if (!parsed.ok) return setEditing({ ...editing, localError: parsed.message });
                            void save('edit', k, parsed.value).then((next) => next && setEditing(null));
                          }}
                        >
                          <Field label={`New value of ${k}`} id={`an-edit-${k}`} error={err}>
                            <input id={`an-edit-${k}`} value={editing.text} onInput={(ev) => setEditing({ ...editing, text: ev.currentTarget.value, localError: undefined })} autoComplete="off" aria-invalid={err ? true : undefined} />
                          </Field>
                          <Field label="As" id={`an-edit-kind-${k}`}>
                            <select id={`an-edit-kind-${k}`} value={editing.kind} onChange={(ev) => setEditing({ ...editing, kind: ev.currentTarget.value as ValueKind, localError: undefined })}>
                              <option value="text">text</option>
                              <option value="json">JSON</option>
                            </select>
                          </Field>
                          <div class="row">
                            <button type="submit" class="primary" disabled={patch.busy}>
                              Save
                            </button>
                            <button type="button" onClick={() => setEditing(null)}>
                              Cancel
                            </button>
                          </div>
                        </form>
                      ) : (
                        <>
                          {showValue(v)}
                          {err ? <span class="field-error block">{err}</span> : null}
                        </>
                      )}
                    </td>
                    <td class="actions">
                      {isEditing ? null : (
                        <div class="row nowrap">
                          <ScopedButton
                            allowed={mayWrite}
                            why={needs('data:write')}
                            onClick={() => {
                              patch.clear();
                              setEditing({ key: k, kind: typeof v === 'string' ? 'text' : 'json', text: showValue(v) });
                            }}
                            aria-label={`Change ${k}`}
                          >
                            Change
                          </ScopedButton>
                          <ScopedButton allowed={mayWrite} why={needs('data:write')} disabled={patch.busy} onClick={() => void save('delete', k, null)} aria-label={`Delete ${k}`}>
                            Delete
                          </ScopedButton>
                        </div>
                      )}
                    </td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        </div>
      ) : null}
      {noticeAt('edit')}
      {noticeAt('delete')}

      <form
        class="add-annotation"
        aria-label="Add an annotation"
        onSubmit={(ev) => {
          ev.preventDefault();
          if (!mayWrite || addKey === '') return;
          const parsed = parseValue(adding.kind, adding.text);
          if (!parsed.ok) return setAdding({ ...adding, localError: parsed.message });
          void save('add', addKey, parsed.value).then((next) => next && setAdding({ key: '', kind: adding.kind, text: '' }));
        }}
      >
        <h4 class="small-heading">Add or replace a key</h4>
        <div class="filters">
          <Field label="Key" id="an-new-key" error={issueAt(patch.error, 'annotations', addKey) && where?.form === 'add' && where.key === addKey ? issueAt(patch.error, 'annotations', addKey) : undefined}>
            <input id="an-new-key" value={adding.key} onInput={(ev) => setAdding({ ...adding, key: ev.currentTarget.value, localError: undefined })} maxLength={256} disabled={!mayWrite} autoComplete="off" spellcheck={false} />
          </Field>
          <Field label="Value" id="an-new-value" error={adding.localError ?? (where?.form === 'add' && where.key === addKey && !issueAt(patch.error, 'annotations', addKey) ? issueAt(patch.error, 'annotations') : undefined)}>
            <input id="an-new-value" value={adding.text} onInput={(ev) => setAdding({ ...adding, text: ev.currentTarget.value, localError: undefined })} disabled={!mayWrite} autoComplete="off" />
          </Field>
          <Field label="As" id="an-new-kind">
            <select id="an-new-kind" value={adding.kind} onChange={(ev) => setAdding({ ...adding, kind: ev.currentTarget.value as ValueKind, localError: undefined })} disabled={!mayWrite}>
              <option value="text">text</option>
              <option value="json">JSON</option>
            </select>
          </Field>
          <ScopedButton type="submit" allowed={mayWrite} why={needs('data:write')} disabled={patch.busy || addKey === ''}>
            Add annotation
          </ScopedButton>
        </div>
        {noticeAt('add')}
      </form>
    </div>
  );
}

/** The segments drawn to scale (an SVG, offsets relative to the start), and the same as a table. */
function Timeline({ id, e }: { id: string; e: Episode }) {
  const { session } = useConsole();
  const segs = useAsync((signal) => session.client.episodes.segments(id, { signal }).then((r) => r.segments), [id]);
  return (
    <section class="panel" aria-labelledby="timeline-title">
      <h2 id="timeline-title">Segments</h2>
      {segs.error ? <ErrorNotice error={segs.error} action="Loading the segments" /> : null}
      {segs.loading && !segs.data ? <Loading label="Loading the segments" /> : null}
      {segs.data && segs.data.length === 0 ? <p class="muted small">The robot reported no segments for this episode.</p> : null}
      {segs.data && segs.data.length > 0 ? <SegmentTimeline segments={segs.data} duration={e.duration_s} /> : null}
    </section>
  );
}

/** Round tick offsets (steps of 1, 2 or 5 times a power of ten) from 0 to `total`, three to six of them. */
function niceTicks(total: number): number[] {
  const raw = total / 5;
  const pow = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * pow).find((s) => s >= raw) ?? raw;
  const ticks: number[] = [];
  for (let t = 0; t <= total + 1e-9; t += step) ticks.push(Number(t.toFixed(6)));
  return ticks;
}

const secs = (s: number) => (s < 60 ? `${Number(s.toFixed(1))} s` : formatDuration(Math.round(s * 1000)));

export function SegmentTimeline({ segments, duration }: { segments: Segment[]; duration: number | null }) {
  const total = Math.max(duration ?? 0, ...segments.map((s) => s.end_offset_s)) || 1;
  const pct = (s: number) => Math.max(0, Math.min(100, (s / total) * 100));
  const ticks = niceTicks(total);
  const label = (s: Segment) => s.subtask_name ?? s.subtask_id ?? `segment ${s.segment_index + 1}`;
  return (
    <>
      <figure class="ep-timeline">
        <svg class="ep-timeline-svg" role="img" aria-labelledby="timeline-svg-title" width="100%" height="64">
          <title id="timeline-svg-title">
            {plural(segments.length, 'segment')} over {secs(total)}; the table below lists them
          </title>
          <rect class="track" x="0" y="0" width="100%" height="40" rx="4" />
          {segments.map((s, i) => (
            <svg key={s.segment_index} x={`${pct(s.start_offset_s)}%`} y="0" width={`${Math.max(0.3, pct(s.end_offset_s) - pct(s.start_offset_s))}%`} height="40">
              <title>{`${label(s)}: ${secs(s.start_offset_s)} to ${secs(s.end_offset_s)}`}</title>
              <rect class={`seg seg-${i % 6}`} x="0" y="0" width="100%" height="40" />
              <text class="seg-label" x="5" y="25">
                {label(s)}
              </text>
            </svg>
          ))}
          {ticks.map((t) => (
            <g key={t}>
              <line class="tick" x1={`${pct(t)}%`} x2={`${pct(t)}%`} y1="40" y2="46" />
              <text class="tick-label" x={`${pct(t)}%`} y="60" text-anchor={t === 0 ? 'start' : pct(t) > 97 ? 'end' : 'middle'}>
                {secs(t)}
              </text>
            </g>
          ))}
        </svg>
      </figure>
      <div class="table-wrap">
        <table class="segments">
          <caption class="sr-only">Segments, offsets from the start of the episode</caption>
          <thead>
            <tr>
              <th scope="col">#</th>
              <th scope="col">Subtask</th>
              <th scope="col" class="num">
                Start
              </th>
              <th scope="col" class="num">
                End
              </th>
              <th scope="col" class="num">
                Length
              </th>
            </tr>
          </thead>
          <tbody>
            {segments.map((s) => (
              <tr key={s.segment_index}>
                <td>{s.segment_index + 1}</td>
                <td>
                  {s.subtask_name ?? '–'} {s.subtask_id ? <code class="muted">{s.subtask_id}</code> : null}
                </td>
                <td class="num">{secs(s.start_offset_s)}</td>
                <td class="num">{secs(s.end_offset_s)}</td>
                <td class="num">{secs(Math.max(0, s.end_offset_s - s.start_offset_s))}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </>
  );
}

function Replicas({ e }: { e: Episode }) {
  return (
    <section class="panel" aria-labelledby="replicas-title">
      <h2 id="replicas-title">Replicas</h2>
      <p class="muted small">One row per destination the episode syncs to; it moves as the robot uploads and the destination verifies.</p>
      {e.replicas.length === 0 ? (
        <p class="muted small">No destination yet: the episode is on the robot only (no routing rule or destination takes it, or it was just reported).</p>
      ) : (
        <div class="table-wrap">
          <table class="replicas">
            <caption class="sr-only">Replicas of the episode</caption>
            <thead>
              <tr>
                <th scope="col">Destination</th>
                <th scope="col">State</th>
                <th scope="col">Last error</th>
                <th scope="col">Grant</th>
                <th scope="col">Object key</th>
                <th scope="col" class="hide-narrow">
                  Updated
                </th>
              </tr>
            </thead>
            <tbody>
              {e.replicas.map((r) => {
                const err = r.error ? splitError(r.error) : null;
                return (
                  <tr key={r.destination_id} data-destination={r.destination_id}>
                    <td>
                      <code>{r.destination_id}</code>
                    </td>
                    <td>
                      <Pill tone={r.state === 'verified' ? 'ok' : r.state === 'synced' ? 'info' : 'warn'}>{r.state}</Pill>
                    </td>
                    <td>
                      {err ? (
                        <span class="replica-error">
                          {err.code ? <code>{err.code}</code> : null} {err.message}
                        </span>
                      ) : (
                        '–'
                      )}
                    </td>
                    <td>{r.grant_id ? <code>{r.grant_id}</code> : '–'}</td>
                    <td>{r.object_key ? <code>{r.object_key}</code> : '–'}</td>
                    <td class="hide-narrow">
                      <time dateTime={r.updated_at}>{formatTime(r.updated_at)}</time>
                    </td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}
