import { useState } from 'preact/hooks';
import type { SyncHealthRow } from '@fleet/client';
import type { Async } from '../ui/hooks.js';
import { ErrorNotice, Field, Link, Loading, Pill } from '../ui/components.js';
import { formatBytes, formatHoursToFull, plural } from '../ui/format.js';
import { Ago, Section } from './admin-shared.js';

const SHOWN = 100;

/** Most urgent first: the 72-hour alert, then the backlog (count, then bytes), then the id. */
export function byUrgency(a: SyncHealthRow, b: SyncHealthRow): number {
  return (
    b.unverified_over_72h - a.unverified_over_72h ||
    b.local_missing - a.local_missing ||
    b.unverified - a.unverified ||
    b.bytes_unverified - a.bytes_unverified ||
    a.robot_id.localeCompare(b.robot_id)
  );
}

function pressureTone(h: number | null | undefined): 'bad' | 'warn' | null {
  if (h === null || h === undefined) return null;
  if (h < 24) return 'bad';
  if (h < 72) return 'warn';
  return null;
}

/**
 * Per robot, what has not been verified at a destination yet; the robots past the 72-hour alert
 * come first and stand out. Filters (a robot, only robots with a backlog) are in the page URL.
 */
export function SyncHealth(props: {
  health: Async<SyncHealthRow[] | null>;
  names: ReadonlyMap<string, string>;
  filter: string;
  backlogOnly: boolean;
  onFilter(filter: string, backlogOnly: boolean): void;
}) {
  const { health, names, filter, backlogOnly } = props;
  const [all, setAll] = useState(false);
  const rows = health.data ?? [];
  const f = filter.trim().toLowerCase();
  const matching = rows
    .filter((r) => !backlogOnly || r.unverified > 0 || r.local_missing > 0)
    .filter((r) => !f || r.robot_id.toLowerCase().includes(f) || (names.get(r.robot_id) ?? '').toLowerCase().includes(f))
    .sort(byUrgency);
  const shown = all ? matching : matching.slice(0, SHOWN);
  const over72 = rows.filter((r) => r.unverified_over_72h > 0);
  const totals = rows.reduce((t, r) => ({ unverified: t.unverified + r.unverified, bytes: t.bytes + r.bytes_unverified, missing: t.missing + r.local_missing }), { unverified: 0, bytes: 0, missing: 0 });
  return (
    <Section title="Sync health per robot" id="health-title">
      <p class="muted small">
        Unverified: episodes reported and not verified at any destination yet (still only on the robot, or on the way). Over 72 h is the number to act on. Updated live as
        replicas sync and verify.
      </p>
      {health.error ? <ErrorNotice error={health.error} action="Loading the sync health" /> : null}
      {health.data === undefined && !health.error ? <Loading label="Loading sync health" /> : null}
      {health.data ? (
        <div class="health-summary" role="status" aria-live="polite">
          {over72.length > 0 ? (
            <Pill tone="bad">
              {plural(over72.length, 'robot')} with episodes unverified over 72 h
            </Pill>
          ) : (
            <Pill tone="ok">nothing unverified over 72 h</Pill>
          )}
          <span>
            {plural(totals.unverified, 'episode')} unverified ({formatBytes(totals.bytes)}) on {plural(rows.length, 'robot')}
          </span>
          {totals.missing > 0 ? <Pill tone="warn">{plural(totals.missing, 'episode')} lost on the robot before a verified sync</Pill> : null}
        </div>
      ) : null}
      {rows.length > 0 ? (
        <form class="filters" role="search" aria-label="Filter robots" onSubmit={(e) => e.preventDefault()}>
          <Field label="Robot" id="health-robot">
            <input id="health-robot" type="search" value={filter} placeholder="id or name" onInput={(e) => props.onFilter(e.currentTarget.value, backlogOnly)} />
          </Field>
          <label class="check">
            <input type="checkbox" checked={backlogOnly} onChange={(e) => props.onFilter(filter, e.currentTarget.checked)} /> Only robots with a backlog
          </label>
        </form>
      ) : null}
      {health.data && rows.length === 0 ? <p class="empty">No robot has reported an episode yet.</p> : null}
      {health.data && rows.length > 0 && matching.length === 0 ? <p class="empty">No robot matches these filters.</p> : null}
      {shown.length > 0 ? (
        <div class="table-wrap">
          <table class="health">
            <thead>
              <tr>
                <th scope="col">Robot</th>
                <th scope="col" class="num">
                  Unverified
                </th>
                <th scope="col" class="num">
                  Over 72 h
                </th>
                <th scope="col" class="num">
                  Bytes unverified
                </th>
                <th scope="col" class="num">
                  Local missing
                </th>
                <th scope="col">Disk full in</th>
                <th scope="col" class="num hide-narrow">
                  Free
                </th>
                <th scope="col" class="num hide-narrow">
                  Backlog
                </th>
                <th scope="col" class="num hide-narrow">
                  Reported
                </th>
              </tr>
            </thead>
            <tbody>
              {shown.map((r) => {
                const tone = pressureTone(r.pressure?.hours_to_full);
                return (
                  <tr key={r.robot_id} data-robot-id={r.robot_id} class={r.unverified_over_72h > 0 ? 'alert-row' : ''}>
                    <th scope="row">
                      <Link to={`/robots/${encodeURIComponent(r.robot_id)}`}>{names.get(r.robot_id) ?? r.robot_id}</Link>
                      {names.has(r.robot_id) ? <div class="muted small mono">{r.robot_id}</div> : null}
                    </th>
                    <td class="num" data-col="unverified">
                      {r.unverified.toLocaleString()}
                    </td>
                    <td class="num" data-col="over72">
                      {r.unverified_over_72h > 0 ? <Pill tone="bad">{r.unverified_over_72h.toLocaleString()} over 72 h</Pill> : <span class="muted">0</span>}
                    </td>
                    <td class="num">{formatBytes(r.bytes_unverified)}</td>
                    <td class="num">{r.local_missing > 0 ? <Pill tone="warn">{r.local_missing.toLocaleString()}</Pill> : <span class="muted">0</span>}</td>
                    <td>
                      {r.pressure ? (
                        <>
                          {tone ? <Pill tone={tone}>{formatHoursToFull(r.pressure.hours_to_full)}</Pill> : formatHoursToFull(r.pressure.hours_to_full)}
                          <div class="muted small">
                            reported <Ago iso={r.pressure.reported_at} />
                          </div>
                        </>
                      ) : (
                        <span class="muted">not reported</span>
                      )}
                    </td>
                    <td class="num hide-narrow">{r.pressure ? formatBytes(r.pressure.free_bytes) : '–'}</td>
                    <td class="num hide-narrow">{r.pressure ? formatBytes(r.pressure.backlog_bytes) : '–'}</td>
                    <td class="num hide-narrow" data-col="reported">
                      {r.episodes_reported.toLocaleString()}
                    </td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        </div>
      ) : null}
      {matching.length > shown.length ? (
        <p>
          <button type="button" onClick={() => setAll(true)}>
            Show all {matching.length.toLocaleString()} robots
          </button>{' '}
          <span class="muted small">(the {SHOWN} most urgent are shown)</span>
        </p>
      ) : null}
    </Section>
  );
}
