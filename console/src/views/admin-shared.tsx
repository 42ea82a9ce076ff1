import type { ComponentChildren } from 'preact';
import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import type { FEATURES, SCOPES, WebhookEvent } from '@fleet/protocol/browser';
import type { Session } from '../session.js';
import { Field } from '../ui/components.js';
import { SelectField } from '../ui/resource-page.js';
import { formatTime, timeAgo } from '../ui/format.js';

/**
 * Pieces shared by the administration pages (sync, webhooks, API keys, enrollment tokens, plan
 * and usage). Each list's descriptions are checked against @fleet/protocol's list (its zod-free
 * entry) by type: a scope, event or feature added there and not described here fails the build.
 */

/** In the order the key form lists them. */
const SCOPE_WHAT = {
  'robots:read': 'read robots and their status',
  'fleet:read': 'read the fleet (robots and their status)',
  'robots:command': 'send commands to robots',
  'data:read': 'read episodes, datasets and sync health',
  'data:write': 'annotate episodes, set outcomes, create datasets',
  admin: 'everything, including keys, webhooks, destinations and enrollment',
} as const satisfies Record<(typeof SCOPES)[number], string>;
export const SCOPE_INFO: readonly { scope: string; what: string }[] = Object.entries(SCOPE_WHAT).map(([scope, what]) => ({ scope, what }));

const WEBHOOK_EVENT_WHAT = {
  'episode.finalized': 'an episode was reported',
  'episode.synced': 'all its files reached a destination',
  'episode.verified': 'the uploaded bytes matched the checksums',
  'episode.failed': 'a transfer attempt failed',
  'episode.pruned': 'the robot deleted its local copy',
} as const satisfies Record<WebhookEvent, string>;
export const WEBHOOK_EVENT_INFO: readonly { event: string; what: string }[] = Object.entries(WEBHOOK_EVENT_WHAT).map(([event, what]) => ({ event, what }));

export const MATCH_FIELDS: readonly { field: string; label: string; hint: string }[] = [
  { field: 'robot_id', label: 'Robot id', hint: 'rbt_…' },
  { field: 'task_id', label: 'Task id', hint: '' },
  { field: 'recording_session_id', label: 'Recording session', hint: '' },
  { field: 'episode_seq', label: 'Episode number', hint: 'whole numbers' },
  { field: 'episode_id', label: 'Episode id', hint: 'ep_…' },
  { field: 'robot_platform', label: 'Robot platform', hint: '' },
];

export const FEATURE_INFO: Readonly<Record<string, string>> = {
  'api.access': 'API keys, enrollment tokens, robots, webhooks and usage',
  'api.robot_commands': 'robot commands other than the episode verbs',
  'data.metadata': 'episodes, datasets, destinations, routing rules and sync health',
} satisfies Record<(typeof FEATURES)[number], string>;

/** True unless the organization's plan turns `feature` off (then the routes answer 403). */
export function hasFeature(session: Session, feature: string): boolean {
  return session.features[feature] !== false;
}

export function FeatureMissing({ feature }: { feature: string }) {
  return (
    <div class="notice warn" role="status">
      <strong>Not in your plan</strong>
      <p>
        This needs the feature <code>{feature}</code> ({FEATURE_INFO[feature] ?? feature}), which your organization's plan (<code>tier</code> on the Plan and usage page) does
        not include.
      </p>
    </div>
  );
}

/** A time as "3 min ago", the exact time on hover and for screen readers in `datetime`. */
export function Ago({ iso, now, never = 'never' }: { iso: string | null | undefined; now?: number; never?: string }) {
  if (!iso) return <span class="muted">{never}</span>;
  return (
    <time dateTime={iso} title={formatTime(iso)}>
      {timeAgo(iso, now)}
    </time>
  );
}

/**
 * `fn` at most once every `ms`: the first call runs at once, calls within the window collapse
 * into one at its end (replica states arrive in bursts; each one would otherwise be a reload).
 */
export function useThrottled(fn: () => void, ms: number): () => void {
  const ref = useRef(fn);
  ref.current = fn;
  const last = useRef(0);
  const timer = useRef<ReturnType<typeof setTimeout> | null>(null);
  useEffect(
    () => () => {
      if (timer.current) clearTimeout(timer.current);
    },
    [],
  );
  return useCallback(() => {
    const wait = last.current + ms - Date.now();
    if (wait <= 0) {
      last.current = Date.now();
      ref.current();
      return;
    }
    if (timer.current) return;
    timer.current = setTimeout(() => {
      timer.current = null;
      last.current = Date.now();
      ref.current();
    }, wait);
  }, [ms]);
}

/** Previous/next over a keyset-paginated list whose cursor lives in the page URL. */
export function CursorPager({ cursor, next, onPage, label }: { cursor: string | null; next: string | null | undefined; onPage: (cursor: string | null) => void; label: string }) {
  if (!cursor && !next) return null;
  return (
    <nav class="pager" aria-label={`${label} pages`}>
      <button type="button" onClick={() => onPage(null)} disabled={!cursor}>
        First page
      </button>
      <button type="button" onClick={() => next && onPage(next)} disabled={!next}>
        Next page
      </button>
    </nav>
  );
}

/** A section of a page with its heading and, on the right, its actions. */
export function Section(props: { title: string; id: string; actions?: ComponentChildren; children: ComponentChildren }) {
  return (
    <section class="panel admin-section" aria-labelledby={props.id}>
      <div class="section-head">
        <h2 id={props.id}>{props.title}</h2>
        {props.actions ? <div class="row">{props.actions}</div> : null}
      </div>
      {props.children}
    </section>
  );
}

/** `datetime-local` input value → ISO 8601 (local time), or undefined when empty. */
export function localToIso(v: string): string | undefined {
  if (!v) return undefined;
  const d = new Date(v);
  return Number.isNaN(d.getTime()) ? undefined : d.toISOString();
}

/** A Date as a `datetime-local` input value, in local time. */
export function isoToLocal(d: Date): string {
  const p = (n: number) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}`;
}

/** A choice of the Expires list: `ms` from now, `date` (the date and time picked) or none (never). */
export interface ExpiryPreset {
  value: string;
  label: string;
  ms?: number;
}

export interface Expiry {
  expiry: string;
  setExpiry: (v: string) => void;
  date: string;
  setDate: (v: string) => void;
  /** The chosen expiry as ISO 8601, or undefined for never. */
  iso: () => string | undefined;
}

/** The expiry of a create form (a key's, a token's): `initial` chosen, the date picker `dateIn` ms ahead. */
export function useExpiry(presets: readonly ExpiryPreset[], initial: string, dateIn: number): Expiry {
  const [expiry, setExpiry] = useState(initial);
  const [date, setDate] = useState(() => isoToLocal(new Date(Date.now() + dateIn)));
  const iso = () => {
    const preset = presets.find((e) => e.value === expiry);
    if (preset?.ms) return new Date(Date.now() + preset.ms).toISOString();
    return expiry === 'date' ? localToIso(date) : undefined;
  };
  return { expiry, setExpiry, date, setDate, iso };
}

/**
 * The Expires list and, for `date`, the date and time picker, which shows the API's `error`;
 * `presetError` is shown at the list while a preset is chosen.
 */
export function ExpiryFields({ id, presets, state, error, presetError }: { id: string; presets: readonly ExpiryPreset[]; state: Expiry; error: string | undefined; presetError?: string | undefined }) {
  return (
    <>
      <SelectField label="Expires" id={id} value={state.expiry} options={presets} onChange={state.setExpiry} error={state.expiry === 'date' ? undefined : presetError} />
      {state.expiry === 'date' ? (
        <Field label="Expiry date and time (local)" id={`${id}-date`} error={error}>
          <input id={`${id}-date`} type="datetime-local" required value={state.date} onInput={(e) => state.setDate(e.currentTarget.value)} />
        </Field>
      ) : null}
    </>
  );
}

/**
 * A group of checkboxes choosing a set of codes (a key's scopes, a webhook's events), each with
 * a line saying what it means; the API's error for the whole list is shown under the group.
 */
export function CodeChecks(props: {
  legend: string;
  name: string;
  options: readonly { code: string; what: string }[];
  chosen: ReadonlySet<string>;
  onChange: (next: Set<string>) => void;
  error: string | undefined;
}) {
  return (
    <fieldset class="checks">
      <legend>{props.legend}</legend>
      {props.options.map((o) => (
        <label key={o.code} class="check">
          <input
            type="checkbox"
            name={props.name}
            value={o.code}
            checked={props.chosen.has(o.code)}
            onChange={(e) => {
              const next = new Set(props.chosen);
              if (e.currentTarget.checked) next.add(o.code);
              else next.delete(o.code);
              props.onChange(next);
            }}
          />{' '}
          <code>{o.code}</code> <span class="muted small">{o.what}</span>
        </label>
      ))}
      {props.error ? (
        <span class="field-error" role="alert">
          {props.error}
        </span>
      ) : null}
    </fieldset>
  );
}
