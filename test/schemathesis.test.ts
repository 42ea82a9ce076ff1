/**
 * The /v1 API judged by a fuzzer we did not write: schemathesis (property-based tests generated
 * from the OpenAPI document the cloud serves) against a live `fleet-cloud serve` with an admin
 * key, every check (`--checks all`), every phase including the stateful one (chains driven by the
 * document's `links`: create then get, list then delete, snapshot then manifest, …).
 *
 * The run passes only with zero failures. test/python/schemathesis_hooks.py registers the NDJSON
 * deserializer and names, each with its reason, the few refusals of schema-valid requests the
 * API makes by design (a reused Idempotency-Key with another body, an expiry in the past, an order
 * that is not a permutation, …); nothing else is let through.
 *
 * A fixed seed and a budget that fits CI; FLEET_SCHEMATHESIS_DEEP=1 runs another seed with a
 * larger budget (run by hand before a release: it must be as clean).
 */
import { join } from 'node:path';
import { describe, expect, test } from 'vitest';
import { REPO_ROOT, startCloud } from './support/cloud.js';
import { runProcess } from './support/process.js';
import { ensurePythonEnv } from './support/python.js';

const REQUIREMENTS = join(REPO_ROOT, 'python', 'requirements-dev.txt');
const HOOKS_DIR = join(REPO_ROOT, 'test', 'python');

const DEEP = process.env.FLEET_SCHEMATHESIS_DEEP === '1';
const RUN = DEEP ? { seed: 4242, examples: 100, timeoutMs: 3_600_000 } : { seed: 20261202, examples: 25, timeoutMs: 900_000 };

describe('schemathesis against the live cloud', () => {
  test(
    `every operation, every check, stateful links: no failure (seed ${RUN.seed}, ${RUN.examples} examples)`,
    async () => {
      const python = ensurePythonEnv((line) => console.warn(line), REQUIREMENTS);
      await using cloud = await startCloud({
        logLevel: 'warn',
        // Thousands of requests from one address, many with bad keys on purpose: the per-address
        // limits would answer 429 and hide what the API does.
        args: ['--ip-requests-per-minute', '10000000', '--failed-logins-per-window', '10000000'],
      });
      const adminKey = cloud.adminKey;
      const me = (await (await cloud.fetch('/v1/entitlements')).json()) as { key: { id: string } };

      const result = await runProcess(
        python,
        [
          '-m',
          'schemathesis.cli',
          'run',
          `${cloud.http}/v1/openapi.json`,
          '--url',
          cloud.http,
          '--header',
          `Authorization: Bearer ${adminKey}`,
          '--checks',
          'all',
          '--phases',
          'examples,coverage,fuzzing,stateful',
          '--seed',
          String(RUN.seed),
          '--max-examples',
          String(RUN.examples),
          // The event stream never ends by itself; schemathesis reads its first events and cuts it.
          '--request-timeout',
          '10',
          '--generation-database',
          'none',
          '--no-color',
        ],
        {
          name: 'schemathesis run',
          // schemathesis keeps a cache of past failures (`.schemathesis/`) in its working
          // directory and replays them first: each run starts from none, outside the clone.
          cwd: cloud.dataDir,
          env: {
            PYTHONPATH: HOOKS_DIR,
            SCHEMATHESIS_HOOKS: 'schemathesis_hooks',
            FLEET_SCHEMATHESIS_KEY_ID: me.key.id,
            // No report directory or example database left in the clone.
            HYPOTHESIS_STORAGE_DIRECTORY: join(cloud.dataDir, 'hypothesis'),
          },
          timeoutMs: RUN.timeoutMs,
        },
      );
      const output = result.stdout + result.stderr;
      // schemathesis's own summary, in the test's output whatever the result.
      const at = output.indexOf('=== SUMMARY ===');
      const summary = at < 0 ? '' : output.slice(output.lastIndexOf('\n', at) + 1);
      console.log(`schemathesis (seed ${RUN.seed}, ${RUN.examples} examples):\n${summary || output}`);
      expect(output, 'schemathesis ran against the document').toContain('Operations:');
      expect(result.code, output).toBe(0);
      // A clean run ends `N generated, N passed`; with failures it says `found N unique failures`.
      expect(output).toMatch(/Test cases:\s+(\d+) generated, \1 passed/);
      expect(output).not.toMatch(/unique failures?|\d+ failures?,/);
    },
    DEEP ? 3_700_000 : 1_000_000,
  );
});
