import { useState } from 'preact/hooks';
import { FleetApiError, type Episode, type Robot } from '@fleet/client';
import { useConsole } from '../ui/context.js';
import { useAction, useAsync } from '../ui/hooks.js';
import { Confirm, ErrorNotice, Field, Link, Loading, Pill, ScopedButton } from '../ui/components.js';
import { formatDuration, formatTime } from '../ui/format.js';
import { buildStartBody, errorsFromApi, fieldIds, type MetadataRow, type StartBody } from '../ui/robot-metadata.js';
import { commandBlock, isTransient, resultFields } from './robot-commands.js';
import { RecordingPill } from './fleet-parts.js';

type Verb = 'episodes/start' | 'episodes/finish' | 'episodes/fail' | 'episodes/discard';
const VERB_LABEL: Record<Verb, string> = {
  'episodes/start': 'Start episode',
  'episodes/finish': 'Finish',
  'episodes/fail': 'Fail',
  'episodes/discard': 'Discard',
};
const RECENT = 10;

const emptyRow = (): MetadataRow => ({ key: '', value: '', json: false });

/**
 * The episode verbs: start (with task, subtask and metadata, checked as the API checks them and
 * refused at the field), finish, fail, discard. Each is valid in one recording state; with the
 * state known, the others are off.
 */
export function EpisodeVerbs({ id, robot, onRecordingState }: { id: string; robot: Robot | null; onRecordingState: (s: Robot['recording_state']) => void }) {
  const { session } = useConsole();
  const block = commandBlock(session, robot, 'data.metadata');
  const [taskId, setTaskId] = useState('');
  const [subtaskId, setSubtaskId] = useState('');
  const [rows, setRows] = useState<MetadataRow[]>([emptyRow()]);
  const [errors, setErrors] = useState<Record<string, string>>({});
  const [last, setLast] = useState<{ verb: Verb; key: string; body?: StartBody } | null>(null);
  const [confirmDiscard, setConfirmDiscard] = useState(false);
  const act = useAction(async (verb: Verb, key: string, body?: StartBody) => {
    const r = await session.client.robots.command(id, verb, body, { idempotencyKey: key });
    const state = (r.result as Record<string, unknown>).recording_state;
    if (state === 'idle' || state === 'recording' || state === 'finalizing') onRecordingState(state);
    return r;
  });
  const send = async (verb: Verb, body?: StartBody, key: string = crypto.randomUUID()) => {
    setLast({ verb, key, ...(body ? { body } : {}) });
    await act.run(verb, key, body);
  };
  const form = { taskId, subtaskId, rows };
  const start = async () => {
    const built = buildStartBody(form);
    setErrors(built.errors);
    if (Object.keys(built.errors).length > 0) {
      document.getElementById(Object.keys(built.errors)[0]!)?.focus();
      return;
    }
    await send('episodes/start', built.body);
  };
  const apiFields = last?.verb === 'episodes/start' && act.error ? errorsFromApi(act.error, form).fields : {};
  const fieldError = (fid: string) => errors[fid] ?? apiFields[fid];
  const setRow = (i: number, patch: Partial<MetadataRow>) => setRows((rs) => rs.map((r, j) => (j === i ? { ...r, ...patch } : r)));

  const state = robot?.recording_state ?? null;
  // Unknown state (never reported, or the key cannot read the robot): the robot decides.
  const startOff = state !== null && state !== 'idle';
  const endOff = state !== null && state !== 'recording';
  const stateWhy = state === 'finalizing' ? 'the robot is finalizing the last episode' : state === 'recording' ? 'the robot is recording' : 'the robot is not recording';
  const result: Record<string, unknown> | undefined = act.result?.result;
  const fields = result ? resultFields(result) : '';
  const robotError = act.error instanceof FleetApiError && typeof act.error.details?.robot_error === 'string' ? act.error.details.robot_error : null;

  return (
    <section class="panel" aria-labelledby="robot-episode-h">
      <h2 id="robot-episode-h">Episode</h2>
      <p class="muted small">
        {state === null ? 'Recording state not known yet.' : <>The robot is <RecordingPill state={state} />.</>} Start when idle; finish, fail or discard while recording.
      </p>
      <form
        class="robot-start-form"
        noValidate
        onSubmit={(e) => {
          e.preventDefault();
          void start();
        }}
      >
        <div class="row wrap-fields align-start">
          <Field label="Task id (optional)" id={fieldIds.taskId} error={fieldError(fieldIds.taskId)}>
            <input id={fieldIds.taskId} value={taskId} onInput={(e) => setTaskId(e.currentTarget.value)} autoComplete="off" aria-invalid={fieldError(fieldIds.taskId) ? true : undefined} aria-describedby={fieldError(fieldIds.taskId) ? `${fieldIds.taskId}-error` : undefined} />
          </Field>
          <Field label="Subtask id (optional)" id={fieldIds.subtaskId} error={fieldError(fieldIds.subtaskId)}>
            <input id={fieldIds.subtaskId} value={subtaskId} onInput={(e) => setSubtaskId(e.currentTarget.value)} autoComplete="off" aria-invalid={fieldError(fieldIds.subtaskId) ? true : undefined} aria-describedby={fieldError(fieldIds.subtaskId) ? `${fieldIds.subtaskId}-error` : undefined} />
          </Field>
        </div>
        <fieldset class="robot-metadata">
          <legend>Metadata</legend>
          {rows.map((row, i) => (
            <div class="robot-meta-row" key={i}>
              <Field label={`Key ${i + 1}`} id={fieldIds.key(i)} error={fieldError(fieldIds.key(i))}>
                <input id={fieldIds.key(i)} value={row.key} onInput={(e) => setRow(i, { key: e.currentTarget.value })} autoComplete="off" aria-invalid={fieldError(fieldIds.key(i)) ? true : undefined} aria-describedby={fieldError(fieldIds.key(i)) ? `${fieldIds.key(i)}-error` : undefined} />
              </Field>
              <Field label={`Value ${i + 1}${row.json ? ' (JSON)' : ''}`} id={fieldIds.value(i)} error={fieldError(fieldIds.value(i))}>
                <input id={fieldIds.value(i)} value={row.value} onInput={(e) => setRow(i, { value: e.currentTarget.value })} autoComplete="off" aria-invalid={fieldError(fieldIds.value(i)) ? true : undefined} aria-describedby={fieldError(fieldIds.value(i)) ? `${fieldIds.value(i)}-error` : undefined} />
              </Field>
              <div class="robot-meta-tools">
                <label class="check">
                  <input type="checkbox" checked={row.json} onChange={(e) => setRow(i, { json: e.currentTarget.checked })} /> JSON value
                </label>
                <button type="button" class="icon" aria-label={`Remove metadata row ${i + 1}`} onClick={() => setRows((rs) => (rs.length === 1 ? [emptyRow()] : rs.filter((_, j) => j !== i)))}>
                  ✕
                </button>
              </div>
            </div>
          ))}
          <button type="button" onClick={() => setRows((rs) => [...rs, emptyRow()])}>
            Add metadata row
          </button>
        </fieldset>
        <div class="row robot-verbs">
          <ScopedButton type="submit" class="primary" allowed={block === null} why={block ?? ''} disabled={act.busy || startOff} title={startOff ? stateWhy : undefined}>
            Start episode
          </ScopedButton>
          <ScopedButton allowed={block === null} why={block ?? ''} disabled={act.busy || endOff} title={endOff ? stateWhy : undefined} onClick={() => void send('episodes/finish')}>
            Finish
          </ScopedButton>
          <ScopedButton allowed={block === null} why={block ?? ''} disabled={act.busy || endOff} title={endOff ? stateWhy : undefined} onClick={() => void send('episodes/fail')}>
            Fail
          </ScopedButton>
          <ScopedButton class="danger-outline" allowed={block === null} why={block ?? ''} disabled={act.busy || endOff} title={endOff ? stateWhy : undefined} onClick={() => setConfirmDiscard(true)}>
            Discard
          </ScopedButton>
        </div>
        {block ? <p class="muted small">Episode verbs: {block}.</p> : null}
      </form>
      <div aria-live="polite" class="robot-command-result">
        {act.busy && last ? <p class="muted" role="status">Sending {VERB_LABEL[last.verb]}…</p> : null}
        {last && result && !act.busy ? (
          <div class="notice info" role="status">
            <strong>{VERB_LABEL[last.verb]}: done</strong>
            {typeof result.episode_id === 'string' ? (
              <p>
                Episode <code>{result.episode_id}</code>
                {last.verb === 'episodes/start' ? ' is recording.' : ' ended; it is listed once the robot has reported it.'}
              </p>
            ) : null}
            {fields ? <pre class="robot-result">{fields}</pre> : null}
          </div>
        ) : null}
        {last && act.error ? (
          <div>
            <ErrorNotice error={act.error} action={VERB_LABEL[last.verb]} />
            {robotError ? <p class="small">The robot refused it ({robotError}); nothing changed on the robot.</p> : null}
            {isTransient(act.error) ? (
              <button type="button" onClick={() => void send(last.verb, last.body, last.key)} disabled={act.busy}>
                Send {VERB_LABEL[last.verb]} again (same command id)
              </button>
            ) : null}
          </div>
        ) : null}
      </div>
      {confirmDiscard ? (
        <Confirm
          open
          danger
          title="Discard this episode?"
          confirmLabel="Discard"
          onCancel={() => setConfirmDiscard(false)}
          onConfirm={() => {
            setConfirmDiscard(false);
            void send('episodes/discard');
          }}
        >
          <p>The recording stops and its files are deleted on the robot. The episode stays listed with the outcome discarded.</p>
        </Confirm>
      ) : null}
    </section>
  );
}

function outcomeTone(o: Episode['outcome']): 'ok' | 'bad' | 'idle' {
  return o === 'success' ? 'ok' : o === 'failure' ? 'bad' : 'idle';
}

function syncLabel(e: Episode): { tone: 'ok' | 'info' | 'warn' | 'idle'; label: string } {
  if (e.replicas.length === 0) return { tone: 'idle', label: 'not routed' };
  if (e.replicas.some((r) => r.state === 'verified')) return { tone: 'ok', label: 'verified' };
  if (e.replicas.some((r) => r.error)) return { tone: 'warn', label: 'retrying' };
  return { tone: 'info', label: e.replicas.some((r) => r.state === 'synced') ? 'synced' : 'syncing' };
}

/**
 * This robot's episodes, read again when the stream says one of them moved. The API lists
 * episodes in the order they were indexed, so these are its first ten; the episodes page has them all.
 */
export function RecentEpisodes({ id, tick }: { id: string; tick: number }) {
  const { session } = useConsole();
  const list = useAsync((signal) => session.client.episodes.list({ robot_id: id }, { limit: RECENT, signal }), [id, tick]);
  const episodes = list.data?.episodes ?? [];
  const allLink = `/episodes?robot_id=${encodeURIComponent(id)}`;
  return (
    <section class="panel" aria-labelledby="robot-episodes-h">
      <h2 id="robot-episodes-h">Episodes of this robot</h2>
      <ErrorNotice error={list.error} action="Loading the episodes" />
      {list.data === undefined && !list.error ? <Loading label="Loading the episodes" /> : null}
      {list.data && episodes.length === 0 ? <p class="empty">No episode reported yet.</p> : null}
      {episodes.length > 0 ? (
        <div class="table-wrap">
          <table class="robot-episodes">
            <caption class="sr-only">Episodes of this robot, in the order they were indexed</caption>
            <thead>
              <tr>
                <th scope="col">Episode</th>
                <th scope="col">Outcome</th>
                <th scope="col" class="hide-narrow">Task</th>
                <th scope="col" class="hide-narrow">Started</th>
                <th scope="col" class="num hide-narrow">Duration</th>
                <th scope="col">Sync</th>
              </tr>
            </thead>
            <tbody>
              {episodes.map((e) => {
                const s = syncLabel(e);
                return (
                  <tr key={e.id} data-episode-id={e.id}>
                    <th scope="row">
                      <Link to={`/episodes/${encodeURIComponent(e.id)}`}>
                        <code>{e.id}</code>
                      </Link>
                    </th>
                    <td>
                      <Pill tone={outcomeTone(e.outcome)}>{e.outcome}</Pill>
                    </td>
                    <td class="hide-narrow">{e.task_name ?? e.task_id ?? <span class="muted">–</span>}</td>
                    <td class="hide-narrow">
                      <time dateTime={e.started_at}>{formatTime(e.started_at)}</time>
                    </td>
                    <td class="num hide-narrow">{e.duration_s === null ? '–' : formatDuration(Math.round(e.duration_s * 1000))}</td>
                    <td>
                      <Pill tone={s.tone}>{s.label}</Pill>
                    </td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        </div>
      ) : null}
      <p class="small">
        {list.data?.cursor ? `The first ${RECENT} in the order they were indexed. ` : null}
        <Link to={allLink}>All episodes of this robot</Link>
      </p>
    </section>
  );
}
