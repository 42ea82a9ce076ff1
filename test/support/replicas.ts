import { join } from 'node:path';
import { makeTempDir, startCloud, type CloudProcess, type TempDir } from './cloud.js';
import type { MosquittoBroker } from './mosquitto.js';

export interface ReplicaSetOptions {
  /** mosquitto, or a broker cluster (then `mqttUrlFor` puts replicas on different nodes). */
  broker: Pick<MosquittoBroker, 'url' | 'accountFile'>;
  /** The broker URL replica `index` uses (default `broker.url`). */
  mqttUrlFor?: (index: number) => string;
  /** The data directory (default: a temp dir's `data`); a cluster's nodes read the same store. */
  dataDir?: string;
  count?: number;
  /**
   * The data store the replicas share. By default SQLite in one shared `--data-dir` (WAL lets
   * several processes use it; with FLEET_TEST_DATABASE=postgres `startCloud` gives that
   * directory one PostgreSQL database). `{ FLEET_DATABASE_URL }` points every replica at a given one.
   */
  storeEnv?: Record<string, string>;
  /** More `serve` flags for every replica. */
  args?: readonly string[];
}

/** Several `fleet-cloud serve` behind one mosquitto, on one data store. */
export interface ReplicaSet extends AsyncDisposable {
  readonly clouds: readonly CloudProcess[];
  readonly dataDir: string;
  /** Starts one more replica on the same store and broker (e.g. after stopping one); it joins `clouds`. */
  add(): Promise<CloudProcess>;
}

/**
 * Starts `count` replicas (2 by default) one after the other: the first creates the organization
 * and admin key, the others find them. Each serves its own HTTP port and a metrics listener, and
 * reaches robots only through the broker (`--mqtt-url` + `--mqtt-account-file`).
 */
export async function startReplicas(opts: ReplicaSetOptions): Promise<ReplicaSet> {
  const dir: TempDir = await makeTempDir('fleet-replicas-');
  const dataDir = opts.dataDir ?? join(dir.path, 'data');
  const clouds: CloudProcess[] = [];
  const dispose = async () => {
    try {
      await Promise.allSettled(clouds.map((c) => c[Symbol.asyncDispose]()));
    } finally {
      await dir[Symbol.asyncDispose]();
    }
  };
  const add = async () => {
    const cloud = await startCloud({
      dataDir,
      args: ['--mqtt-url', opts.mqttUrlFor?.(clouds.length) ?? opts.broker.url, '--mqtt-account-file', opts.broker.accountFile, '--metrics-listen', '127.0.0.1:0', ...(opts.args ?? [])],
      ...(opts.storeEnv ? { env: opts.storeEnv } : {}),
    });
    clouds.push(cloud);
    return cloud;
  };
  try {
    for (let i = 0; i < (opts.count ?? 2); i++) await add();
  } catch (err) {
    await dispose();
    throw err;
  }
  return { clouds, dataDir, add, [Symbol.asyncDispose]: dispose };
}

/** The replica's `/metrics` text (its `--metrics-listen` URL from the address line). */
export async function scrapeMetrics(cloud: CloudProcess): Promise<string> {
  const line = cloud.stdoutLines.find((l) => l.startsWith('{') && l.includes('"metrics"'));
  if (!line) throw new Error('the cloud printed no metrics address');
  const res = await fetch((JSON.parse(line) as { metrics: string }).metrics);
  if (res.status !== 200) throw new Error(`/metrics answered ${res.status}`);
  return res.text();
}

/** The value of one sample, e.g. `fleet_episode_reports_total{result="inserted"}`; 0 when absent. */
export function sample(metrics: string, name: string): number {
  const line = metrics.split('\n').find((l) => l.startsWith(`${name} `));
  return line ? Number(line.slice(name.length + 1)) : 0;
}
