import type { ComponentChildren } from 'preact';
import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import type { Episode } from '@fleet/client';
import { useConsole, useLiveEvent } from '../ui/context.js';
import { useAction, useAsync } from '../ui/hooks.js';
import { Confirm, ErrorNotice, Field, Link, Loading, PageHeader, Pill, ScopedButton } from '../ui/components.js';
import { dash, formatBytes, formatDuration, formatTime, plural } from '../ui/format.js';
import { navigate, replaceQuery } from '../router.js';
import { can, needs } from '../session.js';
import { newQueueId, queueQuery } from '../review/queue.js';
import {
  applyReplicaEvent,
  decidableFromEvent,
  describeFilter,
  episodeEventData,
  episodeMatches,
  FILTER_FIELDS,
  filterFromQuery,
  issueAt,
  issuesOf,
  keyRowsOf,
  LAYERS,
  otherKeys,
  OUTCOMES,
  queryFromFilter,
  SYNC_STATES,
  syncSummary,
  splitError,
  type EpisodeFilter,
  type KeyRow,
  type Layer,
} from '../ui/episodes-filter.js';

const PAGE_SIZES = [25, 50, 100] as const;
const MORE_KEYS = new Set(['subtask_id', 'operator_id', 'control_mode', 'policy_version_id', 'eval_id', 'destination_id']);

export function outcomePill(e: Pick<Episode, 'outcome' | 'recorded_outcome'>) {
  const tone = e.outcome === 'success' ? 'ok' : e.outcome === 'failure' ? 'bad' : 'idle';
  const overridden = e.recorded_outcome !== null && e.recorded_outcome !== e.outcome;
  return (
    <span class="pill-group">
      <Pill tone={tone}>{e.outcome}</Pill>
      {overridden ? <span class="muted small">(recorded {e.recorded_outcome})</span> : null}
    </span>
  );
}

export function syncPill(e: Pick<Episode, 'replicas'>) {
  const s = syncSummary(e);
  return (
    <span class="pill-group">
      <Pill tone={s.tone}>{s.label}</Pill>
      {s.error ? (
        <span class="muted small" title={s.error}>
          {splitError(s.error).code || 'error'}
        </span>
      ) : null}
    </span>
  );
}

interface Column {
  id: string;
  label: string;
  /** Shown by default. */
  initial?: boolean;
  /** Always shown (the link to the episode). */
  fixed?: boolean;
  num?: boolean;
  render(e: Episode, robotsReadable: boolean): ComponentChildren;
}


export const COLUMNS: readonly Column[] = [
  {
    id: 'id',
    label: 'Episode',
    fixed: true,
    render: (e) => (
      <Link to={`/episodes/${encodeURIComponent(e.id)}`}>
        <code>{e.id}</code>
      </Link>
    ),
  },
  {
    id: 'robot',
    label: 'Robot',
    initial: true,
    render: (e, robots) =>
      robots ? (
        <Link to={`/robots/${encodeURIComponent(e.robot_id)}`}>
          <code>{e.robot_id}</code>
        </Link>
      ) : (
        <code>{e.robot_id}</code>
      ),
  },
  { id: 'task', label: 'Task', initial: true, render: (e) => dash(e.task_name ?? e.task_id) },
  { id: 'subtask', label: 'Subtask', render: (e) => dash(e.subtask_id) },
  { id: 'operator', label: 'Operator', render: (e) => dash(e.operator_name ?? e.operator_id) },
  { id: 'control_mode', label: 'Control mode', render: (e) => dash(e.control_mode) },
  { id: 'outcome', label: 'Outcome', initial: true, render: (e) => outcomePill(e) },
  { id: 'started', label: 'Started', initial: true, render: (e) => <time dateTime={e.started_at}>{formatTime(e.started_at)}</time> },
  { id: 'duration', label: 'Duration', initial: true, num: true, render: (e) => (e.duration_s === null ? '–' : formatDuration(Math.round(e.duration_s * 1000))) },
  { id: 'size', label: 'Size', num: true, render: (e) => formatBytes(e.bag_size_bytes) },
  { id: 'sync', label: 'Sync', initial: true, render: (e) => syncPill(e) },
  { id: 'session', label: 'Session', render: (e) => <span>{e.session_name ?? <code>{e.recording_session_id}</code>} #{e.episode_seq}</span> },
  { id: 'policy', label: 'Policy', render: (e) => dash(e.policy_version_id) },
  { id: 'eval', label: 'Evaluation', render: (e) => dash(e.eval_id) },
  { id: 'reported', label: 'Indexed', render: (e) => <time dateTime={e.reported_at}>{formatTime(e.reported_at)}</time> },
];

const COLUMNS_STORAGE = 'fleet-console.episodes.columns';

/** The columns chosen in the picker, remembered in localStorage (a display choice, no secret). */
function useColumns(): [Set<string>, (id: string, on: boolean) => void] {
  const [chosen, setChosen] = useState<Set<string>>(() => {
    try {
      const saved = JSON.parse(localStorage.getItem(COLUMNS_STORAGE) ?? 'null') as unknown;
      if (Array.isArray(saved)) return new Set(saved.filter((s): s is string => typeof s === 'string'));
    } catch {
      // Unreadable or disabled storage: the defaults.
    }
    return new Set(COLUMNS.filter((c) => c.initial).map((c) => c.id));
  });
  const toggle = (id: string, on: boolean) => {
    const next = new Set(chosen);
    if (on) next.add(id);
    else next.delete(id);
    setChosen(next);
    try {
      localStorage.setItem(COLUMNS_STORAGE, JSON.stringify([...next]));
    } catch {
      // Without storage the choice lasts as long as the page.
    }
  };
  return [chosen, toggle];
}

export function EpisodeTable({ episodes, columns, caption, highlight, extraClass }: { episodes: Episode[]; columns: readonly Column[]; caption: string; highlight?: ReadonlySet<string>; extraClass?: string }) {
  const { session } = useConsole();
  const robots = can(session, ['robots:read', 'fleet:read']);
  return (
    <div class="table-wrap">
      <table class={`episodes-table${extraClass ? ` ${extraClass}` : ''}`}>
        <caption class="sr-only">{caption}</caption>
        <thead>
          <tr>
            {columns.map((c) => (
              <th key={c.id} scope="col" class={c.num ? 'num' : undefined}>
                {c.label}
              </th>
            ))}
          </tr>
        </thead>
        <tbody>
          {episodes.map((e) => (
            <tr key={e.id} data-episode={e.id} class={highlight?.has(e.id) ? 'is-new' : undefined}>
              {columns.map((c) => (
                <td key={c.id} class={c.num ? 'num' : undefined}>
                  {c.render(e, robots)}
                </td>
              ))}
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

/**
 * `/console/episodes`: every filter of `GET /v1/episodes`, in the page URL with the cursor (a view
 * can be shared and reloaded), keyset paging both ways (a stack of the cursors that led here),
 * live rows (sync state moves on `episode.synced|verified|failed`), a count of new matching
 * episodes as `episode.finalized` events arrive, and a dataset made from the filter in one step.
 */
export function EpisodesView({ query }: { query: URLSearchParams }) {
  const { session } = useConsole();
  const qs = query.toString();
  const { filter, cursor, limit } = useMemo(() => {
    const q = new URLSearchParams(qs);
    const lim = Number(q.get('limit'));
    q.delete('limit');
    return { filter: filterFromQuery(q), cursor: q.get('cursor'), limit: Number.isInteger(lim) && lim >= 1 && lim <= 100 ? lim : 50 };
  }, [qs]);
  const filterKey = JSON.stringify(filter);

  // The cursors of the pages before this one ('' is the first page): "Previous" pops it.
  const [back, setBack] = useState<{ filterKey: string; stack: string[] }>({ filterKey, stack: [] });
  const stack = back.filterKey === filterKey ? back.stack : [];

  const list = useAsync((signal) => session.client.episodes.list(filter as never, { ...(cursor ? { cursor } : {}), limit, signal }), [qs]);
  const [rows, setRows] = useState<Episode[]>([]);
  useEffect(() => {
    if (list.data) setRows(list.data.episodes);
  }, [list.data]);

  const go = (f: EpisodeFilter, c: string | null, lim = limit) => {
    const q = queryFromFilter(f, c);
    if (lim !== 50) q.set('limit', String(lim));
    replaceQuery(q);
  };

  // Live: new episodes that match the filter, and sync states of the rows shown.
  const [fresh, setFresh] = useState<{ filterKey: string; episodes: Episode[] }>({ filterKey, episodes: [] });
  const [shownNew, setShownNew] = useState<{ filterKey: string; episodes: Episode[] }>({ filterKey, episodes: [] });
  const seen = useRef(new Set<string>());
  useEffect(() => {
    seen.current = new Set();
  }, [filterKey]);
  const liveFilter = useRef(filter);
  liveFilter.current = filter;
  useLiveEvent(['episode.finalized'], (ev) => {
    const d = episodeEventData(ev.data);
    if (!d || seen.current.has(d.episode_id) || rows.some((r) => r.id === d.episode_id)) return;
    seen.current.add(d.episode_id);
    const f = liveFilter.current;
    const key = JSON.stringify(f);
    const add = (e: Episode) => setFresh((cur) => (cur.filterKey !== key ? { filterKey: key, episodes: [e] } : cur.episodes.some((x) => x.id === e.id) ? cur : { filterKey: key, episodes: [...cur.episodes, e] }));
    if (decidableFromEvent(f) && f.robot_id !== undefined && f.robot_id !== d.robot_id) return;
    session.client.episodes.get(d.episode_id).then(
      (e) => {
        if (JSON.stringify(liveFilter.current) === key && episodeMatches(e, f)) add(e);
      },
      () => {
        // Not readable (removed since): nothing new to announce.
      },
    );
  });
  useLiveEvent(['episode.synced', 'episode.verified', 'episode.failed'], (ev) => {
    const d = episodeEventData(ev.data);
    if (!d) return;
    const patch = (list: Episode[]) => (list.some((r) => r.id === d.episode_id) ? list.map((r) => (r.id === d.episode_id ? applyReplicaEvent(r, ev.type, d) : r)) : list);
    setRows(patch);
    setShownNew((cur) => ({ ...cur, episodes: patch(cur.episodes) }));
  });
  const freshNow = fresh.filterKey === filterKey ? fresh.episodes : [];
  const shownNow = shownNew.filterKey === filterKey ? shownNew.episodes : [];
  // New episodes the user asked to see that the page shown does not hold (the list is oldest first).
  const newElsewhere = shownNow.filter((e) => !rows.some((r) => r.id === e.id));

  const [chosen, toggleColumn] = useColumns();
  const columns = COLUMNS.filter((c) => c.fixed || chosen.has(c.id));

  const [creating, setCreating] = useState(false);
  const mayWrite = can(session, 'data:write');
  // A new review queue (its own id) over exactly this filter; an empty filter reviews every episode.
  const reviewLink = useMemo(() => `/review?${queueQuery({ filter, q: newQueueId() }).toString()}`, [filterKey]);

  const n = freshNow.length;
  return (
    <section class="episodes-page">
      <PageHeader title="Episodes">
        <Link to={reviewLink} class="button">
          Review these
        </Link>
        <ScopedButton allowed={mayWrite} why={needs('data:write')} onClick={() => setCreating(true)} class="primary">
          Create dataset from this filter
        </ScopedButton>
      </PageHeader>

      <FilterForm filter={filter} error={list.error} onApply={(f) => go(f, null)} />

      {n > 0 ? (
        <div class="notice info new-episodes" role="status">
          <span>
            {n} new {n === 1 ? 'episode matches' : 'episodes match'} this filter.{' '}
          </span>
          <button
            type="button"
            class="link"
            onClick={() => {
              setShownNew({ filterKey, episodes: [...shownNow, ...freshNow] });
              setFresh({ filterKey, episodes: [] });
              setBack({ filterKey, stack: [] });
              if (cursor) go(filter, null);
              else list.reload();
            }}
          >
            Show
          </button>
        </div>
      ) : null}

      {newElsewhere.length > 0 ? (
        <div class="new-list">
          <h2 class="small-heading">New since this page opened</h2>
          <p class="muted small">The list is in the order episodes were indexed (oldest first), so new episodes are on its last page; here they are at hand.</p>
          <EpisodeTable episodes={newElsewhere} columns={columns} caption="New episodes matching the filter" highlight={new Set(newElsewhere.map((e) => e.id))} extraClass="new" />
        </div>
      ) : null}

      <div class="toolbar">
        <p class="muted small filter-summary">
          Showing <span class="mono">{describeFilter(filter)}</span>
        </p>
        <div class="row">
          <label class="row small" for="ep-page-size">
            Per page
            <select
              id="ep-page-size"
              value={String(limit)}
              onChange={(e) => {
                setBack({ filterKey, stack: [] });
                go(filter, null, Number(e.currentTarget.value));
              }}
            >
              {(PAGE_SIZES.includes(limit as 25) ? PAGE_SIZES : [...PAGE_SIZES, limit].sort((a, b) => a - b)).map((s) => (
                <option key={s} value={String(s)}>
                  {s}
                </option>
              ))}
            </select>
          </label>
          <ColumnPicker chosen={chosen} toggle={toggleColumn} />
        </div>
      </div>

      {list.error && issuesOf(list.error).length === 0 ? <ErrorNotice error={list.error} action="Listing episodes" /> : null}
      {list.loading && !list.data ? <Loading label="Loading episodes" /> : null}
      {list.data && !list.error ? (
        rows.length === 0 ? (
          <p class="notice empty">{cursor ? 'No more episodes match this filter.' : 'No episode matches this filter.'}</p>
        ) : (
          <EpisodeTable episodes={rows} columns={columns} caption={`Episodes matching ${describeFilter(filter)}`} />
        )
      ) : null}

      <nav class="pager" aria-label="Pages">
        <button
          type="button"
          disabled={!cursor}
          onClick={() => {
            const prev = stack.length > 0 ? stack[stack.length - 1]! : '';
            setBack({ filterKey, stack: stack.slice(0, -1) });
            go(filter, prev || null);
          }}
        >
          {cursor && stack.length === 0 ? 'First page' : 'Previous'}
        </button>
        <span class="muted small" aria-live="polite">
          {list.data ? `Page ${stack.length + 1}${cursor && stack.length === 0 ? ' (opened from a link)' : ''} · ${plural(rows.length, 'episode')}` : ''}
        </span>
        <button
          type="button"
          disabled={!list.data?.cursor || list.loading}
          onClick={() => {
            if (!list.data?.cursor) return;
            setBack({ filterKey, stack: [...stack, cursor ?? ''] });
            go(filter, list.data.cursor);
          }}
        >
          Next
        </button>
      </nav>

      {creating ? <CreateDatasetDialog filter={filter} onClose={() => setCreating(false)} /> : null}
    </section>
  );
}

function ColumnPicker({ chosen, toggle }: { chosen: Set<string>; toggle: (id: string, on: boolean) => void }) {
  return (
    <details class="column-picker">
      <summary>Columns</summary>
      <fieldset>
        <legend>Columns shown</legend>
        {COLUMNS.filter((c) => !c.fixed).map((c) => (
          <label key={c.id} class="check">
            <input type="checkbox" checked={chosen.has(c.id)} onChange={(e) => toggle(c.id, e.currentTarget.checked)} />
            {c.label}
          </label>
        ))}
      </fieldset>
    </details>
  );
}

/**
 * The filter form: a draft of the URL's filter, applied on submit. A 400 from the API is shown at
 * the field whose parameter it names (`details.issues[].path`, e.g. `/from`, `/metadata.site`).
 */
function FilterForm({ filter, error, onApply }: { filter: EpisodeFilter; error: unknown; onApply: (f: EpisodeFilter) => void }) {
  const { session } = useConsole();
  const [fixed, setFixed] = useState<Record<string, string>>({});
  const [rows, setRows] = useState<KeyRow[]>([]);
  const [others, setOthers] = useState<string[]>([]);
  const filterKey = JSON.stringify(filter);
  useEffect(() => {
    const f: Record<string, string> = {};
    for (const k of FILTER_FIELDS) if (filter[k.key] !== undefined) f[k.key] = filter[k.key]!;
    setFixed(f);
    setRows(keyRowsOf(filter));
    setOthers(otherKeys(filter));
  }, [filterKey]);

  const robots = useAsync(
    (signal) => (can(session, ['robots:read', 'fleet:read']) ? session.client.robots.list({ limit: 100, signal }).then((r) => r.robots) : Promise.resolve([])),
    [],
  );

  const submit = (e: Event) => {
    e.preventDefault();
    const f: EpisodeFilter = {};
    for (const [k, v] of Object.entries(fixed)) if (v.trim() !== '') f[k] = v.trim();
    for (const r of rows) if (r.key.trim() !== '') f[`${r.layer}.${r.key.trim()}`] = r.value;
    for (const k of others) if (filter[k] !== undefined) f[k] = filter[k]!;
    onApply(f);
  };
  const clear = () => onApply({});

  const fieldFor = (k: (typeof FILTER_FIELDS)[number]) => {
    const id = `ef-${k.key}`;
    const err = issueAt(error, k.key);
    const v = fixed[k.key] ?? '';
    const set = (value: string) => setFixed({ ...fixed, [k.key]: value });
    const common = { id, 'aria-invalid': err ? true : undefined, 'aria-describedby': err ? `${id}-error` : k.hint ? `${id}-hint` : undefined } as const;
    let input;
    if (k.kind === 'outcome' || k.kind === 'sync') {
      const options = k.kind === 'outcome' ? OUTCOMES : SYNC_STATES;
      input = (
        <select {...common} value={v} onChange={(e) => set(e.currentTarget.value)}>
          <option value="">any</option>
          {options.map((o) => (
            <option key={o} value={o}>
              {o}
            </option>
          ))}
          {v && !(options as readonly string[]).includes(v) ? <option value={v}>{v}</option> : null}
        </select>
      );
    } else {
      input = (
        <input
          {...common}
          value={v}
          onInput={(e) => set(e.currentTarget.value)}
          list={k.key === 'robot_id' && (robots.data?.length ?? 0) > 0 ? 'ef-robots' : undefined}
          autoComplete="off"
          spellcheck={false}
        />
      );
    }
    return (
      <Field key={k.key} label={k.label} id={id} error={err} hint={k.kind === 'time' ? k.hint : undefined}>
        {input}
      </Field>
    );
  };
  const moreOpen = FILTER_FIELDS.some((k) => MORE_KEYS.has(k.key) && filter[k.key] !== undefined) || issuesOf(error).some((i) => MORE_KEYS.has(i.path[0] ?? ''));

  return (
    <form class="panel filter-form" onSubmit={submit} aria-label="Episode filter">
      <div class="filters">{FILTER_FIELDS.filter((k) => !MORE_KEYS.has(k.key)).map(fieldFor)}</div>
      <details class="more-filters" open={moreOpen}>
        <summary>More filters</summary>
        <div class="filters">{FILTER_FIELDS.filter((k) => MORE_KEYS.has(k.key)).map(fieldFor)}</div>
      </details>
      {robots.data && robots.data.length > 0 ? (
        <datalist id="ef-robots">
          {robots.data.map((r) => (
            <option key={r.id} value={r.id}>
              {r.name}
            </option>
          ))}
        </datalist>
      ) : null}

      <fieldset class="key-filters">
        <legend>Metadata and annotation keys</legend>
        {rows.length === 0 ? <p class="muted small">Match a recorded metadata value or an annotation exactly (its string form).</p> : null}
        {rows.map((r, i) => {
          const param = `${r.layer}.${r.key.trim()}`;
          const err = r.key.trim() ? issueAt(error, param) : undefined;
          const set = (patch: Partial<KeyRow>) => setRows(rows.map((x, n) => (n === i ? { ...x, ...patch } : x)));
          return (
            <div class="key-row" key={i}>
              <Field label="Layer" id={`ek-layer-${i}`}>
                <select id={`ek-layer-${i}`} value={r.layer} onChange={(e) => set({ layer: e.currentTarget.value as Layer })}>
                  {LAYERS.map((l) => (
                    <option key={l} value={l}>
                      {l}
                    </option>
                  ))}
                </select>
              </Field>
              <Field label="Key" id={`ek-key-${i}`}>
                <input id={`ek-key-${i}`} value={r.key} onInput={(e) => set({ key: e.currentTarget.value })} autoComplete="off" spellcheck={false} aria-invalid={err ? true : undefined} />
              </Field>
              <Field label="Value" id={`ek-value-${i}`} error={err}>
                <input id={`ek-value-${i}`} value={r.value} onInput={(e) => set({ value: e.currentTarget.value })} autoComplete="off" spellcheck={false} aria-invalid={err ? true : undefined} />
              </Field>
              <button type="button" class="remove" onClick={() => setRows(rows.filter((_x, n) => n !== i))} aria-label={`Remove the ${r.layer} filter ${r.key || i + 1}`}>
                Remove
              </button>
            </div>
          );
        })}
        <button type="button" onClick={() => setRows([...rows, { layer: 'metadata', key: '', value: '' }])}>
          Add key filter
        </button>
      </fieldset>

      {others.length > 0 ? (
        <div class="notice warn">
          <strong>Parameters this form does not know</strong>
          <ul>
            {others.map((k) => (
              <li key={k}>
                <code>
                  {k}={filter[k]}
                </code>{' '}
                {issueAt(error, k) ? <span class="field-error">{issueAt(error, k)}</span> : null}{' '}
                <button type="button" class="link" onClick={() => setOthers(others.filter((o) => o !== k))}>
                  Drop on apply
                </button>
              </li>
            ))}
          </ul>
        </div>
      ) : null}

      {issuesOf(error).length > 0 ? <ErrorNotice error={error} action="Filtering" /> : null}

      <div class="row">
        <button type="submit" class="primary">
          Apply filter
        </button>
        <button type="button" onClick={clear}>
          Clear
        </button>
      </div>
    </form>
  );
}

/** "Create dataset" from the current filter: one name, then the dataset's page. */
function CreateDatasetDialog({ filter, onClose }: { filter: EpisodeFilter; onClose: () => void }) {
  const { session } = useConsole();
  const [name, setName] = useState('');
  const create = useAction(() => session.client.datasets.create({ name: name.trim(), filter }));
  const nameErr = issueAt(create.error, 'name');
  const filterErr = issueAt(create.error, 'filter');
  return (
    <Confirm
      open
      title="Create a dataset from this filter"
      confirmLabel={create.busy ? 'Creating…' : 'Create dataset'}
      onCancel={onClose}
      onConfirm={() => {
        if (name.trim() === '' || create.busy) return;
        void create.run().then((ds) => {
          if (ds) navigate(`/datasets/${encodeURIComponent(ds.id)}`);
        });
      }}
    >
      <p class="small">
        Filter: <span class="mono">{describeFilter(filter)}</span>
      </p>
      <p class="muted small">The dataset stays live (its members follow the filter) until you snapshot it. A snapshot leaves out evaluation episodes unless the filter names an evaluation, and discarded ones unless it names an outcome.</p>
      <Field label="Dataset name" id="new-dataset-name" error={nameErr}>
        <input id="new-dataset-name" value={name} onInput={(e) => setName(e.currentTarget.value)} required maxLength={128} autoComplete="off" aria-invalid={nameErr ? true : undefined} />
      </Field>
      {filterErr ? <p class="field-error">{filterErr}</p> : null}
      <ErrorNotice error={create.error} action="Creating the dataset" />
    </Confirm>
  );
}
