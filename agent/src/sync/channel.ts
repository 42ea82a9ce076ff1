import { randomBytes } from 'node:crypto';
import { parseBoundedJson, SyncMessageSchema, type SyncMessage, type SyncRequest } from '@fleet/protocol';
import type { Logger } from 'pino';
import type { Scheduler, TimerHandle } from '../time.js';
import { UploadError } from '../errors.js';

/** What the uploader talks to the cloud through: the robot's MQTT link. */
export interface SyncTransport {
  readonly connected: boolean;
  /** Publishes on `…/sync/request` at QoS 1; rejects while disconnected. */
  publishSyncRequest(payload: string): Promise<void>;
}

export type GrantAnswer = Extract<SyncMessage, { type: 'grant' | 'deferral' }>;
export type AssignmentsMessage = Extract<SyncMessage, { type: 'assignments' }>;

interface Waiter {
  resolve: (answer: GrantAnswer) => void;
  reject: (err: Error) => void;
  timer: TimerHandle;
}

export function newReqId(): string {
  return `sreq_${randomBytes(12).toString('hex')}`;
}

/**
 * The request/answer side of `…/sync/request` and `…/sync`: a grant request waits for the grant
 * or deferral with its `req_id` (or its timeout); answers nobody waits for (late, or for another
 * process) are dropped. Messages are bounded and validated before anything reads them.
 */
export class SyncChannel {
  private readonly waiters = new Map<string, Waiter>();

  constructor(
    private readonly opts: {
      transport: SyncTransport;
      scheduler: Scheduler;
      logger: Logger;
      onAssignments: (msg: AssignmentsMessage) => void;
    },
  ) {}

  /** Parses one message from `…/sync`; a malformed one is logged and dropped. */
  handle(payload: Buffer): void {
    const bounded = parseBoundedJson(payload.toString('utf8'));
    if (!bounded.ok) {
      this.opts.logger.warn({ bytes: payload.length, reason: bounded.message }, 'dropped a sync message that is not bounded JSON');
      return;
    }
    const parsed = SyncMessageSchema.safeParse(bounded.value);
    if (!parsed.success) {
      this.opts.logger.warn({ issues: parsed.error.issues.slice(0, 5) }, 'dropped a malformed sync message');
      return;
    }
    const msg = parsed.data;
    if (msg.type === 'assignments') {
      this.opts.onAssignments(msg);
      return;
    }
    const waiter = this.waiters.get(msg.req_id);
    if (!waiter) {
      this.opts.logger.debug({ req_id: msg.req_id, type: msg.type }, 'sync answer nobody waits for (late or repeated); dropped');
      return;
    }
    this.settle(msg.req_id);
    waiter.resolve(msg);
  }

  /** Publishes a request that expects no correlated wait (assignments.request). */
  async send(request: SyncRequest): Promise<void> {
    await this.opts.transport.publishSyncRequest(JSON.stringify(request));
  }

  /** Publishes a grant request and resolves with its answer; rejects after `timeoutMs` or when the link drops. */
  request(request: Extract<SyncRequest, { type: 'grant.request' }>, timeoutMs: number, signal?: AbortSignal): Promise<GrantAnswer> {
    return new Promise<GrantAnswer>((resolve, reject) => {
      if (signal?.aborted) {
        reject(new UploadError('aborted', 'the attempt was cancelled'));
        return;
      }
      signal?.addEventListener(
        'abort',
        () => {
          if (this.settle(request.req_id)) reject(new UploadError('aborted', 'the attempt was cancelled'));
        },
        { once: true },
      );
      const timer = this.opts.scheduler.setTimeout(() => {
        if (!this.waiters.delete(request.req_id)) return;
        reject(new UploadError('grant_timeout', `no answer to the grant request within ${Math.round(timeoutMs / 1000)} s`));
      }, timeoutMs);
      this.waiters.set(request.req_id, { resolve, reject, timer });
      this.send(request).catch((err: unknown) => {
        if (!this.settle(request.req_id)) return;
        reject(new UploadError('link_down', `could not send the grant request: ${(err as Error).message}`));
      });
    });
  }

  /** The link dropped (or the uploader stops): every waiting request fails now instead of at its timeout. */
  failAll(code: string, message: string): void {
    for (const [reqId, w] of [...this.waiters]) {
      this.settle(reqId);
      w.reject(new UploadError(code, message));
    }
  }

  private settle(reqId: string): boolean {
    const w = this.waiters.get(reqId);
    if (!w) return false;
    this.opts.scheduler.clearTimeout(w.timer);
    this.waiters.delete(reqId);
    return true;
  }
}
