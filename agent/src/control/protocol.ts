import type { CommandRefusal } from '@fleet/protocol';
import { z } from 'zod';
import { OperatorContextPatchSchema } from '../rules/operator-context.js';
import { EPISODE_ID_PATTERN } from '../ids.js';

/**
 * The local control surface (headset, physical buttons, `fleet-agent episode|context|status|metrics`):
 * newline-delimited JSON over `<dataDir>/agent.sock`, one response line per request line, in
 * order. Episode verbs here run the same transitions as the cloud's commands.
 */
export const CONTROL_OPS = ['episode.start', 'episode.finish', 'episode.fail', 'episode.discard', 'context.set', 'context.get', 'status', 'episodes.list', 'episodes.show', 'metrics'] as const;
export type ControlOp = (typeof CONTROL_OPS)[number];

/** Most episodes one `episodes.list` answers. */
export const MAX_EPISODES_LISTED = 1000;

const id = z.union([z.string().max(128), z.number().int()]).optional();

export const ControlRequestSchema = z.discriminatedUnion('op', [
  z.object({ id, op: z.literal('episode.start') }),
  z.object({ id, op: z.literal('episode.finish') }),
  z.object({ id, op: z.literal('episode.fail') }),
  z.object({ id, op: z.literal('episode.discard') }),
  z.object({ id, op: z.literal('context.set'), context: OperatorContextPatchSchema }),
  z.object({ id, op: z.literal('context.get') }),
  z.object({ id, op: z.literal('status') }),
  /** The newest episodes on this robot (the recording one first), with files and sync state. */
  z.object({ id, op: z.literal('episodes.list'), limit: z.number().int().min(1).max(MAX_EPISODES_LISTED).optional() }),
  z.object({ id, op: z.literal('episodes.show'), episode_id: z.string().regex(EPISODE_ID_PATTERN, 'not an episode id') }),
  /** Answers `{content_type, text}`: the outbox and upload figures in Prometheus text. */
  z.object({ id, op: z.literal('metrics') }),
]);
export type ControlRequest = z.infer<typeof ControlRequestSchema>;

/**
 * Same codes as command refusals, plus `bad_request` for a line that is not a valid request and
 * `not_found` for an episode this robot does not have.
 */
export type ControlErrorCode = CommandRefusal | 'bad_request' | 'not_found';

export type ControlResponse =
  | { id?: string | number; ok: true; result: Record<string, unknown> }
  | { id?: string | number; ok: false; error: { code: ControlErrorCode; message: string } };

/** Longest request line accepted. */
export const MAX_CONTROL_LINE = 64 * 1024;
