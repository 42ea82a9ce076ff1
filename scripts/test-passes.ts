// `npm test`: the passes in order, each timed. It stops at the first that fails (as `&&` would)
// and prints every pass's wall time at the end, so a CI log says where its minutes went.
// Passes in one group (lint and the type check: each keeps one core busy) run side by side,
// their output held and printed whole, one pass after the other.
// Usage: tsx scripts/test-passes.ts [pass ...]   (default: every pass; `--list` names them)
import { spawn } from 'node:child_process';
import { constants } from 'node:os';

interface Pass {
  name: string;
  script: string;
}

const GROUPS: Pass[][] = [
  [{ name: 'build', script: 'build' }],
  [
    { name: 'lint', script: 'lint' },
    { name: 'typecheck', script: 'test:typecheck' },
  ],
  [{ name: 'sqlite', script: 'test:sqlite' }],
  [{ name: 'postgres', script: 'test:postgres' }],
  [{ name: 'replicas', script: 'test:replicas' }],
];
const PASSES = GROUPS.flat();

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
const chosen = GROUPS.map((g) => g.filter((p) => args.length === 0 || args.includes(p.name))).filter((g) => g.length > 0);

const minutes = (ms: number): string => {
  const s = Math.round(ms / 1000);
  return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
};

/** Runs `npm run <script>`; with `hold`, its output is kept and handed back instead of shown. */
function run(script: string, hold: boolean): Promise<{ code: number; output: Buffer[] }> {
  return new Promise((resolve) => {
    const child = spawn('npm', ['run', '--silent', script], { stdio: hold ? ['inherit', 'pipe', 'pipe'] : 'inherit' });
    const output: Buffer[] = [];
    child.stdout?.on('data', (b: Buffer) => output.push(b));
    child.stderr?.on('data', (b: Buffer) => output.push(b));
    const forward = (signal: NodeJS.Signals) => child.kill(signal);
    process.on('SIGINT', forward);
    process.on('SIGTERM', forward);
    child.on('close', (code, signal) => {
      process.off('SIGINT', forward);
      process.off('SIGTERM', forward);
      resolve({ code: code ?? 128 + (signal ? constants.signals[signal] : 15), output });
    });
  });
}

const started = Date.now();
const times: { name: string; ms: number; code: number }[] = [];
let failed: { pass: string; code: number } | null = null;
for (const group of chosen) {
  const hold = group.length > 1;
  const results = await Promise.all(
    group.map(async (pass) => {
      const t0 = Date.now();
      if (!hold) console.log(`\n=== pass ${pass.name}: npm run ${pass.script} (${new Date(t0).toISOString()})`);
      const r = await run(pass.script, hold);
      return { pass, t0, ms: Date.now() - t0, ...r };
    }),
  );
  for (const r of results) {
    if (hold) {
      console.log(`\n=== pass ${r.pass.name}: npm run ${r.pass.script} (${new Date(r.t0).toISOString()}, beside ${group.filter((p) => p !== r.pass).map((p) => p.name).join(', ')})`);
      process.stdout.write(Buffer.concat(r.output));
    }
    times.push({ name: r.pass.name, ms: r.ms, code: r.code });
    console.log(`=== pass ${r.pass.name}: ${r.code === 0 ? 'ok' : `failed (exit ${r.code})`} in ${minutes(r.ms)}`);
    if (r.code !== 0 && !failed) failed = { pass: r.pass.name, code: r.code };
  }
  if (failed) break;
}
console.log('\n=== pass times');
for (const t of times) console.log(`  ${t.name.padEnd(10)} ${minutes(t.ms).padStart(7)}  ${t.code === 0 ? 'ok' : `exit ${t.code}`}`);
console.log(`  ${'total'.padEnd(10)} ${minutes(Date.now() - started).padStart(7)}`);
process.exit(failed ? failed.code : 0);
