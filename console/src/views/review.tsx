import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import type { Episode, EpisodeFilters } from '@fleet/client';
import { useConsole } from '../ui/context.js';
import { authMessage, useAsync } from '../ui/hooks.js';
import { ErrorNotice, Field, KvTable, Link, Loading, PageHeader, Pill, ScopedButton } from '../ui/components.js';
import { formatDuration, formatTime, plural } from '../ui/format.js';
import { replaceQuery } from '../router.js';
import { can, isAuthLost, needs } from '../session.js';
import { describeFilter, issuesOf, issueText, OUTCOMES, queryFromFilter, type EpisodeFilter } from '../ui/episodes-filter.js';
import { outcomePill } from './episodes.js';
import { Player } from '../player/index.js';
import { PLAYER_KEYS } from '../player/keys.js';
import {
  collectEpisodes,
  decisionOf,
  decisionPatch,
  MAX_TAG_LENGTH,
  MAX_TAGS,
  mergeQueue,
  newQueueId,
  nextUndecided,
  NOT_REVIEWED,
  parseQueueQuery,
  parseTags,
  progressOf,
  pushUndo,
  QUEUE_CAP,
  QUEUE_PAGE,
  queueQuery,
  restorePatch,
  startIndex,
  tagsOf,
  UNDO_REASON,
  type Outcome,
  type QaStatus,
  type UndoStep,
} from '../review/queue.js';
import '../review/review.css';

const WRITE = 'data:write' as const;

/**
 * `/console/review?<episode filters>&q=<queue id>&at=<episode id>&tags=<a,b,c>`: one episode at a
 * time, played, and decided with a key. The URL is the queue's whole state (filter, queue id,
 * the episode shown, the curator's tags), rewritten in place as the curator moves, so a reload
 * or a shared link opens the same episode with the same progress. A page without a queue id
 * starts a new queue (and, without any filter, over the episodes not yet reviewed).
 */
export function ReviewView({ query }: { query: URLSearchParams }) {
  const qs = query.toString();
  const params = useMemo(() => parseQueueQuery(new URLSearchParams(qs)), [qs]);
  const filterKey = JSON.stringify(params.filter);
  useEffect(() => {
    if (params.q !== null) return;
    const filter = Object.keys(params.filter).length > 0 ? params.filter : NOT_REVIEWED;
    replaceQuery(queueQuery({ filter, q: newQueueId(), at: params.at, tags: params.tags }));
  }, [params.q, filterKey]);
  if (params.q === null) return <Loading label="Starting a new queue" />;
  return <Queue key={`${filterKey} ${params.q}`} filter={params.filter} q={params.q} at={params.at} tags={params.tags} tagsNote={params.tagsNote} />;
}

interface Loaded {
  episodes: Episode[];
  /** The filter matched more than the queue holds. */
  capped: boolean;
  decidedCapped: boolean;
}

/** What went wrong with the last action, said on the page until the next one. */
interface Failure {
  action: string;
  error: unknown;
}

function isTyping(target: EventTarget | null): boolean {
  if (!(target instanceof HTMLElement)) return false;
  return target.isContentEditable || target instanceof HTMLInputElement || target instanceof HTMLTextAreaElement || target instanceof HTMLSelectElement;
}

const STATUS_WORD: Record<QaStatus, string> = { accepted: 'Accepted', rejected: 'Rejected' };

function Queue(props: { filter: EpisodeFilter; q: string; at: string | null; tags: string[]; tagsNote: string | null; now?: () => Date }) {
  const { filter, q, at, tags } = props;
  const now = props.now ?? (() => new Date());
  const { session, authLost } = useConsole();
  const mayWrite = can(session, WRITE);
  const [loadedCount, setLoadedCount] = useState(0);
  const loaded = useAsync<Loaded>(async (signal) => {
    // The URL's filter as it is (strings): the API checks it and says what is wrong.
    const list = (f: EpisodeFilter, onProgress?: (n: number) => void) =>
      collectEpisodes((cursor) => session.client.episodes.list(f as EpisodeFilters, { ...(cursor ? { cursor } : {}), limit: QUEUE_PAGE, signal }), QUEUE_CAP, onProgress);
    const [filtered, decided] = await Promise.all([list(filter, setLoadedCount), list({ 'annotation.qa_queue': q })]);
    return { episodes: mergeQueue(filtered.episodes, decided.episodes), capped: filtered.capped, decidedCapped: decided.capped };
  }, []);

  const [episodes, setEpisodes] = useState<Episode[]>([]);
  useEffect(() => {
    if (loaded.data) setEpisodes(loaded.data.episodes);
  }, [loaded.data]);
  const ready = loaded.data !== undefined;

  const index = useMemo(() => startIndex(episodes, q, at), [episodes, q, at]);
  const current = index >= 0 ? episodes[index] : undefined;
  // The episode a link named, when the queue does not hold it (said until the curator moves).
  const [openedAt] = useState(at);
  const [linkNote, setLinkNote] = useState(true);
  const missingAt = linkNote && ready && openedAt !== null && episodes.length > 0 && !episodes.some((e) => e.id === openedAt);
  // The URL always names the episode shown, so a reload opens it again.
  useEffect(() => {
    if (current && current.id !== at) replaceQuery(queueQuery({ filter, q, at: current.id, tags }));
  }, [current?.id, at]);

  const [busy, setBusy] = useState<string | null>(null);
  const [failure, setFailure] = useState<Failure | null>(null);
  const [said, setSaid] = useState('');
  const [undo, setUndo] = useState<UndoStep[]>([]);
  // Tags toggled on an episode and not yet written with a decision, by episode id.
  const [pending, setPending] = useState<ReadonlyMap<string, string[]>>(new Map());
  const [overriding, setOverriding] = useState(false);
  const [helpOpen, setHelpOpen] = useState(false);

  // The list as it is now, also after an await (a decision's answer replaces its episode).
  const latest = useRef(episodes);
  latest.current = episodes;
  const replace = (next: Episode) => {
    const list = latest.current.map((e) => (e.id === next.id ? next : e));
    latest.current = list;
    setEpisodes(list);
    return list;
  };
  const go = (i: number) => {
    const e = latest.current[i];
    if (!e) return;
    setOverriding(false);
    setLinkNote(false);
    replaceQuery(queueQuery({ filter, q, at: e.id, tags }));
  };
  const fail = (action: string, error: unknown) => {
    if (isAuthLost(error)) authLost(authMessage(error));
    setFailure({ action, error });
    setSaid(`${action} failed; nothing was changed.`);
  };
  const refuseWrite = () => setSaid(`Deciding ${needs(WRITE)}: this key can watch the queue only.`);

  const selectedTags = (e: Episode) => pending.get(e.id) ?? tagsOf(e);

  const decide = async (status: QaStatus) => {
    if (!current) return;
    if (!mayWrite) return refuseWrite();
    if (busy) return setSaid(`Still saving (${busy}); try again in a moment.`);
    const e = current;
    const toggled = pending.get(e.id);
    const patch = decisionPatch({ status, reviewer: { keyId: session.keyId, keyName: session.keyName }, q, at: now(), tags: toggled });
    const action = `${status === 'accepted' ? 'Accepting' : 'Rejecting'} ${e.id}`;
    setBusy(action);
    setFailure(null);
    try {
      const next = await session.client.episodes.annotate(e.id, { annotations: patch });
      const list = replace(next);
      setUndo((s) => pushUndo(s, { kind: 'decision', episodeId: e.id, status, restore: restorePatch(e, Object.keys(patch)) }));
      if (toggled) {
        setPending((cur) => {
          const m = new Map(cur);
          m.delete(e.id);
          return m;
        });
      }
      const i = list.findIndex((x) => x.id === e.id);
      const n = nextUndecided(list, q, i);
      const { reviewed, total } = progressOf(list, q);
      if (n >= 0 && n !== i) {
        setSaid(`${STATUS_WORD[status]} ${e.id}. ${reviewed} of ${total} reviewed; now episode ${n + 1}.`);
        go(n);
      } else setSaid(`${STATUS_WORD[status]} ${e.id}. Every episode of this queue is reviewed (${reviewed} of ${total}).`);
    } catch (err) {
      fail(action, err);
    } finally {
      setBusy(null);
    }
  };

  const override = async (outcome: Outcome, reason: string): Promise<boolean> => {
    if (!current) return false;
    if (!mayWrite) return (refuseWrite(), false);
    if (busy) return (setSaid(`Still saving (${busy}); try again in a moment.`), false);
    const e = current;
    const action = `Overriding the outcome of ${e.id}`;
    setBusy(action);
    setFailure(null);
    try {
      const next = await session.client.episodes.setOutcome(e.id, { outcome, reason });
      replace(next);
      setUndo((s) => pushUndo(s, { kind: 'outcome', episodeId: e.id, from: e.outcome, to: outcome }));
      setSaid(`Outcome of ${e.id} set to ${outcome}.`);
      return true;
    } catch (err) {
      fail(action, err);
      return false;
    } finally {
      setBusy(null);
    }
  };

  const takeBack = async () => {
    const step = undo[undo.length - 1];
    if (!step) return setSaid('Nothing to undo on this page.');
    if (!mayWrite) return refuseWrite();
    if (busy) return setSaid(`Still saving (${busy}); try again in a moment.`);
    const action = step.kind === 'decision' ? `Undoing the decision on ${step.episodeId}` : `Undoing the outcome override of ${step.episodeId}`;
    setBusy(action);
    setFailure(null);
    try {
      const next =
        step.kind === 'decision'
          ? await session.client.episodes.annotate(step.episodeId, { annotations: step.restore })
          : await session.client.episodes.setOutcome(step.episodeId, { outcome: step.from, reason: UNDO_REASON });
      const list = replace(next);
      setUndo((s) => s.slice(0, -1));
      setSaid(step.kind === 'decision' ? `Took back "${step.status}" on ${step.episodeId}.` : `Outcome of ${step.episodeId} back to ${step.from}.`);
      const i = list.findIndex((x) => x.id === step.episodeId);
      if (i >= 0) go(i);
    } catch (err) {
      fail(action, err);
    } finally {
      setBusy(null);
    }
  };

  const toggleTag = (n: number) => {
    if (!current) return;
    if (!mayWrite) return refuseWrite();
    const tag = tags[n - 1];
    if (tag === undefined) return setSaid(`No tag on key ${n}: add tags in the queue's header.`);
    const sel = selectedTags(current);
    const next = sel.includes(tag) ? sel.filter((t) => t !== tag) : [...sel, tag];
    const m = new Map(pending);
    m.set(current.id, next);
    setPending(m);
    setSaid(`${tag} ${next.includes(tag) ? 'on' : 'off'} for ${current.id} (written with the decision).`);
  };

  const move = (delta: number) => {
    if (index < 0) return;
    const i = index + delta;
    if (i < 0 || i >= episodes.length) return setSaid(delta > 0 ? 'This is the last episode of the queue.' : 'This is the first episode of the queue.');
    go(i);
  };

  // One document listener reading the latest state; none of its keys fire while typing in a
  // field, with a modifier held, or when the player (or anything else) already took the key.
  const onKey = useRef<(ev: KeyboardEvent) => void>(() => undefined);
  onKey.current = (ev: KeyboardEvent) => {
    if (!ready || ev.defaultPrevented || ev.ctrlKey || ev.metaKey || ev.altKey || ev.isComposing || isTyping(ev.target)) return;
    if (document.querySelector('dialog[open]')) return;
    const k = ev.key;
    let handled = true;
    if (k === 'a') void decide('accepted');
    else if (k === 'r') void decide('rejected');
    else if (k === 'u') void takeBack();
    else if (k === 'n') move(1);
    else if (k === 'p') move(-1);
    else if (k === 'o') {
      if (!mayWrite) refuseWrite();
      else if (current) setOverriding(true);
    } else if (k === '?') setHelpOpen((o) => !o);
    else if (/^[1-9]$/.test(k)) toggleTag(Number(k));
    else handled = false;
    if (handled) ev.preventDefault();
  };
  useEffect(() => {
    const l = (ev: KeyboardEvent) => onKey.current(ev);
    document.addEventListener('keydown', l);
    return () => document.removeEventListener('keydown', l);
  }, []);

  const progress = progressOf(episodes, q);
  const last = undo[undo.length - 1];

  return (
    <section class="review-page">
      <PageHeader title="Review queue">
        <Link to={`/episodes?${queryFromFilter(filter).toString()}`} class="button">
          Change the filter
        </Link>
      </PageHeader>
      <QueueHeader filter={filter} q={q} tags={tags} tagsNote={props.tagsNote} at={current?.id ?? at} progress={ready ? progress : null} />
      {loaded.data?.capped ? (
        <p class="notice warn small">
          The filter matches more than {QUEUE_CAP.toLocaleString()} episodes: this queue holds the first {QUEUE_CAP.toLocaleString()}. Narrow the filter (a robot, a task, a time range) to review the rest.
        </p>
      ) : null}
      {loaded.data?.decidedCapped ? <p class="notice warn small">This queue has more than {QUEUE_CAP.toLocaleString()} decisions; only the first {QUEUE_CAP.toLocaleString()} are counted.</p> : null}
      {mayWrite ? null : <p class="notice warn small">This key can watch the queue only: deciding {needs(WRITE)}.</p>}

      {loaded.error ? <ErrorNotice error={loaded.error} action="Loading the queue" /> : null}
      {issuesOf(loaded.error).length > 0 ? (
        <ul class="field-error review-filter-issues">
          {issuesOf(loaded.error).map((i, n) => (
            <li key={n}>
              <code>{i.path.join('.') || 'filter'}</code>: {issueText(i)}
            </li>
          ))}
        </ul>
      ) : null}
      {!ready && !loaded.error ? <Loading label={loadedCount > 0 ? `Loading the queue (${plural(loadedCount, 'episode')} so far)` : 'Loading the queue'} /> : null}
      {ready && episodes.length === 0 ? (
        <p class="notice empty">
          No episode in this queue: the filter <span class="mono">{describeFilter(filter)}</span> matches none.{' '}
          <Link to={`/episodes?${queryFromFilter(filter).toString()}`}>Open the episode list</Link>
        </p>
      ) : null}
      {missingAt ? <p class="notice info small">The episode in the link is not in this queue; it opens at the first episode not yet reviewed.</p> : null}

      <p class="sr-only" role="status" aria-live="polite">
        {said}
      </p>
      {failure ? (
        <div class="review-failure">
          <ErrorNotice error={failure.error} action={failure.action} />
          <p class="small">Nothing was written and nothing is lost: the episode keeps its previous state and your tags; press the key again to retry.</p>
        </div>
      ) : null}

      {current ? (
        <div class="review-layout">
          <div class="review-main">
            <section class="panel review-player" aria-label="Recording">
              <Player key={current.id} episode={current} client={session.client} autoplay keyboard />
            </section>
            <EpisodeFacts e={current} q={q} position={index + 1} total={episodes.length} selected={selectedTags(current)} toggled={pending.has(current.id)} />
          </div>
          <aside class="review-side" aria-label="Decision">
            <section class="panel review-decide" aria-labelledby="decide-title">
              <h2 id="decide-title">Decide</h2>
              <div class="review-buttons">
                <ScopedButton allowed={mayWrite} why={needs(WRITE)} class="primary" disabled={busy !== null} aria-keyshortcuts="a" onClick={() => void decide('accepted')}>
                  Accept <kbd aria-hidden="true">a</kbd>
                </ScopedButton>
                <ScopedButton allowed={mayWrite} why={needs(WRITE)} class="danger-outline" disabled={busy !== null} aria-keyshortcuts="r" onClick={() => void decide('rejected')}>
                  Reject <kbd aria-hidden="true">r</kbd>
                </ScopedButton>
              </div>
              <TagToggles tags={tags} selected={selectedTags(current)} mayWrite={mayWrite} onToggle={toggleTag} />
              <div class="review-buttons">
                <ScopedButton allowed={mayWrite} why={needs(WRITE)} disabled={busy !== null} aria-keyshortcuts="o" aria-expanded={overriding} onClick={() => setOverriding(!overriding)}>
                  Override outcome <kbd aria-hidden="true">o</kbd>
                </ScopedButton>
                <ScopedButton allowed={mayWrite} why={needs(WRITE)} disabled={busy !== null || !last} aria-keyshortcuts="u" onClick={() => void takeBack()} title={last ? undoLabel(last) : 'Nothing to undo'}>
                  Undo <kbd aria-hidden="true">u</kbd>
                </ScopedButton>
              </div>
              {last ? <p class="muted small review-undo-what">Undo takes back: {undoLabel(last)}</p> : null}
              {overriding ? <OverrideForm key={current.id} e={current} busy={busy !== null} onCancel={() => setOverriding(false)} onSubmit={(o, reason) => override(o, reason).then((ok) => ok && setOverriding(false))} /> : null}
              {busy ? <p class="muted small" role="status">{busy}…</p> : null}
            </section>
            <nav class="panel review-nav" aria-label="Queue">
              <div class="review-buttons">
                <button type="button" disabled={index <= 0} aria-keyshortcuts="p" onClick={() => move(-1)}>
                  Previous <kbd aria-hidden="true">p</kbd>
                </button>
                <button type="button" disabled={index >= episodes.length - 1} aria-keyshortcuts="n" onClick={() => move(1)}>
                  Next <kbd aria-hidden="true">n</kbd>
                </button>
              </div>
              <QueueStrip episodes={episodes} q={q} index={index} onGo={go} />
            </nav>
            <KeyHelp open={helpOpen} onToggle={setHelpOpen} />
          </aside>
        </div>
      ) : null}
    </section>
  );
}

function undoLabel(s: UndoStep): string {
  return s.kind === 'decision' ? `${s.status} on ${s.episodeId}` : `outcome ${s.from} → ${s.to} on ${s.episodeId}`;
}

/** The queue's filter, id and progress, and the curator's tags (kept in the URL). */
function QueueHeader({ filter, q, tags, tagsNote, at, progress }: { filter: EpisodeFilter; q: string; tags: string[]; tagsNote: string | null; at: string | null; progress: { reviewed: number; total: number } | null }) {
  const [draft, setDraft] = useState(tags.join(', '));
  const [note, setNote] = useState<string | null>(null);
  const tagsKey = tags.join(',');
  useEffect(() => setDraft(tags.join(', ')), [tagsKey]);
  return (
    <div class="panel review-header">
      <div class="review-summary">
        <p class="small">
          Reviewing <span class="mono">{describeFilter(filter)}</span>
        </p>
        <p class="muted small">
          Queue <code>{q}</code>
        </p>
        {progress ? (
          <div class="review-progress">
            <progress max={Math.max(1, progress.total)} value={progress.reviewed} aria-labelledby="review-progress-text" />
            <span id="review-progress-text" class="strong">
              {progress.reviewed.toLocaleString()} of {plural(progress.total, 'episode')} reviewed
            </span>
          </div>
        ) : null}
      </div>
      <form
        class="review-tags-form"
        aria-label="Tags of this queue"
        onSubmit={(ev) => {
          ev.preventDefault();
          const parsed = parseTags(draft);
          setNote(parsed.note);
          setDraft(parsed.tags.join(', '));
          replaceQuery(queueQuery({ filter, q, at, tags: parsed.tags }));
        }}
      >
        <Field label="Tags (keys 1–9)" id="review-tags" hint={`Comma-separated, at most ${MAX_TAGS} (of up to ${MAX_TAG_LENGTH} characters). Key n toggles tag n; the decision writes them as qa_tags.`} error={note ?? tagsNote ?? undefined}>
          <input id="review-tags" value={draft} onInput={(e) => setDraft(e.currentTarget.value)} autoComplete="off" spellcheck={false} placeholder="e.g. blurry, occluded, wrong task" aria-describedby="review-tags-hint" />
        </Field>
        <button type="submit">Set tags</button>
      </form>
    </div>
  );
}

function TagToggles({ tags, selected, mayWrite, onToggle }: { tags: string[]; selected: string[]; mayWrite: boolean; onToggle: (n: number) => void }) {
  const others = selected.filter((t) => !tags.includes(t));
  return (
    <div class="review-tags" role="group" aria-labelledby="review-tags-title">
      <h3 id="review-tags-title" class="small-heading">
        Tags
      </h3>
      {tags.length === 0 ? <p class="muted small">No tags in this queue: set some in the header to toggle them with 1–9.</p> : null}
      <div class="review-tag-buttons">
        {tags.map((t, i) => (
          <ScopedButton key={t} allowed={mayWrite} why={needs(WRITE)} class={`tag-toggle${selected.includes(t) ? ' on' : ''}`} aria-pressed={selected.includes(t)} aria-keyshortcuts={String(i + 1)} onClick={() => onToggle(i + 1)}>
            <kbd aria-hidden="true">{i + 1}</kbd> {t}
          </ScopedButton>
        ))}
      </div>
      {others.length > 0 ? <p class="muted small">Also tagged (kept): {others.join(', ')}</p> : null}
    </div>
  );
}

function OverrideForm({ e, busy, onCancel, onSubmit }: { e: Episode; busy: boolean; onCancel: () => void; onSubmit: (o: Outcome, reason: string) => Promise<unknown> }) {
  const [outcome, setOutcome] = useState<Outcome>(e.outcome === 'success' ? 'failure' : 'success');
  const [reason, setReason] = useState('');
  const first = useRef<HTMLSelectElement>(null);
  useEffect(() => first.current?.focus(), []);
  return (
    <form
      class="review-override"
      aria-label="Override the outcome"
      onKeyDown={(ev) => {
        if (ev.key === 'Escape') {
          ev.preventDefault();
          onCancel();
        }
      }}
      onSubmit={(ev) => {
        ev.preventDefault();
        if (reason.trim() === '' || busy) return;
        void onSubmit(outcome, reason.trim());
      }}
    >
      <p class="small">
        Now {outcomePill(e)}. The change and its reason go into the outcome history.
      </p>
      <Field label="New outcome" id="review-outcome">
        <select id="review-outcome" ref={first} value={outcome} onChange={(ev) => setOutcome(ev.currentTarget.value as Outcome)}>
          {OUTCOMES.map((o) => (
            <option key={o} value={o}>
              {o}
            </option>
          ))}
        </select>
      </Field>
      <Field label="Reason" id="review-reason">
        <input id="review-reason" value={reason} onInput={(ev) => setReason(ev.currentTarget.value)} maxLength={1024} required autoComplete="off" />
      </Field>
      <div class="row">
        <button type="submit" class="primary" disabled={busy || reason.trim() === ''}>
          Set outcome
        </button>
        <button type="button" onClick={onCancel}>
          Cancel
        </button>
      </div>
    </form>
  );
}

function EpisodeFacts({ e, q, position, total, selected, toggled }: { e: Episode; q: string; position: number; total: number; selected: string[]; toggled: boolean }) {
  const decision = decisionOf(e, q);
  const elsewhere = decision === null && typeof e.annotations?.qa_status === 'string' ? e.annotations.qa_status : null;
  return (
    <section class="panel review-facts" aria-labelledby="review-episode-title">
      <h2 id="review-episode-title">
        Episode {position} of {total}
      </h2>
      <p class="review-episode-id">
        <Link to={`/episodes/${encodeURIComponent(e.id)}`}>
          <code>{e.id}</code>
        </Link>{' '}
        {decision ? <Pill tone={decision === 'accepted' ? 'ok' : 'bad'}>{decision}</Pill> : <Pill tone="idle">not reviewed here</Pill>}
        {elsewhere ? <span class="muted small"> ({elsewhere} in another queue)</span> : null}
      </p>
      <dl class="facts">
        <div>
          <dt>Robot</dt>
          <dd>
            <code>{e.robot_id}</code>
          </dd>
        </div>
        <div>
          <dt>Task</dt>
          <dd>{e.task_name ?? e.task_id ?? '–'}</dd>
        </div>
        <div>
          <dt>Operator</dt>
          <dd>{e.operator_name ?? e.operator_id ?? '–'}</dd>
        </div>
        <div>
          <dt>Outcome</dt>
          <dd>{outcomePill(e)}</dd>
        </div>
        <div>
          <dt>Started</dt>
          <dd>
            <time dateTime={e.started_at}>{formatTime(e.started_at)}</time>
          </dd>
        </div>
        <div>
          <dt>Duration</dt>
          <dd>{e.duration_s === null ? '–' : formatDuration(Math.round(e.duration_s * 1000))}</dd>
        </div>
        <div>
          <dt>Tags</dt>
          <dd>
            {selected.length > 0 ? selected.join(', ') : '–'}
            {toggled ? <span class="muted small"> (not saved yet)</span> : null}
          </dd>
        </div>
      </dl>
    </section>
  );
}

/** The episodes around the current one, each a button: the queue for a mouse. */
function QueueStrip({ episodes, q, index, onGo }: { episodes: Episode[]; q: string; index: number; onGo: (i: number) => void }) {
  const from = Math.max(0, Math.min(index - 3, episodes.length - 7));
  const window = episodes.slice(from, from + 7);
  return (
    <ol class="review-strip" aria-label="Episodes around this one">
      {window.map((e, n) => {
        const i = from + n;
        const d = decisionOf(e, q);
        return (
          <li key={e.id}>
            <button type="button" class={`strip-item${i === index ? ' current' : ''}`} aria-current={i === index ? 'true' : undefined} onClick={() => onGo(i)}>
              <span class="strip-pos">{i + 1}</span> <code>{e.id}</code> <span class={`strip-mark ${d ?? 'open'}`}>{d ?? 'open'}</span>
            </button>
          </li>
        );
      })}
    </ol>
  );
}

const KEYS: [string, string][] = [
  ['a', 'accept, then the next episode not reviewed'],
  ['r', 'reject, then the next episode not reviewed'],
  ['1–9', 'toggle the tag with that number (written with the decision)'],
  ['o', 'override the outcome, with a reason'],
  ['u', 'undo the last decision or override'],
  ['n / p', 'next / previous episode'],
  ['?', 'show or hide these keys'],
  // The player's own keys, as it defines them.
  ...PLAYER_KEYS.map((k): [string, string] => [k.keys, `player: ${k.action}`]),
];

function KeyHelp({ open, onToggle }: { open: boolean; onToggle: (open: boolean) => void }) {
  return (
    <details class="panel review-keys" open={open} onToggle={(e) => onToggle(e.currentTarget.open)}>
      <summary>
        Keyboard shortcuts <kbd aria-hidden="true">?</kbd>
      </summary>
      <p class="muted small">Keys do nothing while you type in a field.</p>
      <KvTable caption="Keys of the review queue" columns={['Key', 'What it does']} wrap={false} rows={KEYS.map(([k, v]) => ({ key: k, name: <kbd>{k}</kbd>, value: v }))} />
    </details>
  );
}

