import { z } from 'zod';

/**
 * What the operator (headset, buttons, the simulator's scripted operator) has set on the robot.
 * Episodes are stamped from this, never from API bodies (spec, Robot commands).
 */
export const OPERATOR_CONTEXT_KEYS = [
  'task_id',
  'task_name',
  'subtask_id',
  'subtask_name',
  'operator_id',
  'operator_name',
  'control_mode',
  'policy_version_id',
  'eval_id',
  'session_name',
] as const;
export type OperatorContextKey = (typeof OPERATOR_CONTEXT_KEYS)[number];

/** Every key present; null when unset. */
export type OperatorContext = Record<OperatorContextKey, string | null>;

const value = z.string().min(1).max(256).nullable().optional();

/** A change to the context: a string sets a key, null clears it, an absent key stays as it is. */
export const OperatorContextPatchSchema = z.strictObject({
  task_id: value,
  task_name: value,
  subtask_id: value,
  subtask_name: value,
  operator_id: value,
  operator_name: value,
  control_mode: value,
  policy_version_id: value,
  eval_id: value,
  session_name: value,
});
export type OperatorContextPatch = z.infer<typeof OperatorContextPatchSchema>;

export function emptyOperatorContext(): OperatorContext {
  return Object.fromEntries(OPERATOR_CONTEXT_KEYS.map((k) => [k, null])) as OperatorContext;
}

/** Each name describes the id beside it. */
const NAME_OF_ID = [
  ['task_id', 'task_name'],
  ['subtask_id', 'subtask_name'],
  ['operator_id', 'operator_name'],
] as const satisfies readonly (readonly [OperatorContextKey, OperatorContextKey])[];

/**
 * The context after `patch`. A name belongs to its id: a patch that changes an id without giving
 * its name clears the name, so `context set --task-id stack-blocks` on a robot whose operator had
 * set "Fold a towel" does not stamp episodes of stack-blocks as "Fold a towel".
 */
export function applyContextPatch(current: OperatorContext, patch: OperatorContextPatch): OperatorContext {
  const next = { ...current };
  for (const key of OPERATOR_CONTEXT_KEYS) {
    const v = patch[key];
    if (v !== undefined) next[key] = v;
  }
  for (const [id, name] of NAME_OF_ID) {
    if (patch[id] !== undefined && patch[name] === undefined && patch[id] !== current[id]) next[name] = null;
  }
  return next;
}
