import { printable } from './output.js';

/** The command line or the local set-up is wrong; nothing was sent. Exit code 2. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}

/** A command ran and failed in its own terms (a code and a sentence). Exit code 1 unless said. */
export class CommandFailed extends Error {
  constructor(
    readonly code: string,
    message: string,
    readonly exitCode = 1,
  ) {
    super(message);
    this.name = 'CommandFailed';
  }
}

/** Most detail lines printed under an API error; the rest are counted. */
const MAX_DETAIL_LINES = 20;
const MAX_DETAIL_CHARS = 300;

function scalar(v: unknown): string {
  return typeof v === 'string' ? v : (JSON.stringify(v) ?? String(v));
}

/**
 * The `details` of an API error, one line each: a validation issue as `where: message (code)`
 * (its unknown keys listed), anything else as `key: value`. Server text is made printable and
 * cut to size.
 */
export function formatErrorDetails(details: Record<string, unknown> | undefined): string[] {
  if (!details) return [];
  const lines: string[] = [];
  for (const [key, value] of Object.entries(details)) {
    if (key === 'issues' && Array.isArray(value)) {
      for (const issue of value as unknown[]) {
        if (typeof issue !== 'object' || issue === null) {
          lines.push(scalar(issue));
          continue;
        }
        const i = issue as { location?: unknown; path?: unknown; code?: unknown; message?: unknown; keys?: unknown };
        const where = [i.location, i.path].filter((p) => typeof p === 'string' && p !== '').join(' ');
        const keys = Array.isArray(i.keys) && i.keys.length > 0 ? `: ${i.keys.map(scalar).join(', ')}` : '';
        const code = typeof i.code === 'string' ? ` (${i.code})` : '';
        lines.push(`${where === '' ? '' : `${where}: `}${scalar(i.message ?? 'invalid')}${keys}${code}`);
      }
    } else {
      lines.push(`${key}: ${scalar(value)}`);
    }
  }
  const cut = lines.map((l) => {
    const p = printable(l);
    return p.length > MAX_DETAIL_CHARS ? `${p.slice(0, MAX_DETAIL_CHARS - 1)}…` : p;
  });
  return cut.length > MAX_DETAIL_LINES ? [...cut.slice(0, MAX_DETAIL_LINES), `… ${cut.length - MAX_DETAIL_LINES} more`] : cut;
}
