import type { ComponentChildren, JSX } from 'preact';
import { useEffect, useRef, useState } from 'preact/hooks';
import { FleetApiError, FleetConnectionError } from '@fleet/client';
import { href, navigate } from '../router.js';
import { issueAt } from './episodes-filter.js';

/** An in-console link: a real `<a href>` (open in a new tab works), navigation without a reload. */
export function Link(props: { to: string; children: ComponentChildren; class?: string; 'aria-label'?: string }) {
  const target = href(props.to);
  const onClick = (e: MouseEvent) => {
    if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
    e.preventDefault();
    navigate(target);
  };
  return (
    <a href={target} onClick={onClick} class={props.class} aria-label={props['aria-label']}>
      {props.children}
    </a>
  );
}

/**
 * Any failure as the API gave it: its message, code and request_id (what support asks for).
 * A 403 names the missing scope or feature.
 */
export function ErrorNotice({ error, action }: { error: unknown; action?: string }) {
  if (error === undefined || error === null) return null;
  let title = action ? `${action} failed` : 'Something went wrong';
  let lines: ComponentChildren[] = [];
  if (error instanceof FleetApiError) {
    lines = [<span>{error.message}</span>];
    const d = error.details ?? {};
    if (error.code === 'insufficient_scope' && typeof d.required_scope === 'string') lines.push(<span> This needs the scope <code>{d.required_scope}</code>.</span>);
    if (error.code === 'entitlement_required' && typeof d.feature === 'string') lines.push(<span> Your plan lacks the feature <code>{d.feature}</code>.</span>);
    title = `${title}: ${error.code === 'http_error' ? `HTTP ${error.status}` : error.code}`;
    return (
      <div class="notice error" role="alert">
        <strong>{title}</strong>
        <p>{lines}</p>
        {error.requestId ? <p class="muted small">request_id <code>{error.requestId}</code></p> : null}
      </div>
    );
  }
  if (error instanceof FleetConnectionError) lines = [<span>The cloud could not be reached ({error.message}). Check the connection and try again.</span>];
  else lines = [<span>{error instanceof Error ? error.message : typeof error === 'string' ? error : JSON.stringify(error)}</span>];
  return (
    <div class="notice error" role="alert">
      <strong>{title}</strong>
      <p>{lines}</p>
    </div>
  );
}

/**
 * The error of one field (`name`, or a nested `metadata.task` / `filter.robot_id`) from the
 * `details.issues` of a 400, whose paths are JSON Pointers (`/metadata/task`).
 */
export function fieldError(error: unknown, field: string): string | undefined {
  return issueAt(error, ...field.split('.'));
}

export function Loading({ label = 'Loading' }: { label?: string }) {
  return (
    <p class="muted" role="status" aria-live="polite">
      {label}…
    </p>
  );
}

export function PageHeader({ title, children }: { title: string; children?: ComponentChildren }) {
  useEffect(() => {
    document.title = `${title} · Fleet console`;
  }, [title]);
  return (
    <header class="page-header">
      <h1>{title}</h1>
      {children ? <div class="page-actions">{children}</div> : null}
    </header>
  );
}

/** A labelled input; `error` is shown under it and linked for screen readers. */
export function Field(props: { label: string; id: string; error?: string | undefined; hint?: string; children: ComponentChildren }) {
  return (
    <div class={`field${props.error ? ' has-error' : ''}`}>
      <label for={props.id}>{props.label}</label>
      {props.children}
      {props.hint ? <span class="muted small" id={`${props.id}-hint`}>{props.hint}</span> : null}
      {props.error ? (
        <span class="field-error" id={`${props.id}-error`} role="alert">
          {props.error}
        </span>
      ) : null}
    </div>
  );
}

/**
 * A modal confirmation (the native `<dialog>`: focus trapped, Escape cancels). With `typed`, the
 * user must type that text to confirm (de-enrolling a robot).
 */
export function Confirm(props: {
  open: boolean;
  title: string;
  children?: ComponentChildren;
  confirmLabel: string;
  danger?: boolean;
  typed?: string;
  onConfirm: () => void;
  onCancel: () => void;
}) {
  const ref = useRef<HTMLDialogElement>(null);
  const [text, setText] = useState('');
  useEffect(() => {
    const d = ref.current;
    if (!d) return;
    if (props.open && !d.open) {
      setText('');
      d.showModal();
    } else if (!props.open && d.open) d.close();
  }, [props.open]);
  const ok = props.typed === undefined || text === props.typed;
  return (
    <dialog ref={ref} onCancel={(e) => (e.preventDefault(), props.onCancel())} aria-labelledby="confirm-title">
      <form
        method="dialog"
        onSubmit={(e) => {
          e.preventDefault();
          if (ok) props.onConfirm();
        }}
      >
        <h2 id="confirm-title">{props.title}</h2>
        {props.children}
        {props.typed !== undefined ? (
          <Field label={`Type ${props.typed} to confirm`} id="confirm-typed">
            <input id="confirm-typed" value={text} onInput={(e) => setText(e.currentTarget.value)} autoComplete="off" />
          </Field>
        ) : null}
        <div class="row">
          <button type="button" onClick={props.onCancel}>
            Cancel
          </button>
          <button type="submit" class={props.danger ? 'danger' : 'primary'} disabled={!ok}>
            {props.confirmLabel}
          </button>
        </div>
      </form>
    </dialog>
  );
}

/** A secret shown once (`dsec_`, `whsec_`, a new API key) with a copy button. */
export function SecretOnce({ label, secret }: { label: string; secret: string }) {
  const [copied, setCopied] = useState(false);
  return (
    <div class="notice secret" role="status">
      <strong>{label}</strong>
      <p>Copy it now: it is shown only once and cannot be read again.</p>
      <div class="row">
        <code class="secret-value" data-secret>
          {secret}
        </code>
        <button
          type="button"
          onClick={() => {
            navigator.clipboard?.writeText(secret).then(
              () => setCopied(true),
              () => setCopied(false),
            );
          }}
        >
          {copied ? 'Copied' : 'Copy'}
        </button>
      </div>
    </div>
  );
}

/** A button the key's scopes do not allow: disabled, saying which scope it needs. */
export function ScopedButton(props: JSX.ButtonHTMLAttributes<HTMLButtonElement> & { allowed: boolean; why: string }) {
  const { allowed, why, children, ...rest } = props;
  return (
    <button type="button" {...rest} disabled={!allowed || Boolean(rest.disabled)} title={allowed ? (rest.title) : why}>
      {children}
      {allowed ? null : <span class="sr-only"> ({why})</span>}
    </button>
  );
}

export function Pill({ tone, children }: { tone: 'ok' | 'warn' | 'bad' | 'idle' | 'info'; children: ComponentChildren }) {
  return <span class={`pill ${tone}`}>{children}</span>;
}

/** One row of a `KvTable`: `name` is the row's header cell, `value` its value cell. */
export interface KvRow {
  key: string;
  name: ComponentChildren;
  value: ComponentChildren;
}

/**
 * A two-column table of names and values: a caption for screen readers, column headers, a row
 * header per name. `wrap` puts it in the scrolling `.table-wrap` (long values); `valueClass` marks
 * the value cells.
 */
export function KvTable({ caption, rows, columns = ['Key', 'Value'], wrap = true, valueClass }: { caption: string; rows: KvRow[]; columns?: [string, string]; wrap?: boolean; valueClass?: string }) {
  const table = (
    <table class="kv">
      <caption class="sr-only">{caption}</caption>
      <thead>
        <tr>
          <th scope="col">{columns[0]}</th>
          <th scope="col">{columns[1]}</th>
        </tr>
      </thead>
      <tbody>
        {rows.map((r) => (
          <tr key={r.key}>
            <th scope="row">{r.name}</th>
            <td class={valueClass}>{r.value}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
  return wrap ? <div class="table-wrap">{table}</div> : table;
}

/** Key–value facts, as a definition list. */
export function Facts({ items }: { items: [string, ComponentChildren][] }) {
  return (
    <dl class="facts">
      {items.map(([k, v]) => (
        <div key={k}>
          <dt>{k}</dt>
          <dd>{v}</dd>
        </div>
      ))}
    </dl>
  );
}
