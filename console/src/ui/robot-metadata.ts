import { FleetApiError } from '@fleet/client';
import { COMMAND_ARGS_LIMITS } from '@fleet/protocol/browser';

/**
 * The episode start form (POST /v1/robots/{id}/episodes/start): `{task_id?, subtask_id?,
 * metadata?}`, checked here the way the API checks it (docs/api.md: Robot commands, Basics) so a
 * mistake is shown at its field before anything is sent: ids of at most 256 characters, metadata
 * an object of unique keys whose values are text or JSON, within the bounds of a command's
 * arguments (nesting, keys per object, array length, no `__proto__`, 60 KiB).
 */

export interface MetadataRow {
  key: string;
  value: string;
  /** The value is JSON (a number, true, an object…) rather than text. */
  json: boolean;
}

export interface StartForm {
  taskId: string;
  subtaskId: string;
  rows: MetadataRow[];
}

export interface StartBody {
  task_id?: string;
  subtask_id?: string;
  metadata?: Record<string, unknown>;
}

/** Field ids of the form, where errors are shown. */
export const fieldIds = {
  taskId: 'episode-task-id',
  subtaskId: 'episode-subtask-id',
  key: (i: number) => `episode-meta-key-${i}`,
  value: (i: number) => `episode-meta-value-${i}`,
} as const;

// The bounds of a command's arguments, which the API applies to the body and the robot to what
// it receives (packages/protocol COMMAND_ARGS_LIMITS): the body is depth 1, `metadata` depth 2,
// so a value may nest 29 levels.
const MAX_ID = 256;
const MAX_DEPTH = COMMAND_ARGS_LIMITS.maxDepth;
const MAX_KEYS = 1000;
const MAX_ARRAY = 10_000;
const MAX_BODY_BYTES = COMMAND_ARGS_LIMITS.maxBytes;

function jsonProblem(v: unknown, depth: number): string | null {
  if (v === null || typeof v !== 'object') return null;
  if (depth > MAX_DEPTH) return `nests deeper than the API allows (${MAX_DEPTH - 2} levels in a value)`;
  if (Array.isArray(v)) {
    if (v.length > MAX_ARRAY) return `an array has more than ${MAX_ARRAY.toLocaleString()} items`;
    for (const x of v) {
      const p = jsonProblem(x, depth + 1);
      if (p) return p;
    }
    return null;
  }
  const keys = Object.keys(v);
  if (keys.length > MAX_KEYS) return `an object has more than ${MAX_KEYS.toLocaleString()} keys`;
  if (Object.hasOwn(v, '__proto__')) return 'must not contain a __proto__ key';
  const ctor = (v as Record<string, unknown>).constructor;
  if (Object.hasOwn(v, 'constructor') && ctor !== null && typeof ctor === 'object' && Object.hasOwn(ctor, 'prototype')) return 'must not contain constructor.prototype';
  for (const k of keys) {
    const p = jsonProblem((v as Record<string, unknown>)[k], depth + 1);
    if (p) return p;
  }
  return null;
}

/** The body to send, or the errors by field id (nothing is sent while there is one). */
export function buildStartBody(form: StartForm): { body: StartBody; errors: Record<string, string> } {
  const errors: Record<string, string> = {};
  const body: StartBody = {};
  const taskId = form.taskId.trim();
  const subtaskId = form.subtaskId.trim();
  if (taskId.length > MAX_ID) errors[fieldIds.taskId] = `at most ${MAX_ID} characters (${taskId.length} now)`;
  else if (taskId) body.task_id = taskId;
  if (subtaskId.length > MAX_ID) errors[fieldIds.subtaskId] = `at most ${MAX_ID} characters (${subtaskId.length} now)`;
  else if (subtaskId) body.subtask_id = subtaskId;

  const metadata: Record<string, unknown> = Object.create(null) as Record<string, unknown>;
  const seen = new Map<string, number>();
  let count = 0;
  form.rows.forEach((row, i) => {
    const key = row.key.trim();
    if (key === '' && row.value.trim() === '') return;
    if (key === '') {
      errors[fieldIds.key(i)] = 'a key is needed for this value';
      return;
    }
    if (key === '__proto__') {
      errors[fieldIds.key(i)] = 'the key __proto__ is not allowed';
      return;
    }
    const first = seen.get(key);
    if (first !== undefined) {
      errors[fieldIds.key(i)] = `the key ${key} is already used in row ${first + 1}`;
      return;
    }
    seen.set(key, i);
    let value: unknown = row.value;
    if (row.json) {
      try {
        value = JSON.parse(row.value) as unknown;
      } catch (err) {
        errors[fieldIds.value(i)] = `not valid JSON (${err instanceof Error ? err.message : String(err)})`;
        return;
      }
      const problem =
        key === 'constructor' && value !== null && typeof value === 'object' && Object.hasOwn(value, 'prototype') ? 'must not contain constructor.prototype' : jsonProblem(value, 3);
      if (problem) {
        errors[fieldIds.value(i)] = problem;
        return;
      }
    }
    count++;
    metadata[key] = value;
  });
  if (count > MAX_KEYS) errors[fieldIds.key(form.rows.length - 1)] = `at most ${MAX_KEYS.toLocaleString()} metadata keys`;
  if (count > 0) body.metadata = { ...metadata };
  if (Object.keys(errors).length === 0 && new TextEncoder().encode(JSON.stringify(body)).length > MAX_BODY_BYTES) {
    errors[fieldIds.value(Math.max(0, form.rows.length - 1))] = `the request would be larger than ${MAX_BODY_BYTES / 1024} KiB`;
  }
  return { body, errors };
}

/**
 * Errors of a 400 answer placed at their fields: the API's issues carry a JSON Pointer
 * (`/task_id`, `/metadata/<key>`); one that names no field of the form stays with the form.
 */
export function errorsFromApi(err: unknown, form: StartForm): { fields: Record<string, string>; rest: boolean } {
  const fields: Record<string, string> = {};
  if (!(err instanceof FleetApiError) || err.code !== 'validation_failed') return { fields, rest: true };
  const issues = err.details?.issues;
  if (!Array.isArray(issues)) return { fields, rest: true };
  let rest = false;
  for (const issue of issues as { path?: unknown; message?: unknown }[]) {
    const path = typeof issue.path === 'string' ? issue.path : '';
    const message = typeof issue.message === 'string' ? issue.message : err.message;
    const parts = path.split('/').slice(1).map((p) => p.replace(/~1/g, '/').replace(/~0/g, '~'));
    let id: string | undefined;
    if (parts[0] === 'task_id') id = fieldIds.taskId;
    else if (parts[0] === 'subtask_id') id = fieldIds.subtaskId;
    else if (parts[0] === 'metadata' && parts[1] !== undefined) {
      const i = form.rows.findIndex((r) => r.key.trim() === parts[1]);
      if (i >= 0) id = fieldIds.value(i);
    }
    if (id) fields[id] = message;
    else rest = true;
  }
  return { fields, rest };
}
