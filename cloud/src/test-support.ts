/**
 * Fixtures for the cloud's unit tests: an app built on an in-memory store with a manual clock,
 * plus helpers to create organizations and keys without going through HTTP. Only `*.test.ts`
 * files import this module (the build excludes it).
 */
import type { FastifyInstance, InjectOptions, LightMyRequestResponse } from 'fastify';
import { ManualClock, ManualScheduler, systemScheduler, type CreatedApiKey, type EpisodeReport, type Scope } from '@fleet/protocol';
import { createApiKey } from './api-keys.js';
import { buildApp, type AppParts, type CloudApp } from './app.js';
import { parseCloudConfig, type CloudConfig, type CloudConfigInput } from './config.js';
import { newId } from './ids.js';
import { SecretBox } from './secret-box.js';
import { offlineAppParts, type OfflineAppParts } from './server.js';
import type { Store } from './store/index.js';
import { createEnrollmentToken, enrollRobot } from './robots/enrollment.js';
import type { OrgRow } from './store/index.js';
import { openTestStore, type TestStore } from './store/test-store.js';

export interface TestTenant {
  org: OrgRow;
  /** The plaintext admin key of the organization. */
  adminKey: string;
  /** `{ authorization: 'Bearer <adminKey>' }`. */
  auth: { authorization: string };
}

export interface TestCloud extends AsyncDisposable {
  cloud: CloudApp;
  app: FastifyInstance;
  /** SQLite in memory, or PostgreSQL with FLEET_TEST_DATABASE=postgres. */
  store: TestStore;
  clock: ManualClock;
  /** Moves `clock` and fires the app's background timers that fall due. */
  scheduler: ManualScheduler;
  config: CloudConfig;
  /** The installation key the app seals with (and makes its opaque ids with). */
  secrets: SecretBox;
  /** The wire id (`evt_…`) of the event log's row `n`, as the stream and webhooks show it. */
  eventId(n: number): string;
  /** Creates an organization (enterprise tier unless told otherwise). */
  createOrg(opts?: { tier?: string; name?: string }): Promise<OrgRow>;
  /** Creates a key for `org` directly through `createApiKey` (not metered). */
  createKey(org: OrgRow | string, scopes?: Scope[], opts?: { expiresAt?: number | null; name?: string }): Promise<CreatedApiKey>;
  /** An organization with one admin key. */
  createTenant(opts?: { tier?: string }): Promise<TestTenant>;
  close(): Promise<void>;
}

/** A unit test's time: a clock it moves and the scheduler on it. */
export interface TestTime {
  clock: ManualClock;
  scheduler: ManualScheduler;
}

/** What a test hands the app in place of the parts {@link testAppParts} makes. */
export type TestAppDeps = Omit<Partial<AppParts>, 'store' | 'clock' | 'scheduler'>;

/**
 * The app's parts for a unit test, each built once (as `startCloud` builds them), on `clock` and
 * `scheduler` (the shutdown's sweep excepted: a shutdown must end); `deps` replaces any of them.
 * `close` closes what was built here (the egress client), not the store.
 */
export function testAppParts(config: CloudConfig, base: TestTime & { store: Store }, deps: TestAppDeps = {}): OfflineAppParts {
  const secrets = deps.secrets ?? SecretBox.random();
  const made = offlineAppParts(config, { ...base, secrets, shutdownScheduler: systemScheduler, ...(deps.logger ? { logger: deps.logger } : {}) });
  return { parts: { ...made.parts, ...deps }, close: () => made.close() };
}

/** `buildApp` on {@link testAppParts}; its `close` closes those parts too (not the store). */
export async function buildTestApp(config: CloudConfig, base: TestTime & { store: Store }, deps: TestAppDeps = {}): Promise<CloudApp & { parts: AppParts }> {
  const made = testAppParts(config, base, deps);
  const cloud = await buildApp(config, made.parts).catch(async (err: unknown) => {
    await made.close();
    throw err;
  });
  return {
    ...cloud,
    parts: made.parts,
    async close() {
      await cloud.close();
      await made.close();
    },
  };
}

export async function startTestCloud(
  opts: { config?: CloudConfigInput; deps?: TestAppDeps; dataDir?: string } = {},
): Promise<TestCloud> {
  const config = parseCloudConfig(opts.config ?? {});
  const store = await openTestStore(undefined, opts.dataDir === undefined ? {} : { dataDir: opts.dataDir });
  const clock = new ManualClock();
  // Background work (last-use flushes, the purge) runs only when a test moves time.
  const scheduler = new ManualScheduler(clock);
  const cloud = await buildTestApp(config, { store, clock, scheduler }, opts.deps);
  const { secrets } = cloud.parts;

  const freshOrg = async (org: OrgRow | string): Promise<OrgRow> => {
    const row = await store.orgs.get(typeof org === 'string' ? org : org.id);
    if (!row) throw new Error(`no organization ${typeof org === 'string' ? org : org.id}`);
    return row;
  };

  const t: TestCloud = {
    cloud,
    app: cloud.app,
    store,
    clock,
    scheduler,
    config,
    secrets,
    eventId: (n) => secrets.opaqueIds().eventId(n),
    async createOrg(o = {}) {
      const id = newId('org');
      await store.orgs.create({ id, name: o.name ?? 'test org', tier: o.tier ?? 'enterprise', createdAt: clock.now() });
      return freshOrg(id);
    },
    async createKey(org, scopes = ['admin'], o = {}) {
      return createApiKey(store, clock, {
        org: await freshOrg(org),
        name: o.name ?? 'test key',
        scopes,
        expiresAt: o.expiresAt ?? null,
        createdBy: 'test',
      });
    },
    async createTenant(o = {}) {
      const org = await t.createOrg(o);
      const { key } = await t.createKey(org, ['admin']);
      return { org, adminKey: key, auth: bearer(key) };
    },
    async close() {
      await cloud.close();
      await store.close();
    },
    async [Symbol.asyncDispose]() {
      await t.close();
    },
  };
  return t;
}

export function bearer(key: string): { authorization: string } {
  return { authorization: `Bearer ${key}` };
}

/**
 * `app.inject` for any route, the event stream included: an answer of type text/event-stream
 * never ends by itself, so it is cut once its head is in (the client goes away; its payload is
 * empty). Any other answer is read whole, as `inject` gives it.
 */
export async function injectAny(app: FastifyInstance, opts: InjectOptions): Promise<LightMyRequestResponse> {
  const res = await app.inject({ ...opts, payloadAsStream: true });
  const stream = res.stream();
  let raw = Buffer.alloc(0);
  if (String(res.headers['content-type'] ?? '').startsWith('text/event-stream')) {
    stream.destroy();
    res.raw.res.destroy();
  } else {
    const chunks: Buffer[] = [];
    for await (const chunk of stream) chunks.push(chunk as Buffer);
    raw = Buffer.concat(chunks);
  }
  const payload = raw.toString();
  return {
    raw: res.raw,
    headers: res.headers,
    statusCode: res.statusCode,
    statusMessage: res.statusMessage,
    trailers: res.trailers,
    cookies: res.cookies,
    rawPayload: raw,
    payload,
    body: payload,
    json: <T = unknown>() => JSON.parse(payload) as T,
    stream: () => stream,
  } as LightMyRequestResponse;
}

/** The `error.code` of an error response, or undefined when the body is not an error body. */
export function errorCode(res: LightMyRequestResponse): string | undefined {
  try {
    const body = JSON.parse(res.payload) as { error?: { code?: unknown } };
    return typeof body.error?.code === 'string' ? body.error.code : undefined;
  } catch {
    return undefined;
  }
}

/** The parsed `error.details` of an error response. */
export function errorDetails(res: LightMyRequestResponse): Record<string, unknown> | undefined {
  const body = JSON.parse(res.payload) as { error?: { details?: Record<string, unknown> } };
  return body.error?.details;
}

/** `/v1/things/:id/sub/:other` -> `/v1/things/dummy_id/sub/dummy_id`. */
export function fillPath(url: string, value = 'dummy_id'): string {
  return url.replace(/:[A-Za-z0-9_]+/g, value);
}

/** The UTC day (YYYY-MM-DD) of a clock. */
export function dayOf(clock: { now(): number }): string {
  return new Date(clock.now()).toISOString().slice(0, 10);
}

let reportCounter = 0;

/**
 * A valid, minimal episode report: every call gets the next id and episode_seq; nullable facts
 * are null, started at 2026-01-01T00:00:00Z unless `over` says otherwise.
 */
export function testReport(over: Partial<EpisodeReport> = {}): EpisodeReport {
  reportCounter += 1;
  return {
    id: `ep_${reportCounter.toString(36).padStart(12, '0')}`,
    recording_session_id: 'rs_1',
    episode_seq: reportCounter,
    session_name: null,
    task_id: null,
    task_name: null,
    subtask_id: null,
    operator_id: null,
    operator_name: null,
    control_mode: null,
    policy_version_id: null,
    eval_id: null,
    outcome: 'success',
    started_at: '2026-01-01T00:00:00.000Z',
    ended_at: null,
    duration_s: null,
    message_count: null,
    bag_size_bytes: null,
    metadata: {},
    segments: [],
    manifest: { files: [], total_bytes: 0 },
    ...over,
  };
}

/**
 * An in-memory store holding one organization (tier pro, with an admin key) and `count` robots
 * enrolled in it, with the MQTT passwords they were issued: the fixture of the broker tests.
 */
export async function storeWithRobots(clock: ManualClock, count: number): Promise<{ store: TestStore; robots: { id: string; password: string }[] }> {
  const store = await openTestStore();
  await store.orgs.create({ id: 'org_a', name: 'a', tier: 'pro', createdAt: clock.now() });
  const org = (await store.orgs.get('org_a'))!;
  await createApiKey(store, clock, { org, name: 'k', scopes: ['admin'], expiresAt: null, createdBy: 'test' });
  const token = await createEnrollmentToken(store, clock, { org, createdBy: 'test', maxUses: count });
  const robots: { id: string; password: string }[] = [];
  for (let i = 0; i < count; i++) {
    const r = await enrollRobot(store, clock, { token: token.token }, ['mqtt://unused']);
    robots.push({ id: r.robot_id, password: r.mqtt.password });
  }
  return { store, robots };
}
