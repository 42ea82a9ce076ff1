import type { FastifyBaseLogger } from 'fastify';
import { every, type Clock, type Scheduler } from '@fleet/protocol';
import { ApiError } from '../errors.js';
import type { OpaqueIds } from '../opaque-ids.js';
import type { EventRow, Store } from '../store/index.js';
import { eventFrame, type SseConnection } from './sse.js';

export interface EventHubOptions {
  store: Pick<Store, 'events' | 'apiKeys'>;
  clock: Clock;
  scheduler: Scheduler;
  /** How often each organization with open streams reads the log. */
  pollMs: number;
  /** How often every open stream gets a comment line. */
  heartbeatMs: number;
  /** Open streams per organization; one more is refused (429 rate_limited). */
  maxStreamsPerOrg: number;
  logger: FastifyBaseLogger;
  /** Rows per read of the log, for the shared tail and each stream's catch-up (default 500). */
  pageSize?: number;
  /** Makes the wire ids of log positions (opaque handles: the log's ids count every organization's events). */
  ids: Pick<OpaqueIds, 'eventId'>;
}

/** What a stream passes on. */
export interface StreamFilter {
  /** The event types the stream carries (already cut to what its key may read). */
  types: ReadonlySet<string>;
  /** Only events that name this robot. */
  robotId: string | null;
}

/**
 * What let the stream open: an API key, checked again while the stream lasts, since a key is
 * checked on every request and a stream is one request that does not end.
 */
export interface StreamGrant {
  /** When the key expires (ms since the epoch), or null. */
  expiresAt: number | null;
  /** Reads the key and its organization again: may they still read what the stream carries? */
  recheck(): Promise<boolean>;
}

/** A row of the tail, its frame built once for every stream of the organization. */
interface TailEvent {
  id: number;
  type: string;
  robotId: string | null;
  frame: string;
}

/** The organization's tail of the log in this process, shared by its streams. */
interface OrgTail {
  orgId: string;
  /** The last log id read and handed to the live streams; valid once `ready`. */
  cursor: number;
  ready: boolean;
  /** The first read of where the log ends, awaited by the streams opening meanwhile. */
  started: Promise<void>;
  readonly streams: Set<EventStream>;
  pumping: boolean;
  /** Woken while reading: read again once this read is done. */
  again: boolean;
}

/**
 * One open stream: first it catches up from its own position with paged reads, then it goes
 * live and takes its share of what the tail reads. The switch happens in the same turn in which
 * the catch-up saw that it had reached the tail's cursor, and the tail moves its cursor and hands
 * the rows out in one turn, so no event falls between the two and none is sent twice (`pos`).
 */
export class EventStream {
  /** The last log id this stream has passed (sent, or not for it). */
  pos = 0;
  live = false;
  /** The auth revision its grant was last checked at (-1: not since it opened). */
  checkedAt = -1;

  constructor(
    private readonly hub: EventHub,
    readonly tail: OrgTail,
    readonly filter: StreamFilter,
    readonly conn: SseConnection,
    readonly grant: StreamGrant | null,
  ) {}

  wants(type: string, robotId: string | null): boolean {
    return this.filter.types.has(type) && (this.filter.robotId === null || this.filter.robotId === robotId);
  }

  /** Passes the batch's events this stream wants on in one write (a write per frame per stream would cost a syscall each). */
  offer(events: readonly TailEvent[]): void {
    if (!this.live) return;
    let out = '';
    for (const e of events) {
      if (e.id <= this.pos) continue;
      this.pos = e.id;
      if (this.wants(e.type, e.robotId)) out += e.frame;
    }
    if (out !== '') this.conn.send(out);
  }

  /** Sends the events after `after` (null: none, the stream starts at the present), then joins the tail. */
  follow(after: number | null): Promise<void> {
    return this.hub.follow(this, after);
  }
}

/**
 * The event streams of one process. Per organization with open streams there is one tail: one
 * read of the log every `pollMs` (and at once when this process appended events), shared by all
 * of that organization's streams, so the cost is per event and organization, never per stream or
 * per robot. Events appended by another replica arrive with the next poll.
 */
export class EventHub {
  private readonly tails = new Map<string, OrgTail>();
  private readonly inFlight = new Set<Promise<unknown>>();
  private readonly pageSize: number;
  private stopTimers: (() => void) | null = null;
  private checking: Promise<void> | null = null;
  /** A heartbeat came while a check ran: check once more after it. */
  private checkAgain = false;
  private closed = false;

  constructor(private readonly opts: EventHubOptions) {
    this.pageSize = opts.pageSize ?? 500;
  }

  /** Open streams in this process. */
  get openStreams(): number {
    let n = 0;
    for (const t of this.tails.values()) n += t.streams.size;
    return n;
  }

  /**
   * Takes a place for a stream of `orgId` and waits until the organization's tail knows where
   * the log ends. Refused past the per-organization bound (429) and while closing (503). The
   * stream leaves the hub when its connection closes.
   */
  async open(orgId: string, filter: StreamFilter, conn: SseConnection, grant: StreamGrant | null = null): Promise<EventStream> {
    if (this.closed) throw new ApiError('not_ready', 'the server is shutting down; reconnect');
    let tail = this.tails.get(orgId);
    if (tail && tail.streams.size >= this.opts.maxStreamsPerOrg) {
      throw new ApiError(
        'rate_limited',
        `this organization has ${this.opts.maxStreamsPerOrg} open event streams on this server; close one, or retry later`,
        { limit: 'event_streams_per_org', max: this.opts.maxStreamsPerOrg, retry_after_s: 5 },
        { 'retry-after': '5' },
      );
    }
    if (!tail) tail = this.newTail(orgId);
    const stream = new EventStream(this, tail, filter, conn, grant);
    tail.streams.add(stream);
    conn.onClose(() => this.leave(stream));
    try {
      await tail.started;
    } catch (err) {
      this.leave(stream);
      throw err;
    }
    return stream;
  }

  /** Events were appended by this process: read the tails of these organizations (all without a list) now. */
  notify(orgIds?: Iterable<string>): void {
    if (orgIds === undefined) {
      for (const tail of this.tails.values()) this.pump(tail);
      return;
    }
    for (const id of orgIds) {
      const tail = this.tails.get(id);
      if (tail) this.pump(tail);
    }
  }

  /** Ends every stream (cleanly; one with output its reader has not taken is cut) and waits for reads in flight. */
  async close(): Promise<void> {
    this.closed = true;
    this.stopTimers?.();
    this.stopTimers = null;
    for (const tail of [...this.tails.values()]) for (const s of [...tail.streams]) s.conn.end();
    this.tails.clear();
    while (this.inFlight.size > 0) await Promise.allSettled([...this.inFlight]);
  }

  /** @internal The catch-up of `stream` (see EventStream.follow). */
  async follow(stream: EventStream, after: number | null): Promise<void> {
    const run = this.catchUp(stream, after);
    this.inFlight.add(run);
    try {
      await run;
    } finally {
      this.inFlight.delete(run);
    }
  }

  private async catchUp(stream: EventStream, after: number | null): Promise<void> {
    const { tail, filter, conn } = stream;
    const { events } = this.opts.store;
    let pos = after ?? tail.cursor;
    if (after !== null && after > tail.cursor) {
      // Past what this process has read: another replica may have read further. Past the
      // organization's newest event it is no event of this organization: start at the present.
      const newest = await events.latestId(tail.orgId);
      if (after > newest) pos = newest;
    }
    // Where the stream starts, as an id without data: a client that reconnects before any event
    // came (EventSource too) resumes from here instead of from a later present.
    conn.send(`id: ${this.opts.ids.eventId(pos)}\n\n`);
    const types = [...filter.types];
    while (!conn.closed && pos < tail.cursor) {
      const upTo = tail.cursor;
      const rows = await events.listAfter(tail.orgId, pos, { limit: this.pageSize, upTo, types, ...(filter.robotId !== null ? { robotId: filter.robotId } : {}) });
      if (rows.length > 0) conn.send(rows.map((r) => eventFrame(this.opts.ids.eventId(r.id), r.type, r.payload)).join(''));
      pos = rows.length < this.pageSize ? upTo : rows[rows.length - 1]!.id;
      // A reader slower than the log is paced here, a page at a time, instead of being dropped.
      await conn.drained();
    }
    // Same turn as the last check above: nothing the tail hands out later is missed.
    stream.pos = Math.max(stream.pos, pos);
    stream.live = true;
  }

  private newTail(orgId: string): OrgTail {
    const tail: OrgTail = { orgId, cursor: 0, ready: false, started: Promise.resolve(), streams: new Set(), pumping: false, again: false };
    tail.started = this.opts.store.events.latestId(orgId).then(
      (newest) => {
        tail.cursor = newest;
        tail.ready = true;
      },
      (err: unknown) => {
        if (this.tails.get(orgId) === tail) this.tails.delete(orgId);
        throw err;
      },
    );
    this.tails.set(orgId, tail);
    this.startTimers();
    return tail;
  }

  private leave(stream: EventStream): void {
    const { tail } = stream;
    tail.streams.delete(stream);
    if (tail.streams.size > 0 || this.tails.get(tail.orgId) !== tail) return;
    this.tails.delete(tail.orgId);
    if (this.tails.size === 0) {
      this.stopTimers?.();
      this.stopTimers = null;
    }
  }

  private startTimers(): void {
    if (this.stopTimers || this.closed) return;
    const stopPoll = every(this.opts.scheduler, this.opts.pollMs, () => {
      for (const tail of this.tails.values()) this.pump(tail);
    });
    const stopHeartbeat = every(this.opts.scheduler, this.opts.heartbeatMs, () => {
      for (const tail of this.tails.values()) for (const s of tail.streams) s.conn.heartbeat();
      this.checkGrants();
    });
    this.stopTimers = () => {
      stopPoll();
      stopHeartbeat();
    };
  }

  /**
   * With each heartbeat: a stream whose key expired ends; when keys, organizations or their
   * entitlements changed since a stream's last check (one read of the auth revision for the
   * whole process), its key is read again and the stream ends if it may no longer read what it
   * carries (revoked, expired, a scope or a feature taken away). The client's reconnection is
   * then answered 401 or 403. A heartbeat during a check makes one more check after it (so a
   * change made before a heartbeat is always read by a check that starts after it).
   */
  private checkGrants(): void {
    if (this.closed) return;
    if (this.checking) {
      this.checkAgain = true;
      return;
    }
    this.checkAgain = false;
    const run = (async () => {
      const now = this.opts.clock.now();
      const revision = await this.opts.store.apiKeys.authRevision();
      for (const tail of [...this.tails.values()]) {
        for (const s of [...tail.streams]) {
          if (!s.grant || s.conn.closed) continue;
          if (s.grant.expiresAt !== null && s.grant.expiresAt <= now) {
            s.conn.end();
            continue;
          }
          if (s.checkedAt === revision) continue;
          if (await s.grant.recheck()) s.checkedAt = revision;
          else s.conn.end();
        }
      }
    })()
      .catch((err: unknown) => this.opts.logger.error({ err }, 'checking the keys of open event streams failed'))
      .finally(() => {
        this.checking = null;
        this.inFlight.delete(run);
        if (this.checkAgain) this.checkGrants();
      });
    this.checking = run;
    this.inFlight.add(run);
  }

  /**
   * Reads the organization's new events and hands them to its live streams; one read at a time
   * per organization. A wake during a read makes one more read after it.
   */
  private pump(tail: OrgTail): void {
    if (!tail.ready || this.closed) return;
    if (tail.pumping) {
      tail.again = true;
      return;
    }
    tail.pumping = true;
    tail.again = false;
    const run = this.read(tail)
      .catch((err: unknown) => this.opts.logger.error({ err, org_id: tail.orgId }, 'reading the event log for streams failed'))
      .finally(() => {
        tail.pumping = false;
        this.inFlight.delete(run);
        if (tail.again && this.tails.get(tail.orgId) === tail) this.pump(tail);
      });
    this.inFlight.add(run);
  }

  private async read(tail: OrgTail): Promise<void> {
    for (;;) {
      const rows = await this.opts.store.events.listAfter(tail.orgId, tail.cursor, { limit: this.pageSize });
      // The organization's last stream left (or the hub closed) meanwhile: nobody to hand them to.
      if (this.tails.get(tail.orgId) !== tail) return;
      if (rows.length === 0) return;
      // The cursor moves and the rows go out in this one turn (see EventStream).
      tail.cursor = rows[rows.length - 1]!.id;
      const events = rows.map((r) => tailEvent(r, this.opts.ids.eventId(r.id)));
      for (const s of tail.streams) s.offer(events);
      if (rows.length < this.pageSize) return;
    }
  }
}

function tailEvent(row: EventRow, wireId: string): TailEvent {
  let robotId: string | null = null;
  try {
    const v = (JSON.parse(row.payload) as { robot_id?: unknown }).robot_id;
    if (typeof v === 'string') robotId = v;
  } catch {
    // Every payload is built as JSON (rules/events.ts); one that is not names no robot.
  }
  return { id: row.id, type: row.type, robotId, frame: eventFrame(wireId, row.type, row.payload) };
}
