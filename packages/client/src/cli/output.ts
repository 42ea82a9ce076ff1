import type { Writable } from 'node:stream';

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

/** Aligned columns; cells are cut at `maxWidth` characters so one long value does not wreck the table. */
export function formatTable<T>(rows: readonly T[], columns: readonly Column<T>[], maxWidth = 60): string {
  const cells = rows.map((r) => columns.map((c) => {
    const s = cell(c.value(r)).replace(/[\r\n\t]/g, ' ');
    return s.length > maxWidth ? `${s.slice(0, maxWidth - 1)}…` : s;
  }));
  const widths = columns.map((c, i) => Math.max(c.header.length, ...cells.map((r) => r[i]!.length)));
  const line = (vals: readonly string[]) => vals.map((v, i) => (i === vals.length - 1 ? v : v.padEnd(widths[i]!))).join('  ').trimEnd();
  return [line(columns.map((c) => c.header.toUpperCase())), ...cells.map(line)].join('\n') + '\n';
}

/** `key: value` lines for one resource. */
export function formatRecord(record: Record<string, unknown>): string {
  const keys = Object.keys(record);
  const width = Math.max(0, ...keys.map((k) => k.length));
  return keys.map((k) => `${k.padEnd(width)}  ${cell(record[k])}`).join('\n') + '\n';
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

  /** A confirmation: `{ok: true, ...}` with --json, the sentence otherwise. */
  done(sentence: string, body: Record<string, unknown> = {}): void {
    this.stdout.write(this.json ? `${JSON.stringify({ ok: true, ...body })}\n` : `${sentence}\n`);
  }

  /** Human notes (next cursor, warnings) go to stderr so stdout stays the data. */
  note(text: string): void {
    this.stderr.write(`${text}\n`);
  }
}
