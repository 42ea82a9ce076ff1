import { join } from 'node:path';
import { describe, expect, test } from 'vitest';
import { cleanEnv, REPO_ROOT } from './support/cloud.js';
import { ensureMosquitto } from './support/mosquitto.js';
import { ensurePostgresBinaries } from './support/postgres.js';
import { exitWithin, spawnProcess } from './support/process.js';

/**
 * `npm run soak` in its 3-minute form (minus the build, done by `npm test`): the whole system
 * (two replicas on PostgreSQL behind mosquitto, the S3 store, the grant provider, webhook
 * receivers of two organizations, a dozen robots) under the seeded fault schedule, then the
 * drain and every invariant. The seed is one whose run passed (docs/reliability.md); the run
 * must pass again and have injected every kind of fault.
 */
const SEED = 2;
const FAULT_KINDS = ['agent-kill', 'replica-kill', 'mosquitto-restart', 'postgres-restart', 'store-down', 'provider-down', 'network-cut', 'disk-fill'];

const ready = ensureMosquitto().ok && ensurePostgresBinaries() !== null;

describe.skipIf(!ready)('npm run soak -- --minutes 3', () => {
  test('every invariant holds under every kind of fault, and the run says so', { timeout: 480_000 }, async () => {
    await using soak = spawnProcess(process.execPath, ['--import', 'tsx', join('soak', 'run.ts'), '--minutes', '3', '--seed', String(SEED), '--robots', '12'], {
      name: 'soak',
      cwd: REPO_ROOT,
      env: cleanEnv(),
    });
    // A failure bound only (the run plans its own time); the report is printed on any failure.
    const exit = await exitWithin(soak, 450_000).catch((err: unknown) => ({ code: null, signal: null, err }));
    const report = `${soak.stdoutLines.join('\n')}\n--- stderr (last 40 lines) ---\n${soak.stderrLines.slice(-40).join('\n')}`;
    const line = soak.stdoutLines.find((l) => l.startsWith('SOAK_RESULT '));
    expect(line, report).toBeDefined();
    const result = JSON.parse(line!.slice('SOAK_RESULT '.length)) as { ok: boolean; faults: Record<string, number> };
    for (const kind of FAULT_KINDS) expect(result.faults[kind] ?? 0, `${kind} injected\n${report}`).toBeGreaterThanOrEqual(1);
    expect(result.ok, report).toBe(true);
    expect({ code: exit.code, signal: exit.signal }, report).toEqual({ code: 0, signal: null });
  });
});
