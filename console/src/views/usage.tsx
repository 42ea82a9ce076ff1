import { useState } from 'preact/hooks';
import { can } from '../session.js';
import { replaceQuery, useLocation } from '../router.js';
import { useConsole } from '../ui/context.js';
import { useAsync } from '../ui/hooks.js';
import { ErrorNotice, Field, Loading, PageHeader, Pill } from '../ui/components.js';
import { FEATURE_INFO, Section, hasFeature } from './admin-shared.js';

const DAY = 86_400_000;
const MAX_DAYS = 366;
/** Up to this many days the table has a column per day; beyond, a column per month. */
const DAILY_UP_TO = 31;

const LIMIT_INFO: Record<string, string> = {
  api_keys: 'active API keys',
  robots: 'enrolled robots',
  webhook_subscriptions: 'active webhook subscriptions',
  requests_per_minute_per_key: 'requests per minute, per key',
  requests_per_minute_per_org: 'requests per minute, whole organization',
};

function utcDay(t: number): string {
  return new Date(t).toISOString().slice(0, 10);
}

function daysBetween(from: string, to: string): string[] {
  const out: string[] = [];
  const a = Date.parse(`${from}T00:00:00Z`);
  const b = Date.parse(`${to}T00:00:00Z`);
  if (Number.isNaN(a) || Number.isNaN(b) || b < a) return out;
  for (let t = b; t >= a && out.length <= MAX_DAYS; t -= DAY) out.push(utcDay(t));
  return out;
}

/**
 * The plan (tier, features, limits) for any key; for admin keys, the meters per day over a date
 * range kept in the URL (UTC days, as the API counts them). A key without admin is not asked
 * for usage at all, so it never meets a 403 here.
 */
export function UsageView(_props: object) {
  const { session } = useConsole();
  const loc = useLocation();
  const admin = can(session, 'admin');
  const metered = admin && hasFeature(session, 'api.access');
  const today = utcDay(Date.now());
  const from = loc.query.get('from') ?? utcDay(Date.now() - 29 * DAY);
  const to = loc.query.get('to') ?? today;
  const ent = useAsync((signal) => session.client.entitlements({ signal }), []);
  const usage = useAsync((signal) => (metered ? session.client.usage({ from, to }, { signal }).then((u) => u.usage) : Promise.resolve(null)), [metered, from, to]);

  return (
    <>
      <PageHeader title="Plan and usage" />
      <ErrorNotice error={ent.error} action="Loading the plan" />
      {ent.loading && !ent.data ? <Loading label="Loading the plan" /> : null}
      {ent.data ? (
        <div class="grid-2">
          <Section title="Plan" id="plan-title">
            <p class="tier">
              Tier <strong class="tier-name">{ent.data.tier}</strong>
            </p>
            <h3>Features</h3>
            <ul class="features">
              {Object.entries(ent.data.features)
                .sort(([a], [b]) => a.localeCompare(b))
                .map(([f, on]) => (
                  <li key={f}>
                    <Pill tone={on ? 'ok' : 'idle'}>{on ? 'on' : 'off'}</Pill> <code>{f}</code> <span class="muted small">{FEATURE_INFO[f] ?? ''}</span>
                  </li>
                ))}
            </ul>
          </Section>
          <Section title="Limits" id="limits-title">
            <div class="table-wrap">
              <table class="limits">
                <thead>
                  <tr>
                    <th scope="col">Limit</th>
                    <th scope="col" class="num">
                      Value
                    </th>
                  </tr>
                </thead>
                <tbody>
                  {Object.entries(ent.data.limits)
                    .sort(([a], [b]) => a.localeCompare(b))
                    .map(([k, v]) => (
                      <tr key={k}>
                        <th scope="row">
                          {LIMIT_INFO[k] ?? k}
                          <div class="muted small mono">{k}</div>
                        </th>
                        <td class="num">{v.toLocaleString()}</td>
                      </tr>
                    ))}
                </tbody>
              </table>
            </div>
            <p class="muted small">
              Signed in as <strong>{ent.data.key.name}</strong> with {ent.data.key.scopes.join(', ')}
              {ent.data.key.expires_at ? `, expiring ${new Date(ent.data.key.expires_at).toLocaleString()}` : ''}.
            </p>
          </Section>
        </div>
      ) : null}
      {metered ? (
        <UsageTable
          key={`${from}/${to}`}
          from={from}
          to={to}
          today={today}
          rows={usage.data ?? undefined}
          error={usage.error}
          loading={usage.loading}
          onRange={(f, t) => {
            const q = new URLSearchParams(loc.query);
            q.set('from', f);
            q.set('to', t);
            replaceQuery(q);
          }}
        />
      ) : (
        <p class="muted">{admin ? null : <>Usage per day is shown to keys with the scope <code>admin</code>.</>}</p>
      )}
    </>
  );
}

function UsageTable(props: {
  from: string;
  to: string;
  today: string;
  rows: { meter: string; day: string; count: number }[] | undefined;
  error: unknown;
  loading: boolean;
  onRange(from: string, to: string): void;
}) {
  const [from, setFrom] = useState(props.from);
  const [to, setTo] = useState(props.to);
  const [formError, setFormError] = useState<string | null>(null);
  const days = daysBetween(props.from, props.to);
  const daily = days.length <= DAILY_UP_TO;
  const columns = daily ? days : [...new Set(days.map((d) => d.slice(0, 7)))];
  const byMeter = new Map<string, Map<string, number>>();
  for (const r of props.rows ?? []) {
    const col = daily ? r.day : r.day.slice(0, 7);
    let m = byMeter.get(r.meter);
    if (!m) byMeter.set(r.meter, (m = new Map<string, number>()));
    m.set(col, (m.get(col) ?? 0) + r.count);
  }
  const meters = [...byMeter.keys()].sort();
  const total = (m: string) => [...byMeter.get(m)!.values()].reduce((a, b) => a + b, 0);
  const colTotal = (c: string) => meters.reduce((a, m) => a + (byMeter.get(m)!.get(c) ?? 0), 0);
  const grand = meters.reduce((a, m) => a + total(m), 0);
  const submit = (e: Event) => {
    e.preventDefault();
    const n = daysBetween(from, to).length;
    if (!from || !to || n === 0) return setFormError('The first day must be on or before the last.');
    if (n > MAX_DAYS) return setFormError(`At most ${MAX_DAYS} days at a time.`);
    setFormError(null);
    props.onRange(from, to);
  };
  return (
    <Section title="Usage per day" id="usage-title">
      <p class="muted small">Each meter counts the successful answers of its routes (replays excluded), per UTC day.</p>
      <form class="filters" onSubmit={submit} aria-label="Date range">
        <Field label="From (UTC)" id="usage-from">
          <input id="usage-from" type="date" value={from} max={props.today} required onInput={(e) => setFrom(e.currentTarget.value)} />
        </Field>
        <Field label="To (UTC)" id="usage-to">
          <input id="usage-to" type="date" value={to} max={props.today} required onInput={(e) => setTo(e.currentTarget.value)} />
        </Field>
        <button type="submit">Show</button>
      </form>
      {formError ? (
        <p class="field-error" role="alert">
          {formError}
        </p>
      ) : null}
      <ErrorNotice error={props.error} action="Loading the usage" />
      {props.loading && props.rows === undefined ? <Loading label="Loading usage" /> : null}
      {props.rows && meters.length === 0 ? <p class="empty">Nothing metered between {props.from} and {props.to}.</p> : null}
      {meters.length > 0 ? (
        <>
          {!daily ? <p class="muted small">More than {DAILY_UP_TO} days: one column per month.</p> : null}
          <div class="table-wrap usage-wrap" tabIndex={0} role="region" aria-label="Usage per meter">
            <table class="usage">
              <caption class="sr-only">
                Metered counts per {daily ? 'day' : 'month'} from {props.from} to {props.to}, newest first
              </caption>
              <thead>
                <tr>
                  <th scope="col" class="sticky-col">
                    Meter
                  </th>
                  <th scope="col" class="num">
                    Total
                  </th>
                  {columns.map((c) => (
                    <th key={c} scope="col" class="num">
                      {daily ? c.slice(5) : c}
                    </th>
                  ))}
                </tr>
              </thead>
              <tbody>
                {meters.map((m) => (
                  <tr key={m}>
                    <th scope="row" class="sticky-col mono">
                      {m}
                    </th>
                    <td class="num strong">{total(m).toLocaleString()}</td>
                    {columns.map((c) => {
                      const v = byMeter.get(m)!.get(c);
                      return (
                        <td key={c} class={`num${v ? '' : ' muted'}`}>
                          {v ? v.toLocaleString() : '·'}
                        </td>
                      );
                    })}
                  </tr>
                ))}
              </tbody>
              <tfoot>
                <tr>
                  <th scope="row" class="sticky-col">
                    All meters
                  </th>
                  <td class="num strong">{grand.toLocaleString()}</td>
                  {columns.map((c) => {
                    const v = colTotal(c);
                    return (
                      <td key={c} class={`num${v ? '' : ' muted'}`}>
                        {v ? v.toLocaleString() : '·'}
                      </td>
                    );
                  })}
                </tr>
              </tfoot>
            </table>
          </div>
        </>
      ) : null}
    </Section>
  );
}
