import { z } from 'zod';
import { RecordingStateSchema } from './robot.js';
import { STREAM_EVENT_TYPES, type ROBOT_STATUS_EVENT } from './values.js';
import { WebhookPayloadSchema, type WebhookEvent, type WebhookPayload } from './webhooks.js';

/**
 * The event log as clients read it: `GET /v1/events/stream` (server-sent events) carries every
 * event of the log an API key may read. Episode events are the webhook events with the webhook's
 * payload, byte for byte; `robot.status` is logged when a robot's presence or recording state
 * changes and is never sent to webhooks.
 */
export { ROBOT_STATUS_EVENT, STREAM_EVENT_TYPES } from './values.js';
export type StreamEventType = (typeof STREAM_EVENT_TYPES)[number];
export const StreamEventTypeSchema = z.enum(STREAM_EVENT_TYPES);

/** The payload of `robot.status`: the robot's presence and recording state after the change. */
export const RobotStatusPayloadSchema = z
  .strictObject({
    schema_version: z.literal(1),
    robot_id: z.string().min(1),
    /** The robot's broker connection is up (its last status said online). */
    online: z.boolean(),
    /** Null until the robot reported one. */
    recording_state: RecordingStateSchema.nullable(),
    /** When the cloud last heard from the robot (ISO 8601). */
    last_seen_at: z.string().nullable(),
  })
  .meta({ id: 'RobotStatusEvent' });
export type RobotStatusPayload = z.infer<typeof RobotStatusPayloadSchema>;

/** One event of the stream: `id` is the event's id (`evt_…`), the id webhooks send as `X-Service-Event-Id`. */
export type StreamEvent =
  | { id: string; type: WebhookEvent; data: WebhookPayload }
  | { id: string; type: typeof ROBOT_STATUS_EVENT; data: RobotStatusPayload };

/** The `data` of any stream event (OpenAPI: the text/event-stream answer's schema). */
export const StreamEventDataSchema = z.union([WebhookPayloadSchema, RobotStatusPayloadSchema]);

export { EVENT_ID_PATTERN } from './values.js';
