import type { ComponentChildren } from 'preact';
import { useState } from 'preact/hooks';
import { FleetApiError } from '@fleet/client';
import { Confirm, ErrorNotice, Field, Loading, PageHeader, SecretOnce } from './components.js';
import { useAction, type Async } from './hooks.js';

/**
 * The resource-page kit: the shapes every administration page (API keys, enrollment tokens,
 * webhooks, destinations, routing rules) is built from. A list with its loading, error and empty
 * states; a create form whose fields show the API's 400 issues; a secret shown once after the
 * create; a confirmation (typed, where asked) before a destructive action. A page keeps only what
 * is its own: its columns' cells, its form's fields, its texts.
 */

/**
 * The message of the 400 issue at `pointer` (a JSON Pointer such as `/match/task_id`) or below
 * it, for display at its field.
 */
export function fieldIssue(error: unknown, pointer: string): string | undefined {
  if (!(error instanceof FleetApiError) || error.code !== 'validation_failed') return undefined;
  const issues = error.details?.issues;
  if (!Array.isArray(issues)) return undefined;
  for (const i of issues as { path?: unknown; message?: unknown }[]) {
    const path = typeof i.path === 'string' ? i.path : Array.isArray(i.path) ? `/${i.path.join('/')}` : '';
    if (path === pointer || path.startsWith(`${pointer}/`)) return typeof i.message === 'string' ? i.message : 'invalid';
  }
  return undefined;
}

/** A secret to show once: what it is (the panel's title) and its value. */
export interface Secret {
  label: string;
  value: string;
}

/** Whether the create form is open, and the secret the last create returned (until dismissed). */
export interface CreateFlow<S extends Secret> {
  adding: boolean;
  secret: S | null;
  /** Opens the form (and puts away a secret still shown). */
  start: () => void;
  cancel: () => void;
  /** Closes the form and runs `after`; `secret`, when the create returned one, is shown until `done`. */
  created: (secret?: S) => void;
  /** Shows a secret without a create (a rotated one). */
  show: (secret: S) => void;
  done: () => void;
}

/** `after` runs once a create succeeded (reload the list). */
export function useCreateFlow<S extends Secret = Secret>(after: () => void): CreateFlow<S> {
  const [adding, setAdding] = useState(false);
  const [secret, setSecret] = useState<S | null>(null);
  return {
    adding,
    secret,
    start: () => (setAdding(true), setSecret(null)),
    cancel: () => setAdding(false),
    created: (s) => {
      setAdding(false);
      setSecret(s ?? null);
      after();
    },
    show: setSecret,
    done: () => setSecret(null),
  };
}

/**
 * A page's header with its create button (while the form is closed and the feature is on), and
 * `notice` (the feature is missing) under it when it is off.
 */
export function ResourceHeader<S extends Secret>({ title, createLabel, flow, enabled, notice }: { title: string; createLabel: string; flow: CreateFlow<S>; enabled: boolean; notice: ComponentChildren }) {
  return (
    <>
      <PageHeader title={title}>
        {enabled && !flow.adding ? (
          <button type="button" class="primary" onClick={flow.start}>
            {createLabel}
          </button>
        ) : null}
      </PageHeader>
      {enabled ? null : notice}
    </>
  );
}

/** The secret of `flow`, shown once with what to do with it (`children`) and a button to put it away. */
export function SecretPanel<S extends Secret>({ flow, children }: { flow: CreateFlow<S>; children?: (secret: S) => ComponentChildren }) {
  const s = flow.secret;
  if (!s) return null;
  return (
    <div>
      <SecretOnce label={s.label} secret={s.value} />
      {children?.(s)}
      <button type="button" onClick={flow.done}>
        Done, I have stored it
      </button>
    </div>
  );
}

/**
 * A create form: its fields (`children`; each shows its API issue, see `fieldIssue`), the
 * create's error, submit and cancel. On a page of its own it is a panel with an h2; inside a
 * section (`inSection`) an h3.
 */
export function CreateForm<T>(props: {
  title: string;
  heading?: string;
  inSection?: boolean;
  create: { run: () => Promise<T | undefined>; busy: boolean; error: unknown };
  onCreated: (created: T) => void;
  onCancel: () => void;
  /** What failed, in the error's title: "Creating the key". */
  failed: string;
  submitLabel: string;
  busyLabel?: string;
  /** False keeps submit disabled (a required field is empty). */
  ready?: boolean;
  children: ComponentChildren;
}) {
  const { create } = props;
  const heading = props.heading ?? props.title;
  return (
    <form
      class={props.inSection ? 'create-form' : 'create-form panel'}
      aria-label={props.title}
      onSubmit={(e) => {
        e.preventDefault();
        void create.run().then((t) => t && props.onCreated(t));
      }}
    >
      {props.inSection ? <h3>{heading}</h3> : <h2>{heading}</h2>}
      {props.children}
      <ErrorNotice error={create.error} action={props.failed} />
      <div class="row">
        <button type="submit" class="primary" disabled={create.busy || props.ready === false}>
          {create.busy ? (props.busyLabel ?? 'Creating…') : props.submitLabel}
        </button>
        <button type="button" onClick={props.onCancel}>
          Cancel
        </button>
      </div>
    </form>
  );
}

/** A column heading: its text, or its text and class (`num`, `hide-narrow`). */
export type Column = string | readonly [label: string, cls: string];

/**
 * A list's states: the error of loading it and of the actions on it (then `notices`), a loading
 * line until the first answer, `empty` when the answer has no item, else `children` (its table).
 * `what` names the items in the texts ("Loading the keys", "Loading keys"). A `polled` list
 * (reloaded on a timer) shows no loading line under its error, so a failing poll does not flicker.
 */
export function ResourceList(props: {
  list: Async<unknown>;
  count: number;
  what: string;
  /** The loading line, when it is not "Loading <what>". */
  loading?: string;
  errors?: readonly (readonly [error: unknown, failed: string])[];
  notices?: ComponentChildren;
  empty?: ComponentChildren;
  /** The empty line as a panel of its own (on a page; not inside a section). */
  panel?: boolean;
  polled?: boolean;
  children: ComponentChildren;
}) {
  const { list } = props;
  const loading = list.loading && list.data === undefined && !(props.polled && list.error);
  const empty = props.empty !== undefined && props.empty !== null && props.empty !== false;
  return (
    <>
      <ErrorNotice error={list.error} action={`Loading the ${props.what}`} />
      {(props.errors ?? []).map(([error, failed]) => (
        <ErrorNotice key={failed} error={error} action={failed} />
      ))}
      {props.notices}
      {loading ? <Loading label={props.loading ?? `Loading ${props.what}`} /> : null}
      {list.data && props.count === 0 && empty ? <p class={props.panel ? 'empty panel' : 'empty'}>{props.empty}</p> : null}
      {props.count > 0 ? props.children : null}
    </>
  );
}

/** A list's table: `columns`, then (with `actions`) a last column of buttons whose heading only screen readers read; `children` are its rows. */
export function ResourceTable(props: { name: string; columns: readonly Column[]; actions?: string; children: ComponentChildren }) {
  return (
    <div class="table-wrap">
      <table class={props.name}>
        <thead>
          <tr>
            {props.columns.map((c) =>
              typeof c === 'string' ? (
                <th key={c} scope="col">
                  {c}
                </th>
              ) : (
                <th key={c[0]} scope="col" class={c[1]}>
                  {c[0]}
                </th>
              ),
            )}
            {props.actions ? (
              <th scope="col">
                <span class="sr-only">{props.actions}</span>
              </th>
            ) : null}
          </tr>
        </thead>
        <tbody>{props.children}</tbody>
      </table>
    </div>
  );
}

/** The first cell of a row: the item's name (`children`) with its id under it. */
export function NameCell({ id, children }: { id: string; children: ComponentChildren }) {
  return (
    <td>
      {children}
      <div class="muted small mono">{id}</div>
    </td>
  );
}

/** A create form's field choosing one of `options`. */
export function SelectField<V extends string>(props: { label: string; id: string; value: V; options: readonly { value: V; label: string }[]; onChange: (value: V) => void; error?: string | undefined }) {
  return (
    <Field label={props.label} id={props.id} error={props.error}>
      <select id={props.id} value={props.value} onChange={(e) => props.onChange(e.currentTarget.value as V)}>
        {props.options.map((o) => (
          <option key={o.value} value={o.value}>
            {o.label}
          </option>
        ))}
      </select>
    </Field>
  );
}

/**
 * A create form's HTTPS endpoint field (a webhook's, a grant provider's), its hint and the API's
 * error under it; with `describeError`, screen readers read the error with the field.
 */
export function UrlField(props: { label: string; id: string; hint: string; placeholder: string; value: string; onInput: (value: string) => void; error: string | undefined; describeError?: boolean }) {
  const { id, error } = props;
  return (
    <Field label={props.label} id={id} error={error} hint={props.hint}>
      <input
        id={id}
        type="url"
        required
        placeholder={props.placeholder}
        value={props.value}
        onInput={(e) => props.onInput(e.currentTarget.value)}
        aria-invalid={error ? true : undefined}
        aria-describedby={error && props.describeError ? `${id}-error ${id}-hint` : `${id}-hint`}
      />
    </Field>
  );
}

/** The codes of a list (scopes, events) as a row of tags. */
export function CodeTags({ codes }: { codes: readonly string[] }) {
  return (
    <ul class="tags">
      {codes.map((c) => (
        <li key={c}>
          <code>{c}</code>
        </li>
      ))}
    </ul>
  );
}

/** "Show revoked …" under a list that hides some of its items; nothing while none is hidden. */
export function ShowHidden({ count, checked, onChange, children }: { count: number; checked: boolean; onChange: (checked: boolean) => void; children: string }) {
  if (count <= 0) return null;
  return (
    <label class="check small">
      <input type="checkbox" checked={checked} onChange={(e) => onChange(e.currentTarget.checked)} /> {children} ({count})
    </label>
  );
}

/** A destructive action waiting for its confirmation: the item it is asked for, and its outcome. */
export interface Destructive<T> {
  item: T | null;
  ask: (item: T) => void;
  cancel: () => void;
  confirm: () => void;
  busy: boolean;
  error: unknown;
}

/**
 * `act` on an item once the user confirmed it (see `ConfirmAction`); `after` runs when it
 * succeeded (reload the list).
 */
export function useDestructive<T>(act: (item: T) => Promise<unknown>, after: (item: T) => void): Destructive<T> {
  const [item, setItem] = useState<T | null>(null);
  const action = useAction((t: T) => act(t).then(() => true));
  return {
    item,
    ask: setItem,
    cancel: () => setItem(null),
    confirm: () => {
      const t = item;
      setItem(null);
      if (t !== null) void action.run(t).then((ok) => ok && after(t));
    },
    busy: action.busy,
    error: action.error,
  };
}

/**
 * The confirmation of a destructive action, saying what it does to its item (`children`); with
 * `typed`, the user types that text (the item's name) to confirm.
 */
export function ConfirmAction<T>(props: { action: Destructive<T>; title: string; confirmLabel: string; danger?: boolean; typed?: (item: T) => string; children: (item: T) => ComponentChildren }) {
  const { action } = props;
  const item = action.item;
  return (
    <Confirm
      open={item !== null}
      title={props.title}
      confirmLabel={props.confirmLabel}
      danger={props.danger}
      {...(props.typed && item !== null ? { typed: props.typed(item) } : {})}
      onCancel={action.cancel}
      onConfirm={action.confirm}
    >
      {item !== null ? props.children(item) : null}
    </Confirm>
  );
}
