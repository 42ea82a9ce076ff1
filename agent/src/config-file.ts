/**
 * The agent's config file (`/etc/fleet-agent/agent.yaml`): YAML, the convention of robot
 * software, checked with zod. Every setting of `fleet-agent start`'s flags has a snake_case key
 * here (`--upload-limit` is `upload_limit`); the `recorder` and `actions` sections say what is
 * robot-specific. Flags and FLEET_AGENT_* variables override the file; the file overrides the
 * defaults. Errors name the file, the line and the key, so `fleet-agent config check` and `start`
 * stop before connecting with something a person can act on.
 */
import { readFile } from 'node:fs/promises';
import { dirname, isAbsolute, resolve } from 'node:path';
import { isMap, isPair, isScalar, LineCounter, parseDocument, type Document } from 'yaml';
import { z } from 'zod';
import { AgentConfigSchema, type AgentConfigInput } from './config.js';
import type { ConfigProblem } from './config-errors.js';
import { ConfigFileError } from './errors.js';

export { DEFAULT_CONFIG_PATH, formatProblem, type ConfigProblem } from './config-errors.js';

/** Largest config file read: a config is a page of text, not data. */
const MAX_CONFIG_BYTES = 256 * 1024;

/** AgentConfig keys that are not settings a person writes (handed over by the CLI, or internal). */
const NOT_IN_FILE = new Set(['extraCaCertsFile', 'commandResultWindowMs', 'finalizeRetryMs', 'syncJitter']);

/** Keys whose value is a path: a relative one is taken relative to the config file's directory. */
const PATH_KEYS = new Set(['dataDir', 'uploadCaFile', 'socketPath']);

/** An AgentConfig key as the file writes it: `uploadLimit` is `upload_limit`. */
export const snake = (camel: string): string => camel.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
const camel = (snakeKey: string): string => snakeKey.replace(/_([a-z0-9])/g, (_m, c: string) => c.toUpperCase());

const baseShape = AgentConfigSchema.shape;
const fileShape: Record<string, z.ZodType> = {};
for (const [key, schema] of Object.entries(baseShape)) {
  if (NOT_IN_FILE.has(key)) continue;
  // Defaults belong to the merged config, not the file: an absent key leaves room for a flag.
  const inner = schema instanceof z.ZodDefault ? (schema.unwrap() as z.ZodType) : (schema as z.ZodType);
  fileShape[snake(key)] = inner.optional();
}

/** What the file may hold: every flag's setting under its snake_case name, all optional. */
export const AgentConfigFileSchema = z.strictObject(fileShape);

export interface LoadedConfigFile {
  path: string;
  /** The file's settings as AgentConfig input (camelCase), paths resolved against the file's directory. */
  input: Partial<AgentConfigInput>;
  /** The line of a key path, for problems found after parsing (a missing program). */
  lineOf(path: readonly (string | number)[]): number | undefined;
}

/**
 * Reads, parses and checks a config file. Throws ConfigFileError listing every problem (not only
 * the first): a YAML syntax error, a key the agent does not know, a value of the wrong type.
 */
export async function loadConfigFile(path: string): Promise<LoadedConfigFile> {
  let text: string;
  try {
    const buf = await readFile(path);
    if (buf.length > MAX_CONFIG_BYTES) throw new ConfigFileError([{ file: path, key: '', message: `larger than ${MAX_CONFIG_BYTES} bytes: not a config file` }]);
    text = buf.toString('utf8');
  } catch (err) {
    if (err instanceof ConfigFileError) throw err;
    throw new ConfigFileError([{ file: path, key: '', message: `cannot read: ${(err as NodeJS.ErrnoException).code ?? ''} ${(err as Error).message}`.trim() }]);
  }
  return parseConfigText(text, path);
}

/** The parsing half of loadConfigFile (tests hand it text). */
export function parseConfigText(text: string, path: string): LoadedConfigFile {
  const lines = new LineCounter();
  const doc = parseDocument(text, { lineCounter: lines, prettyErrors: false, uniqueKeys: true });
  const problems: ConfigProblem[] = [];
  for (const e of doc.errors) problems.push({ file: path, line: lines.linePos(e.pos[0]).line, key: '', message: e.message.split('\n')[0]! });
  if (problems.length > 0) throw new ConfigFileError(problems);
  const lineOf = (at: readonly (string | number)[]): number | undefined => lineOfPath(doc, lines, at.map(String));
  const raw: unknown = doc.toJS({ maxAliasCount: 100 }) ?? {};
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
    throw new ConfigFileError([{ file: path, line: 1, key: '', message: 'expected a mapping of settings (key: value), got ' + (Array.isArray(raw) ? 'a list' : typeof raw) }]);
  }
  const parsed = AgentConfigFileSchema.safeParse(raw);
  if (!parsed.success) {
    for (const issue of parsed.error.issues) {
      const at = issue.path.map(String);
      if (issue.code === 'unrecognized_keys') {
        for (const k of issue.keys) {
          const key = [...at, k].join('.');
          const hint = at.length === 0 ? closest(k, Object.keys(fileShape)) : undefined;
          problems.push({ file: path, line: lineOf([...at, k]), key, message: `unknown key${hint ? ` (did you mean ${hint}?)` : ''}` });
        }
      } else {
        const key = at.join('.');
        problems.push({ file: path, line: lineOf(at), key, message: issue.message });
      }
    }
    throw new ConfigFileError(problems);
  }
  const base = dirname(resolve(path));
  const input: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(parsed.data)) {
    if (v === undefined) continue;
    const key = camel(k);
    input[key] = PATH_KEYS.has(key) && typeof v === 'string' && !isAbsolute(v) ? resolve(base, v) : v;
  }
  return { path, input: input, lineOf };
}

/** The line where the value (or, for a missing one, the nearest existing parent) of `path` is written. */
function lineOfPath(doc: Document, lines: LineCounter, path: readonly string[]): number | undefined {
  let node: unknown = doc.contents;
  let line: number | undefined = undefined;
  for (const part of path) {
    if (isMap(node)) {
      const pair = node.items.find((p) => isPair(p) && isScalar(p.key) && String(p.key.value) === part);
      if (!pair) return line;
      const keyRange = isScalar(pair.key) ? pair.key.range : undefined;
      if (keyRange) line = lines.linePos(keyRange[0]).line;
      node = pair.value;
    } else if (node && typeof node === 'object' && 'items' in node && Array.isArray((node as { items: unknown[] }).items)) {
      const item = (node as { items: unknown[] }).items[Number(part)];
      const range = (item as { range?: [number, number, number] } | undefined)?.range;
      if (range) line = lines.linePos(range[0]).line;
      node = item;
    } else {
      return line;
    }
  }
  return line;
}

/** A known key one or two edits away from `key`, for "did you mean". */
function closest(key: string, known: readonly string[]): string | undefined {
  let best: { k: string; d: number } | undefined;
  for (const k of known) {
    const d = editDistance(key, k);
    if (d <= 2 && (!best || d < best.d)) best = { k, d };
  }
  return best?.k;
}

function editDistance(a: string, b: string): number {
  const row = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    let prev = row[0]!;
    row[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const cur = row[j]!;
      row[j] = Math.min(row[j]! + 1, row[j - 1]! + 1, prev + (a[i - 1] === b[j - 1] ? 0 : 1));
      prev = cur;
    }
  }
  return row[b.length]!;
}
