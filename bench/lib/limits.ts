import type { CloudProcess } from '../../test/support/cloud.js';

/**
 * Benchmarks measure what the service costs, not its load protection: `serve` flags that lift
 * the per-address request limit and the per-robot MQTT throttle out of the way.
 */
export const BENCH_SERVE_ARGS: readonly string[] = [
  '--ip-requests-per-minute',
  '1000000000',
  '--mqtt-messages-per-second',
  '1000000000',
  '--mqtt-bytes-per-second',
  '1000000000000',
];

const UNLIMITED = '1000000000';

/** Lifts the request-rate entitlements of every organization of the cloud (`orgs set-limit`; `env`: the store's, e.g. FLEET_DATABASE_URL). */
export async function liftRequestLimits(cloud: CloudProcess, env?: Record<string, string>): Promise<void> {
  const opts = env ? { env } : undefined;
  const listed = await cloud.cli(['orgs', 'list'], opts);
  if (listed.code !== 0) throw new Error(`orgs list: ${listed.stderr}`);
  for (const line of listed.stdout.trim().split('\n').filter(Boolean)) {
    const { id } = JSON.parse(line) as { id: string };
    for (const name of ['requests_per_minute_per_key', 'requests_per_minute_per_org']) {
      const res = await cloud.cli(['orgs', 'set-limit', id, `${name}=${UNLIMITED}`], opts);
      if (res.code !== 0) throw new Error(`orgs set-limit: ${res.stderr}`);
    }
  }
}
