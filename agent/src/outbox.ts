import { MAX_OUTBOX_MESSAGE_BYTES, OUTBOX_BATCH_MAX, OutboxAckBatchSchema, OutboxAckSchema, outboxBatchPayload, parseBoundedJson, type Clock, type OutboxAck } from '@fleet/protocol';
import type { Logger } from 'pino';
import type { OutboxRow, OutboxStore } from './store/types.js';
import type { Scheduler, TimerHandle } from './time.js';

/** What the sender publishes through: the robot's MQTT link. */
export interface OutboxTransport {
  /** True while a message can be published. */
  readonly connected: boolean;
  /** Publishes on the robot's outbox topic at QoS 1; resolves at the broker's PUBACK (not an acknowledgment). */
  publishOutbox(payload: string): Promise<void>;
}

export interface OutboxSenderOptions {
  store: OutboxStore;
  transport: OutboxTransport;
  clock: Clock;
  scheduler: Scheduler;
  logger: Logger;
  /** Most messages published and not yet acknowledged (default 32). */
  maxInFlight?: number;
  /** A message not acknowledged this long after it was published is published again (default 30 s). */
  ackTimeoutMs?: number;
}

export const DEFAULT_OUTBOX_MAX_IN_FLIGHT = 32;
export const DEFAULT_OUTBOX_ACK_TIMEOUT_MS = 30_000;

/** `{"batch":[` and `]}` around a batch's messages. */
const BATCH_FRAME_BYTES = outboxBatchPayload([]).length;

/** The counts `fleet-agent status` shows. */
export interface OutboxStatus {
  /** Waiting for the cloud's acknowledgment (sent or not). */
  pending: number;
  /** Refused by the cloud for good; kept, never resent. */
  refused: number;
}

/** What the sender has published since it started: messages, and the publishes that carried them. */
export interface OutboxSendCounts {
  messages: number;
  publishes: number;
}

interface InFlight {
  msgId: string;
  seq: number;
  payload: string;
  timer: TimerHandle | undefined;
}

/**
 * The wire form of an outbox message. `msg_id` is the first field, so the cloud can name even a
 * message too large to parse; the stored body is spliced in as it is (never re-serialized).
 */
export function outboxPayload(row: Pick<OutboxRow, 'msgId' | 'kind' | 'bodyJson'>): string {
  return `{"msg_id":${JSON.stringify(row.msgId)},"kind":${JSON.stringify(row.kind)},"body":${row.bodyJson}}`;
}

/**
 * Sends the durable outbox to the cloud (docs/architecture.md, The robot link). While the link is up it
 * publishes pending messages in creation order with at most `maxInFlight` unacknowledged at a
 * time, so a backlog drains steadily; each acknowledgment frees a slot for the next message.
 * A message is published again when no acknowledgment came within `ackTimeoutMs`, and every
 * pending message is published again after each reconnect (acknowledgments sent while the robot
 * was away are lost with its clean session). `ok: true` settles a message as acked; `ok: false`
 * settles it as refused with the cloud's reason: it is logged and never sent again, and the
 * messages after it go on; `ok: false` with `retry_after_s` ("not now") keeps it pending and holds
 * it back for that many seconds, then sends it again. Nothing is removed from the store until it is settled, so a stop or a
 * crash leaves the pending messages for the next start. Once the cloud says it takes batches
 * (`batch_max` on its acknowledgments), one publish carries several messages and the cloud answers
 * them in one; each message is still settled, timed out and resent on its own (a resend goes alone).
 */
export class OutboxSender {
  private readonly inFlight = new Map<string, InFlight>();
  /** Highest seq published since the last (re)connect: the pump continues after it. */
  private cursor = 0;
  /** Changes at every (re)connect and disconnect; work begun under another one is dropped. */
  private generation = 0;
  private online = false;
  private stopped = false;
  private pumping = false;
  private again = false;
  private retryTimer: TimerHandle | undefined;
  /**
   * Messages the cloud answered "not now" (`ok: false` with `retry_after_s`): held back until their
   * timer fires. Kept across reconnects, so a reconnect does not resend them early.
   */
  private readonly held = new Map<string, TimerHandle>();
  private readonly ops = new Set<Promise<unknown>>();
  private cached: OutboxStatus = { pending: 0, refused: 0 };
  /**
   * The most messages one publish carries: 1 until the cloud says it takes batches (`batch_max`
   * on an acknowledgment), and back to 1 at every connect and at every acknowledgment without it
   * (an older cloud, or an older replica of a cloud being upgraded, answered).
   */
  private batchMax = 1;
  private readonly sends: OutboxSendCounts = { messages: 0, publishes: 0 };
  private readonly maxInFlight: number;
  private readonly ackTimeoutMs: number;

  constructor(private readonly opts: OutboxSenderOptions) {
    this.maxInFlight = opts.maxInFlight ?? DEFAULT_OUTBOX_MAX_IN_FLIGHT;
    this.ackTimeoutMs = opts.ackTimeoutMs ?? DEFAULT_OUTBOX_ACK_TIMEOUT_MS;
    if (!Number.isInteger(this.maxInFlight) || this.maxInFlight < 1) throw new RangeError('maxInFlight must be a positive integer');
  }

  /** Counts as of the last change the sender made or was told about. */
  get status(): OutboxStatus {
    return { ...this.cached };
  }

  /** Messages and publishes so far (a publish carries several messages once the cloud takes batches). */
  get sendCounts(): OutboxSendCounts {
    return { ...this.sends };
  }

  /** Messages published and not yet acknowledged in this connection. */
  get inFlightCount(): number {
    return this.inFlight.size;
  }

  /** Loads the counts; call once before use. */
  async start(): Promise<void> {
    await this.refreshCounts();
  }

  /** The link is up (subscribed to the acknowledgments): publish everything pending, from the oldest. */
  connected(): void {
    if (this.stopped) return;
    this.reset();
    this.online = true;
    // Whoever answers on this connection says again whether it takes batches.
    this.batchMax = 1;
    if (this.cached.pending > 0) this.opts.logger.info({ pending: this.cached.pending }, 'sending the outbox');
    this.kick();
  }

  /** The link is down: forget what was in flight (it is all sent again at the next connect). */
  disconnected(): void {
    this.online = false;
    this.reset();
  }

  /** A message was enqueued (an episode finalized). */
  notify(): void {
    if (this.stopped) return;
    this.track(this.refreshCounts()).catch((err: unknown) => this.opts.logger.warn({ err }, 'could not count the outbox'));
    this.kick();
  }

  /**
   * An acknowledgment from `…/outbox/ack`: one (`{msg_id, ok, ...}`) or a batch of them
   * (`{acks: [...]}`, the answer to a batch). Malformed ones are logged and dropped; unknown ids are ignored.
   */
  handleAck(payload: Buffer): void {
    if (this.stopped) return;
    let acks: OutboxAck[];
    try {
      const bounded = parseBoundedJson(payload.toString('utf8'));
      if (!bounded.ok) throw new Error(bounded.message);
      const isBatch = typeof bounded.value === 'object' && bounded.value !== null && 'acks' in bounded.value;
      const parsed = isBatch ? OutboxAckBatchSchema.safeParse(bounded.value) : OutboxAckSchema.safeParse(bounded.value);
      if (!parsed.success) {
        this.opts.logger.warn({ issues: parsed.error.issues.slice(0, 5) }, 'dropped malformed outbox ack');
        return;
      }
      acks = 'acks' in parsed.data ? parsed.data.acks : [parsed.data];
    } catch {
      this.opts.logger.warn({ bytes: payload.length }, 'dropped malformed outbox ack (not JSON)');
      return;
    }
    // Half the window at most: two batches in flight keep the link busy while one is answered.
    for (const ack of acks) this.batchMax = Math.max(1, Math.min(ack.batch_max ?? 1, OUTBOX_BATCH_MAX, Math.floor(this.maxInFlight / 2)));
    // A batch's acknowledgments are settled together and the freed slots refilled once, so the
    // next publish carries as many messages as were answered (not one per settled message).
    this.track(Promise.all(acks.map((ack) => this.settle(ack))))
      .then((kicks) => {
        if (kicks.some(Boolean)) this.kick();
      })
      .catch((err: unknown) => this.opts.logger.error({ err, msg_ids: acks.map((a) => a.msg_id) }, 'could not record an outbox ack'));
  }

  /** Stops sending and waits for running store work; pending messages stay for the next start. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.online = false;
    this.reset();
    if (this.retryTimer !== undefined) this.opts.scheduler.clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
    for (const timer of this.held.values()) this.opts.scheduler.clearTimeout(timer);
    this.held.clear();
    while (this.ops.size > 0) await Promise.allSettled([...this.ops]);
  }

  /** Records one acknowledgment; says whether slots were freed or counts changed (the caller refills then). */
  private async settle(ack: OutboxAck): Promise<boolean> {
    const { store, clock, logger } = this.opts;
    if (!ack.ok && ack.retry_after_s !== undefined) {
      this.holdBack(ack.msg_id, ack.retry_after_s, ack.error);
      return false;
    }
    // Settled for good (a late answer to an earlier send, say): no resend is waiting any more.
    const held = this.held.get(ack.msg_id);
    if (held !== undefined) {
      this.opts.scheduler.clearTimeout(held);
      this.held.delete(ack.msg_id);
    }
    const changed = await store.settle(
      ack.msg_id,
      ack.ok ? { state: 'acked' } : { state: 'refused', code: ack.error.code, message: ack.error.message },
      clock.now(),
    );
    // Known or not, a settled message needs no slot: free it (a late resend of an acked message
    // is acknowledged again and lands here with changed = false).
    const entry = this.inFlight.get(ack.msg_id);
    if (entry) this.release(entry);
    if (!changed) {
      logger.debug({ msg_id: ack.msg_id, ok: ack.ok }, 'ack for a message that is not pending; ignored');
    } else if (ack.ok) {
      logger.debug({ msg_id: ack.msg_id }, 'outbox message acknowledged');
    } else {
      logger.warn({ msg_id: ack.msg_id, code: ack.error.code, reason: ack.error.message }, 'the cloud refused an outbox message; it is kept and never sent again');
    }
    if (changed) await this.refreshCounts();
    return Boolean(entry || changed);
  }

  /**
   * "Not now": the message stays pending and is sent again after `retryAfterS` (on the injected
   * scheduler); its slot goes to the next message meanwhile. Only a message this sender has in
   * flight is held; an answer for anything else is ignored like any ack for an unknown id.
   */
  private holdBack(msgId: string, retryAfterS: number, error: { code: string; message: string }): void {
    const entry = this.inFlight.get(msgId);
    if (!entry) {
      this.opts.logger.debug({ msg_id: msgId }, '"retry later" for a message not in flight; ignored');
      return;
    }
    this.release(entry);
    const previous = this.held.get(msgId);
    if (previous !== undefined) this.opts.scheduler.clearTimeout(previous);
    this.opts.logger.info({ msg_id: msgId, code: error.code, reason: error.message, retry_after_s: retryAfterS }, 'the cloud asked to send an outbox message again later');
    this.held.set(
      msgId,
      this.opts.scheduler.setTimeout(() => this.releaseHeld(msgId, entry), retryAfterS * 1000),
    );
    this.kick();
  }

  private releaseHeld(msgId: string, entry: InFlight): void {
    this.held.delete(msgId);
    // Offline: the next connect sends every pending message from the oldest, this one included.
    if (this.stopped || !this.canSend() || this.inFlight.has(msgId)) return;
    const fresh: InFlight = { msgId, seq: entry.seq, payload: entry.payload, timer: undefined };
    this.inFlight.set(msgId, fresh);
    this.track(this.publish([fresh], this.generation)).catch((err: unknown) => this.opts.logger.warn({ err, msg_id: msgId }, 'outbox resend failed'));
  }

  private release(entry: InFlight): void {
    if (entry.timer !== undefined) this.opts.scheduler.clearTimeout(entry.timer);
    entry.timer = undefined;
    this.inFlight.delete(entry.msgId);
  }

  private reset(): void {
    this.generation += 1;
    for (const entry of this.inFlight.values()) if (entry.timer !== undefined) this.opts.scheduler.clearTimeout(entry.timer);
    this.inFlight.clear();
    this.cursor = 0;
  }

  private canSend(): boolean {
    return this.online && !this.stopped && this.opts.transport.connected;
  }

  /** Runs the pump, or asks the running one to look again. */
  private kick(): void {
    if (this.stopped) return;
    this.again = true;
    if (this.pumping) return;
    this.pumping = true;
    void this.track(this.pump());
  }

  private async pump(): Promise<void> {
    try {
      while (this.again && !this.stopped) {
        this.again = false;
        await this.fill();
      }
    } catch (err) {
      // The store failed (a full disk, say): try again a little later rather than wait for an event.
      this.opts.logger.error({ err }, 'outbox pump failed; retrying');
      if (this.retryTimer === undefined && !this.stopped) {
        this.retryTimer = this.opts.scheduler.setTimeout(() => {
          this.retryTimer = undefined;
          this.kick();
        }, Math.min(this.ackTimeoutMs, 5_000));
      }
    } finally {
      // Same tick as the last check of `again`: a kick() after it starts a new pump.
      this.pumping = false;
    }
  }

  /** Publishes the next pending messages until `maxInFlight` are unacknowledged or none is left. */
  private async fill(): Promise<void> {
    while (this.canSend() && this.inFlight.size < this.maxInFlight) {
      // Batches: while messages are in flight (their answers or timeouts will call again), wait
      // until a whole batch's worth of slots is free. Refilling each freed slot at once would
      // send one message per publish for good once the window is full (each answer frees one).
      if (this.batchMax > 1 && this.inFlight.size > 0 && this.maxInFlight - this.inFlight.size < this.batchMax) return;
      const generation = this.generation;
      const rows = await this.opts.store.pending({ afterSeq: this.cursor, limit: this.maxInFlight - this.inFlight.size });
      // A reconnect meanwhile restarts from the oldest message.
      if (generation !== this.generation) continue;
      if (rows.length === 0) return;
      const batch: InFlight[] = [];
      for (const row of rows) {
        this.cursor = Math.max(this.cursor, row.seq);
        if (this.inFlight.has(row.msgId) || this.held.has(row.msgId)) continue;
        const entry: InFlight = { msgId: row.msgId, seq: row.seq, payload: outboxPayload(row), timer: undefined };
        this.inFlight.set(row.msgId, entry);
        batch.push(entry);
      }
      await this.publish(batch, generation);
    }
  }

  private async publish(batch: readonly InFlight[], generation: number): Promise<void> {
    const { store, clock, logger, transport } = this.opts;
    if (batch.length === 0) return;
    try {
      await store.markSent(
        batch.map((e) => e.msgId),
        clock.now(),
      );
    } catch (err) {
      // Only bookkeeping: sending matters more.
      logger.warn({ err }, 'could not note outbox attempts');
    }
    const live = batch.filter((entry) => generation === this.generation && this.inFlight.get(entry.msgId) === entry && this.canSend());
    for (const group of this.groups(live)) {
      const payload = group.length === 1 ? group[0]!.payload : outboxBatchPayload(group.map((e) => e.payload));
      this.sends.messages += group.length;
      this.sends.publishes += 1;
      transport.publishOutbox(payload).catch((err: unknown) => {
        // The ack timeout or the next reconnect sends them again.
        logger.debug({ err, msg_ids: group.map((e) => e.msgId) }, 'outbox publish failed');
      });
      for (const entry of group) entry.timer = this.opts.scheduler.setTimeout(() => this.timedOut(entry, generation), this.ackTimeoutMs);
    }
  }

  /**
   * The publishes that carry `entries`, in order: up to `batchMax` messages each and within the
   * cloud's size bound (a message too large for any batch goes alone, to be refused by its id).
   */
  private groups(entries: readonly InFlight[]): InFlight[][] {
    const out: InFlight[][] = [];
    let group: InFlight[] = [];
    let bytes = 0;
    for (const entry of entries) {
      const size = Buffer.byteLength(entry.payload) + 1;
      if (group.length > 0 && (group.length >= this.batchMax || bytes + size > MAX_OUTBOX_MESSAGE_BYTES - BATCH_FRAME_BYTES)) {
        out.push(group);
        group = [];
        bytes = 0;
      }
      group.push(entry);
      bytes += size;
    }
    if (group.length > 0) out.push(group);
    return out;
  }

  private timedOut(entry: InFlight, generation: number): void {
    entry.timer = undefined;
    if (this.stopped || generation !== this.generation || this.inFlight.get(entry.msgId) !== entry) return;
    if (!this.canSend()) return;
    this.opts.logger.info({ msg_id: entry.msgId, timeout_ms: this.ackTimeoutMs }, 'outbox message not acknowledged in time; sending it again');
    this.track(this.publish([entry], generation)).catch((err: unknown) => this.opts.logger.warn({ err, msg_id: entry.msgId }, 'outbox resend failed'));
  }

  private async refreshCounts(): Promise<void> {
    const c = await this.opts.store.counts();
    this.cached = { pending: c.pending, refused: c.refused };
  }

  private track<T>(p: Promise<T>): Promise<T> {
    this.ops.add(p);
    const done = () => this.ops.delete(p);
    p.then(done, done);
    return p;
  }
}
