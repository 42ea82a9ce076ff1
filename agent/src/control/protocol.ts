import type { CommandRefusal } from '@fleet/protocol';
import { z } from 'zod';
import { OperatorContextPatchSchema } from '../context.js';

/**
 * The local control surface (headset, physical buttons, `fleet-agent episode|context|status`):
 * newline-delimited JSON over `<dataDir>/agent.sock`, one response line per request line, in
 * order. Episode verbs here run the same transitions as the cloud's commands.
 */
export const CONTROL_OPS = ['episode.start', 'episode.finish', 'episode.fail', 'episode.discard', 'context.set', 'context.get', 'status'] as const;
export type ControlOp = (typeof CONTROL_OPS)[number];

const id = z.union([z.string().max(128), z.number().int()]).optional();

export const ControlRequestSchema = z.discriminatedUnion('op', [
  z.object({ id, op: z.literal('episode.start') }),
  z.object({ id, op: z.literal('episode.finish') }),
  z.object({ id, op: z.literal('episode.fail') }),
  z.object({ id, op: z.literal('episode.discard') }),
  z.object({ id, op: z.literal('context.set'), context: OperatorContextPatchSchema }),
  z.object({ id, op: z.literal('context.get') }),
  z.object({ id, op: z.literal('status') }),
]);
export type ControlRequest = z.infer<typeof ControlRequestSchema>;

/** Same codes as command refusals, plus `bad_request` for a line that is not a valid request. */
export type ControlErrorCode = CommandRefusal | 'bad_request';

export type ControlResponse =
  | { id?: string | number; ok: true; result: Record<string, unknown> }
  | { id?: string | number; ok: false; error: { code: ControlErrorCode; message: string } };

/** Longest request line accepted. */
export const MAX_CONTROL_LINE = 64 * 1024;
