import type { Writable } from 'node:stream';
import stringWidth from 'string-width';

/** Text from robots, tenants or the server, safe on a terminal: control characters become `?`. */
export function printable(v: unknown): string {
  let out = '';
  for (const ch of String(v)) {
    const c = ch.codePointAt(0)!;
    out += c < 0x20 || (c >= 0x7f && c <= 0x9f) ? '?' : ch;
  }
  return out;
}

const HOURS_PER_YEAR = 24 * 365;

/**
 * A disk's time to full (hours, from a robot's pressure report) as a person reads it: minutes or
 * hours up to two days, then days, and `> 1 year` beyond a year (a robot that barely writes
 * reports millions of hours; the number says nothing more). null: the backlog is not growing.
 */
export function formatHoursToFull(hours: number | null): string {
  if (hours === null) return 'not filling';
  if (!Number.isFinite(hours) || hours > HOURS_PER_YEAR) return '> 1 year';
  if (hours > 48) return `${Math.round(hours / 24)} days`;
  if (hours >= 1) return `${hours.toFixed(1)} h`;
  return `${Math.max(1, Math.round(hours * 60))} min`;
}

export interface Column<T> {
  header: string;
  value: (row: T) => unknown;
}

function cell(v: unknown): string {
  if (v === null || v === undefined) return '-';
  if (typeof v === 'string') return v;
  if (Array.isArray(v)) return v.map((x) => (typeof x === 'string' ? x : JSON.stringify(x))).join(',');
  if (typeof v === 'number' || typeof v === 'boolean' || typeof v === 'bigint') return String(v);
  return JSON.stringify(v) ?? '-';
}

/**
 * `text` padded with spaces to `width` terminal columns: a wide (CJK, emoji) character takes two,
 * a combining mark none (string-width), where `padEnd` counts UTF-16 code units.
 */
export function padToWidth(text: string, width: number): string {
  return text + ' '.repeat(Math.max(0, width - stringWidth(text)));
}

const graphemes = new Intl.Segmenter(undefined, { granularity: 'grapheme' });

/** `text` cut to at most `maxWidth` columns, ending with `…` when cut (never inside a character). */
function fitWidth(text: string, maxWidth: number): string {
  if (stringWidth(text) <= maxWidth) return text;
  let out = '';
  let width = 0;
  for (const { segment } of graphemes.segment(text)) {
    const w = stringWidth(segment);
    if (width + w > maxWidth - 1) break;
    out += segment;
    width += w;
  }
  return `${out}…`;
}

/** Aligned columns; cells are cut at `maxWidth` columns so one long value does not wreck the table. */
export function formatTable<T>(rows: readonly T[], columns: readonly Column<T>[], maxWidth = 60): string {
  const cells = rows.map((r) => columns.map((c) => fitWidth(cell(c.value(r)).replace(/[\r\n\t]/g, ' '), maxWidth)));
  const widths = columns.map((c, i) => Math.max(stringWidth(c.header), ...cells.map((r) => stringWidth(r[i]!))));
  const line = (vals: readonly string[]) => vals.map((v, i) => (i === vals.length - 1 ? v : padToWidth(v, widths[i]!))).join('  ').trimEnd();
  return [line(columns.map((c) => c.header.toUpperCase())), ...cells.map(line)].join('\n') + '\n';
}

/** `key: value` lines for one resource. */
export function formatRecord(record: Record<string, unknown>): string {
  const keys = Object.keys(record);
  const width = Math.max(0, ...keys.map((k) => stringWidth(k)));
  return keys.map((k) => `${padToWidth(k, width)}  ${cell(record[k])}`).join('\n') + '\n';
}

export class Output {
  constructor(
    readonly json: boolean,
    private readonly stdout: Writable,
    private readonly stderr: Writable,
  ) {}

  /** The API's JSON with --json, otherwise a table of `rows`. */
  list<T>(body: unknown, rows: readonly T[], columns: readonly Column<T>[]): void {
    if (this.json) this.stdout.write(`${JSON.stringify(body, null, 2)}\n`);
    else this.stdout.write(rows.length === 0 ? '(none)\n' : formatTable(rows, columns));
  }

  /** One resource: JSON, or `key: value` lines. */
  record(body: unknown): void {
    if (this.json || typeof body !== 'object' || body === null) this.stdout.write(`${JSON.stringify(body ?? null, null, 2)}\n`);
    else this.stdout.write(formatRecord(body as Record<string, unknown>));
  }

  /** JSON in either output form: an answer meant for a program, whose values a table would cut. */
  data(body: unknown): void {
    this.stdout.write(`${JSON.stringify(body ?? null, null, 2)}\n`);
  }

  /** A confirmation: `{ok: true, ...}` with --json, the sentence otherwise. */
  done(sentence: string, body: Record<string, unknown> = {}): void {
    this.stdout.write(this.json ? `${JSON.stringify({ ok: true, ...body })}\n` : `${sentence}\n`);
  }

  /** Human notes (next cursor, warnings) go to stderr so stdout stays the data. */
  note(text: string): void {
    this.stderr.write(`${text}\n`);
  }
}
