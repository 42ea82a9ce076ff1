// `npm test`: the passes in order, each timed. It stops at the first that fails (as `&&` would)
// and prints every pass's wall time at the end, so a CI log says where its minutes went.
// Usage: tsx scripts/test-passes.ts [pass ...]   (default: every pass; `--list` names them)
import { spawn } from 'node:child_process';
import { constants } from 'node:os';

const PASSES: { name: string; script: string }[] = [
  { name: 'build', script: 'build' },
  { name: 'lint', script: 'lint' },
  { name: 'typecheck', script: 'test:typecheck' },
  { name: 'sqlite', script: 'test:sqlite' },
  { name: 'postgres', script: 'test:postgres' },
  { name: 'replicas', script: 'test:replicas' },
  // The replicated suites once more on a cluster of broker nodes (fleet-cloud broker-node on one
  // Redis), one of them killed three seconds into each cluster's life; and the cluster's own test.
  { name: 'cluster', script: 'test:cluster' },
  // The sync end-to-end files once more with moto's S3 server as the bucket (test/support/moto-server.ts).
  { name: 'moto', script: 'test:moto' },
];

const args = process.argv.slice(2);
if (args.includes('--list')) {
  for (const p of PASSES) console.log(`${p.name}\tnpm run ${p.script}`);
  process.exit(0);
}
const unknown = args.filter((a) => !PASSES.some((p) => p.name === a));
if (unknown.length > 0) {
  console.error(`unknown pass: ${unknown.join(', ')} (passes: ${PASSES.map((p) => p.name).join(', ')})`);
  process.exit(2);
}
const chosen = args.length === 0 ? PASSES : PASSES.filter((p) => args.includes(p.name));

const minutes = (ms: number): string => {
  const s = Math.round(ms / 1000);
  return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
};

function run(script: string): Promise<number> {
  return new Promise((resolve) => {
    const child = spawn('npm', ['run', '--silent', script], { stdio: 'inherit' });
    const forward = (signal: NodeJS.Signals) => child.kill(signal);
    process.on('SIGINT', forward);
    process.on('SIGTERM', forward);
    child.on('exit', (code, signal) => {
      process.off('SIGINT', forward);
      process.off('SIGTERM', forward);
      resolve(code ?? 128 + (signal ? constants.signals[signal] : 15));
    });
  });
}

const started = Date.now();
const times: { name: string; ms: number; code: number }[] = [];
let failed: { pass: string; code: number } | null = null;
for (const pass of chosen) {
  console.log(`\n=== pass ${pass.name}: npm run ${pass.script} (${new Date().toISOString()})`);
  const t0 = Date.now();
  const code = await run(pass.script);
  times.push({ name: pass.name, ms: Date.now() - t0, code });
  console.log(`=== pass ${pass.name}: ${code === 0 ? 'ok' : `failed (exit ${code})`} in ${minutes(Date.now() - t0)}`);
  if (code !== 0) {
    failed = { pass: pass.name, code };
    break;
  }
}
console.log('\n=== pass times');
for (const t of times) console.log(`  ${t.name.padEnd(10)} ${minutes(t.ms).padStart(7)}  ${t.code === 0 ? 'ok' : `exit ${t.code}`}`);
console.log(`  ${'total'.padEnd(10)} ${minutes(Date.now() - started).padStart(7)}`);
process.exit(failed ? failed.code : 0);
