/**
 * What the soak watches while it runs: the HTTP status of each of its own API calls, the
 * resident memory of every process it started, and (at the end) the 5xx answers in the cloud's
 * request logs.
 */
import { readFileSync } from 'node:fs';
import type { CloudProcess } from '../test/support/cloud.js';

/** The 5xx answers the API contract has: which code each status may carry, and where. */
export function isSpecFiveHundred(status: number, code: string | undefined, path: string): boolean {
  if (status === 503) return code === 'robot_offline' || code === 'not_ready';
  if (status === 504) return code === 'command_timeout';
  // A robot refusing an episode transition in its current state.
  if (status === 500) return code === 'internal' && /^\/v1\/robots\/[^/]+\/episodes\/(start|finish|fail|discard)$/.test(path);
  return false;
}

export interface ApiCall {
  method: string;
  path: string;
  status: number;
  code?: string;
  /** When the answer came (ms since the epoch). */
  at: number;
}

/** A time window [from, to] in ms since the epoch (a database outage, with its grace). */
export interface Window {
  from: number;
  to: number;
}

const within = (at: number, windows: readonly Window[]) => windows.some((w) => at >= w.from && at <= w.to);

/** The cloud's log of a failed database call: the server refused, went away or is shutting down. */
const DATABASE_DOWN = /ECONNREFUSED|ECONNRESET|database system is (shutting down|starting up)|terminating connection due to administrator command|Connection terminated|connection timeout|Client has encountered a connection error/i;

/** Anything that can hand out a live replica. */
export interface ReplicaSource {
  cloud(): CloudProcess;
}

/** The soak's own calls to /v1: each answer's status is kept; a 5xx outside the contract is a violation. */
export class ApiLog {
  readonly statuses = new Map<number, number>();
  readonly violations: ApiCall[] = [];
  /** Requests that got no HTTP answer (a replica killed under them): retried on another. */
  transportErrors = 0;

  /** One request to a live replica, retried on another when the connection fails (up to `tries`). */
  async call(src: ReplicaSource, method: string, path: string, key: string, body?: unknown, tries = 20): Promise<{ status: number; text: string; headers: Headers }> {
    let last: unknown;
    for (let i = 0; i < tries; i++) {
      let cloud: CloudProcess;
      try {
        cloud = src.cloud();
      } catch (err) {
        last = err;
        await new Promise((r) => setTimeout(r, 500));
        continue;
      }
      try {
        const res = await fetch(`${cloud.http}${path}`, {
          method,
          headers: { authorization: `Bearer ${key}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
          ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
          signal: AbortSignal.timeout(60_000),
        });
        const text = await res.text();
        this.note(method, path, res.status, text);
        return { status: res.status, text, headers: res.headers };
      } catch (err) {
        this.transportErrors++;
        last = err;
        await new Promise((r) => setTimeout(r, 250));
      }
    }
    throw new Error(`${method} ${path}: no answer from any replica (${last instanceof Error ? last.message : String(last)})`);
  }

  /** `call`, retried on a transient answer (503, 429) until `timeoutMs`; the 2xx body parsed. */
  async json<T = unknown>(src: ReplicaSource, method: string, path: string, key: string, body?: unknown, timeoutMs = 120_000): Promise<T> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const r = await this.call(src, method, path, key, body);
      if (r.status >= 200 && r.status < 300) return (r.text ? JSON.parse(r.text) : undefined) as T;
      const transient = r.status === 503 || r.status === 429 || r.status === 504;
      if (!transient || Date.now() > deadline) throw new Error(`${method} ${path} answered ${r.status}: ${r.text.slice(0, 300)}`);
      await new Promise((res) => setTimeout(res, 500));
    }
  }

  private note(method: string, path: string, status: number, text: string): void {
    this.statuses.set(status, (this.statuses.get(status) ?? 0) + 1);
    if (status < 500) return;
    let code: string | undefined;
    try {
      code = (JSON.parse(text) as { error?: { code?: string } }).error?.code;
    } catch {
      // not the error body: a violation whatever the status
    }
    const route = path.split('?')[0]!;
    if (!isSpecFiveHundred(status, code, route)) this.violations.push({ method, path: route, status, ...(code ? { code } : {}), at: Date.now() });
  }
}

/**
 * 5xx answers in the replicas' request logs that the contract does not have: `violations`, and
 * apart, `duringOutage`: a 500 whose logged cause is the database being down, inside one of
 * `outages` (docs/api.md keeps 503 `not_ready` for /readyz; the API answers such a request 500).
 */
export function cloudLogFiveHundreds(replicas: readonly CloudProcess[], outages: readonly Window[] = []): { total: number; violations: string[]; duringOutage: string[] } {
  let total = 0;
  const violations: string[] = [];
  const duringOutage: string[] = [];
  for (const c of replicas) {
    const urls = new Map<string, string>();
    const databaseDown = new Set<string>();
    for (const line of c.process.stderrLines) {
      if (!line.startsWith('{')) continue;
      let entry: { reqId?: string; msg?: string; time?: number; req?: { url?: string; method?: string }; res?: { statusCode?: number }; err?: { message?: string } };
      try {
        entry = JSON.parse(line) as typeof entry;
      } catch {
        continue;
      }
      const reqId = entry.reqId ?? '';
      if (entry.msg === 'incoming request' && entry.req?.url) urls.set(reqId, `${entry.req.method ?? ''} ${entry.req.url}`);
      if (entry.msg === 'unhandled error') {
        const what = `pid ${c.process.pid}: unhandled error "${entry.err?.message ?? ''}" (${urls.get(reqId) ?? '?'})`;
        if (DATABASE_DOWN.test(entry.err?.message ?? '') && within(entry.time ?? 0, outages)) {
          databaseDown.add(reqId);
          duringOutage.push(what);
        } else violations.push(what);
      }
      const status = entry.res?.statusCode;
      if (entry.msg !== 'request completed' || status === undefined || status < 500) continue;
      total++;
      if (databaseDown.has(reqId)) continue;
      const url = urls.get(reqId) ?? '';
      const path = url.split(' ')[1]?.split('?')[0] ?? '';
      // The log line has no error code: 503 and 504 are the contract's (offline robot, not ready,
      // command timeout); a 500 only on an episode verb (a refused transition).
      const allowed = status === 503 || status === 504 || (status === 500 && /^\/v1\/robots\/[^/]+\/episodes\/(start|finish|fail|discard)$/.test(path));
      if (!allowed) violations.push(`pid ${c.process.pid}: ${status} on ${url || `request ${reqId}`}`);
    }
  }
  return { total, violations, duringOutage };
}

/** The soak's own 5xx outside the contract, split by whether they fell in a database outage. */
export function splitByOutage(calls: readonly ApiCall[], outages: readonly Window[]): { violations: ApiCall[]; duringOutage: ApiCall[] } {
  return { violations: calls.filter((c) => !(c.status === 500 && within(c.at, outages))), duringOutage: calls.filter((c) => c.status === 500 && within(c.at, outages)) };
}

/** Resident memory (VmRSS) of a process in bytes, or null when it is gone. */
export function rssBytes(pid: number): number | null {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) * 1024 : null;
  } catch {
    return null;
  }
}

const MiB = 1024 * 1024;

/** The most resident memory each kind of process may reach; beyond it is a violation. */
export function memoryBounds(robotsPerFleet: number): Record<string, number> {
  return {
    replica: 768 * MiB,
    mosquitto: 128 * MiB,
    postgres: 512 * MiB,
    s3: 768 * MiB,
    'grant-provider': 384 * MiB,
    'fleet-solo': 384 * MiB,
    fleet: 256 * MiB + robotsPerFleet * 48 * MiB,
  };
}

/** Samples the RSS of every process of the system periodically; keeps each label's peak. */
export class MemoryWatch {
  readonly peaks = new Map<string, { kind: string; peak: number; samples: number }>();
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly processes: () => { label: string; kind: string; pid: number }[]) {}

  start(everyMs = 2000): void {
    this.sample();
    this.timer = setInterval(() => this.sample(), everyMs);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
    this.sample();
  }

  sample(): void {
    for (const p of this.processes()) {
      const rss = rssBytes(p.pid);
      if (rss === null) continue;
      const cur = this.peaks.get(p.label) ?? { kind: p.kind, peak: 0, samples: 0 };
      cur.peak = Math.max(cur.peak, rss);
      cur.samples++;
      this.peaks.set(p.label, cur);
    }
  }
}
