import { useEffect, useRef, useState } from 'preact/hooks';
import type { Robot, SyncHealthRow } from '@fleet/client';
import { useConsole, useLiveEvent } from '../ui/context.js';
import { useAsync, useTicker } from '../ui/hooks.js';
import { ErrorNotice, Field, Link, Loading, PageHeader } from '../ui/components.js';
import { formatTime, plural, timeAgo } from '../ui/format.js';
import { replaceQuery } from '../router.js';
import { can, needs } from '../session.js';
import { WEBHOOK_EVENTS as EPISODE_EVENTS } from '@fleet/protocol/browser';
import {
  applyStatus,
  defaultOrder,
  FLEET_PAGE_SIZE,
  fleetQueryFrom,
  fleetSearch,
  isFiltered,
  listOptions,
  PRESSURE_CHOICES,
  RECORDING_STATES,
  robotStatusOf,
  type FleetQuery,
  type FleetSort,
} from '../ui/fleet-query.js';
import { Capabilities, DiskCell, LocalMissingCell, PresencePill, RecordingPill, UnverifiedCell } from './fleet-parts.js';

/** Episode events move sync-health counts; their rows are read again at most this often. */
const HEALTH_REFRESH_MS = 3000;
const SEARCH_DEBOUNCE_MS = 300;

interface FleetPage {
  robots: Robot[];
  cursor: string | null;
  prevCursor: string | null;
}

/**
 * Every robot of the organization, a page at a time: the filters, order and page are the API's
 * (GET /v1/robots), so a fleet of any size is never loaded whole; sync health is asked for the
 * robots of the page only. Rows follow `robot.status` events in place.
 */
export function FleetView({ query }: { query: URLSearchParams }) {
  const { session } = useConsole();
  const f = fleetQueryFrom(query);
  const health = can(session, 'data:read');
  const set = (patch: Partial<FleetQuery>) => replaceQuery(fleetSearch({ ...f, cursor: '', ...patch }));

  const list = useAsync(
    async (signal): Promise<FleetPage> => {
      const p = await session.client.robots.list(listOptions(f, signal));
      return { robots: p.robots, cursor: p.cursor, prevCursor: p.prev_cursor ?? null };
    },
    [f.q.trim(), f.connected, f.recordingState, f.hoursToFullBelow, f.sort, f.order, f.cursor],
  );

  // The rows as shown: the page as loaded, with live statuses applied.
  const [rows, setRows] = useState<Robot[]>([]);
  useEffect(() => setRows(list.data?.robots ?? []), [list.data]);
  useLiveEvent(['robot.status'], (e) => {
    const s = robotStatusOf(e.data);
    if (s) setRows((rs) => (rs.some((r) => r.id === s.robot_id) ? rs.map((r) => applyStatus(r, s)) : rs));
  });

  const ids = (list.data?.robots ?? []).map((r) => r.id);
  const healthRows = useAsync(
    async (signal): Promise<Map<string, SyncHealthRow> | null> => {
      if (!health || ids.length === 0) return null;
      const h = await session.client.syncHealth({ robotIds: ids, signal });
      return new Map(h.robots.map((r) => [r.robot_id, r]));
    },
    [health, ids.join(',')],
  );
  const refresh = useRef<ReturnType<typeof setTimeout> | null>(null);
  useEffect(() => () => void (refresh.current && clearTimeout(refresh.current)), []);
  useLiveEvent(health ? EPISODE_EVENTS : [], (e) => {
    if (refresh.current || typeof e.data.robot_id !== 'string' || !ids.includes(e.data.robot_id)) return;
    refresh.current = setTimeout(() => {
      refresh.current = null;
      healthRows.reload();
    }, HEALTH_REFRESH_MS);
  });

  const now = useTicker(1000);
  const h = healthRows.data ?? null;
  const alerting = h ? rows.filter((r) => (h.get(r.id)?.unverified_over_72h ?? 0) > 0) : [];
  const lowDisk = h ? rows.filter((r) => { const p = h.get(r.id)?.pressure; return p?.hours_to_full !== null && p?.hours_to_full !== undefined && p.hours_to_full < 24; }) : [];

  return (
    <section class="fleet">
      <PageHeader title="Fleet" />
      <Filters f={f} set={set} health={health} />
      {alerting.length > 0 ? (
        <div class="notice error fleet-alert" role="alert">
          <strong>
            {plural(alerting.length, 'robot')} on this page {alerting.length === 1 ? 'has' : 'have'} episodes unverified for more than 72 hours
          </strong>
          <p>
            {alerting.map((r, i) => (
              <span key={r.id}>
                {i > 0 ? ', ' : ''}
                <Link to={`/robots/${encodeURIComponent(r.id)}`}>{r.name}</Link> ({h!.get(r.id)!.unverified_over_72h.toLocaleString()})
              </span>
            ))}
            . Their recordings have reached no destination yet; check the robots' connectivity and the <Link to="/sync">sync</Link> page.
          </p>
        </div>
      ) : null}
      {lowDisk.length > 0 && f.hoursToFullBelow !== '24' ? (
        <div class="notice warn" role="status">
          <strong>{plural(lowDisk.length, 'robot')} on this page will fill its disk within 24 hours.</strong>{' '}
          <button type="button" class="link" onClick={() => set({ hoursToFullBelow: '24' })}>
            Show every such robot
          </button>
        </div>
      ) : null}
      {list.error ? (
        <div>
          <ErrorNotice error={list.error} action="Loading the robots" />
          <button type="button" onClick={() => list.reload()}>
            Try again
          </button>
        </div>
      ) : null}
      {healthRows.error ? <ErrorNotice error={healthRows.error} action="Loading sync health for these robots" /> : null}
      {list.data === undefined && !list.error ? <Loading label="Loading the robots" /> : null}
      {list.data !== undefined ? (
        rows.length === 0 ? (
          <Empty f={f} set={set} />
        ) : (
          <FleetTable rows={rows} health={health ? h : undefined} f={f} set={set} now={now} busy={list.loading} />
        )
      ) : null}
      {list.data !== undefined ? <Pager page={list.data} f={f} set={set} count={rows.length} /> : null}
    </section>
  );
}

function Filters({ f, set, health }: { f: FleetQuery; set: (p: Partial<FleetQuery>) => void; health: boolean }) {
  // The search box is typed into: the URL (and the request) follow once typing pauses.
  const [text, setText] = useState(f.q);
  const pending = useRef<ReturnType<typeof setTimeout> | null>(null);
  useEffect(() => {
    if (!pending.current) setText(f.q);
  }, [f.q]);
  useEffect(() => () => void (pending.current && clearTimeout(pending.current)), []);
  const onSearch = (v: string) => {
    setText(v);
    if (pending.current) clearTimeout(pending.current);
    pending.current = setTimeout(() => {
      pending.current = null;
      set({ q: v });
    }, SEARCH_DEBOUNCE_MS);
  };
  return (
    <form
      class="filters fleet-filters"
      role="search"
      aria-label="Filter robots"
      onSubmit={(e) => {
        e.preventDefault();
        if (pending.current) clearTimeout(pending.current);
        pending.current = null;
        set({ q: text });
      }}
    >
      <Field label="Search by name" id="fleet-q">
        <input id="fleet-q" type="search" value={text} maxLength={128} placeholder="name contains…" autoComplete="off" onInput={(e) => onSearch(e.currentTarget.value)} />
      </Field>
      <Field label="Connection" id="fleet-connected">
        <select id="fleet-connected" value={f.connected} onChange={(e) => set({ connected: e.currentTarget.value as FleetQuery['connected'] })}>
          <option value="">Any</option>
          <option value="true">Online</option>
          <option value="false">Offline</option>
        </select>
      </Field>
      <Field label="Recording state" id="fleet-state">
        <select id="fleet-state" value={f.recordingState} onChange={(e) => set({ recordingState: e.currentTarget.value as FleetQuery['recordingState'] })}>
          <option value="">Any</option>
          {RECORDING_STATES.map((s) => (
            <option key={s} value={s}>
              {s}
            </option>
          ))}
        </select>
      </Field>
      <Field label="Disk" id="fleet-pressure" {...(health ? {} : { hint: needs('data:read') })}>
        <select
          id="fleet-pressure"
          value={f.hoursToFullBelow}
          disabled={!health}
          aria-describedby={health ? undefined : 'fleet-pressure-hint'}
          onChange={(e) => set({ hoursToFullBelow: e.currentTarget.value })}
        >
          <option value="">Any</option>
          {PRESSURE_CHOICES.map((c) => (
            <option key={c.hours} value={c.hours}>
              {c.label}
            </option>
          ))}
        </select>
      </Field>
      <Field label="Sort by" id="fleet-sort">
        <select id="fleet-sort" value={`${f.sort}:${f.order}`} onChange={(e) => {
          const [sort, order] = e.currentTarget.value.split(':') as [FleetSort, 'asc' | 'desc'];
          set({ sort, order });
        }}>
          <option value="name:asc">Name, A to Z</option>
          <option value="name:desc">Name, Z to A</option>
          <option value="last_seen_at:desc">Last seen, most recent first</option>
          <option value="last_seen_at:asc">Last seen, longest ago first</option>
          <option value="id:asc">Robot id, ascending</option>
          <option value="id:desc">Robot id, descending</option>
        </select>
      </Field>
      {isFiltered(f) ? (
        <button type="button" onClick={() => (setText(''), set({ q: '', connected: '', recordingState: '', hoursToFullBelow: '' }))}>
          Clear filters
        </button>
      ) : null}
    </form>
  );
}

function SortHeader({ label, sort, f, set, class: cls }: { label: string; sort: FleetSort; f: FleetQuery; set: (p: Partial<FleetQuery>) => void; class?: string }) {
  const active = f.sort === sort;
  const next = active ? (f.order === 'asc' ? 'desc' : 'asc') : defaultOrder(sort);
  return (
    <th scope="col" class={cls} aria-sort={active ? (f.order === 'asc' ? 'ascending' : 'descending') : 'none'}>
      <button type="button" onClick={() => set({ sort, order: next })}>
        {label}
        <span aria-hidden="true" class="fleet-sort-mark">
          {active ? (f.order === 'asc' ? ' ▲' : ' ▼') : ' ↕'}
        </span>
        <span class="sr-only">, sort {next === 'asc' ? 'ascending' : 'descending'}</span>
      </button>
    </th>
  );
}

function FleetTable(props: { rows: Robot[]; health: Map<string, SyncHealthRow> | null | undefined; f: FleetQuery; set: (p: Partial<FleetQuery>) => void; now: number; busy: boolean }) {
  const { rows, health, f, set, now } = props;
  const showHealth = health !== undefined;
  return (
    <div class="table-wrap" aria-busy={props.busy}>
      <table class="fleet-table">
        <caption class="sr-only">Robots{isFiltered(f) ? ' matching the filters' : ''}, sorted by {f.sort === 'last_seen_at' ? 'last seen' : f.sort}</caption>
        <thead>
          <tr>
            <SortHeader label="Name" sort="name" f={f} set={set} />
            <SortHeader label="Robot id" sort="id" f={f} set={set} class="hide-narrow" />
            <th scope="col">Status</th>
            <SortHeader label="Last seen" sort="last_seen_at" f={f} set={set} class="hide-narrow" />
            <th scope="col">Recording</th>
            <th scope="col" class="hide-narrow">Capabilities</th>
            {showHealth ? (
              <>
                <th scope="col">Unverified</th>
                <th scope="col">Disk</th>
                <th scope="col" class="num hide-narrow" title="episodes whose files disappeared from the robot before a verified sync">
                  Local missing
                </th>
              </>
            ) : null}
          </tr>
        </thead>
        <tbody>
          {rows.map((r) => {
            const hr = health?.get(r.id);
            const alert = (hr?.unverified_over_72h ?? 0) > 0;
            return (
              <tr key={r.id} class={alert ? 'fleet-alert-row' : undefined} data-robot-id={r.id}>
                <th scope="row" class="fleet-name">
                  <Link to={`/robots/${encodeURIComponent(r.id)}`}>{r.name}</Link>
                  <code class="fleet-id-narrow muted small" title={r.id}>{r.id}</code>
                </th>
                <td class="hide-narrow">
                  <code>{r.id}</code>
                </td>
                <td>
                  <PresencePill robot={r} now={now} />
                </td>
                <td class="hide-narrow">
                  {r.connected ? (
                    <span title={r.last_seen_at ? formatTime(r.last_seen_at) : undefined}>now</span>
                  ) : (
                    <time dateTime={r.last_seen_at ?? undefined} title={formatTime(r.last_seen_at)}>
                      {timeAgo(r.last_seen_at, now)}
                    </time>
                  )}
                </td>
                <td>
                  <RecordingPill state={r.recording_state} />
                </td>
                <td class="hide-narrow">
                  <Capabilities list={r.capabilities} />
                </td>
                {showHealth ? (
                  <>
                    <td>{health === null ? <span class="muted">…</span> : <UnverifiedCell row={hr} />}</td>
                    <td>{health === null ? <span class="muted">…</span> : <DiskCell row={hr} />}</td>
                    <td class="num hide-narrow">{health === null ? <span class="muted">…</span> : <LocalMissingCell row={hr} />}</td>
                  </>
                ) : null}
              </tr>
            );
          })}
        </tbody>
      </table>
    </div>
  );
}

function Empty({ f, set }: { f: FleetQuery; set: (p: Partial<FleetQuery>) => void }) {
  if (isFiltered(f)) {
    return (
      <p class="empty panel">
        No robot matches these filters{f.cursor ? ' on this page' : ''}.{' '}
        <button type="button" class="link" onClick={() => set({ q: '', connected: '', recordingState: '', hoursToFullBelow: '' })}>
          Clear the filters
        </button>
      </p>
    );
  }
  if (f.cursor) {
    return (
      <p class="empty panel">
        No robots on this page.{' '}
        <button type="button" class="link" onClick={() => set({})}>
          Back to the first page
        </button>
      </p>
    );
  }
  return (
    <p class="empty panel">
      No robot is enrolled yet. Robots enroll with a token from the <Link to="/tokens">Enrollment</Link> page (<code>fleet-agent enroll</code>).
    </p>
  );
}

function Pager({ page, f, set, count }: { page: FleetPage; f: FleetQuery; set: (p: Partial<FleetQuery>) => void; count: number }) {
  if (!page.cursor && !page.prevCursor && !f.cursor) return count > 0 ? <p class="muted small">{plural(count, 'robot')}</p> : null;
  return (
    <nav class="fleet-pager" aria-label="Pages of robots">
      <button type="button" onClick={() => set({ cursor: page.prevCursor ?? '' })} disabled={!page.prevCursor && !f.cursor}>
        ← Previous page
      </button>
      <span class="muted small">
        {plural(count, 'robot')} on this page ({FLEET_PAGE_SIZE} a page)
      </span>
      <button type="button" onClick={() => set({ cursor: page.cursor ?? '' })} disabled={!page.cursor}>
        Next page →
      </button>
    </nav>
  );
}
