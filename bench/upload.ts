/**
 * The agent's upload path: one large synthetic episode file sent through the real agent upload
 * code (agent/dist/sync/transfer.js) as `http-put` (one streamed PUT) and as `s3-multipart`
 * (`--parallel` parts on the wire, each streamed from its range of the file), next to `curl -T`
 * of the same file and N concurrent part PUTs with plain undici, all to the same local receiver
 * in the same run. The agent hashes the file (SHA-256, for verification) in a worker thread
 * beside the send; the same hashing alone, with nothing sent, is printed as the ceiling of any
 * upload that verifies what it sent on this machine. The receiver (bench/upload-receiver.js)
 * reads and drops the bytes, so the sending side is what is measured; each upload runs in its own
 * process, whose peak RSS (and anonymous RSS) is reported. Prints figures and ratios; asserts
 * nothing about time.
 */
import { execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { open, rm } from 'node:fs/promises';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { hashFile } from '../agent/src/sync/file-hash.js';
import { makeTempDir, REPO_ROOT } from '../test/support/cloud.js';
import { runProcess, spawnProcess } from '../test/support/process.js';
import { parseBenchArgs, type BenchModule } from './lib/args.js';
import { fmt, table } from './lib/measure.js';
import { row } from './lib/summary.js';

const RECEIVER = fileURLToPath(new URL('./upload-receiver.js', import.meta.url));
const CLIENT = fileURLToPath(new URL('./upload-client.js', import.meta.url));
const MiB = 1024 * 1024;

interface Run {
  label: string;
  ms: number;
  bytes: number;
  /** Peak RSS of the sending process, bytes; null when not measured (curl). */
  rss: number | null;
  /** Peak anonymous RSS (the process's own memory, not the mapped node binary), bytes. */
  anon: number | null;
  /** Growth of anonymous RSS over what the process held before the upload began, bytes. */
  anonGrowth: number | null;
  /** CPU seconds (user + system, all threads) of the process. */
  cpu: number | null;
}

/**
 * Runs a command under bash and returns its output with the CPU seconds (user + system) it took,
 * from bash's `times` (which reports the children it waited for): no extra tool needed.
 */
async function runTimed(command: string, args: readonly string[], name: string, timeoutMs: number): Promise<{ stdout: string; cpu: number }> {
  const r = await runProcess('bash', ['-c', '"$@"; s=$?; times >&2; exit $s', 'bash', command, ...args], { name, timeoutMs });
  if (r.code !== 0) throw new Error(`${name} exited ${r.code}: ${r.stderr}`);
  const children = r.stderr.trim().split('\n').at(-1) ?? '';
  const m = /^(\d+)m([\d.]+)s (\d+)m([\d.]+)s$/.exec(children.trim());
  if (!m) throw new Error(`${name}: cannot read its CPU time from ${JSON.stringify(children)}`);
  return { stdout: r.stdout, cpu: Number(m[1]) * 60 + Number(m[2]) + Number(m[3]) * 60 + Number(m[4]) };
}

/** Writes `size` bytes of incompressible data (a random block, varied per block) and returns its SHA-256. */
async function syntheticFile(path: string, size: number): Promise<string> {
  const block = randomBytes(16 * MiB);
  const hash = createHash('sha256');
  const fh = await open(path, 'w');
  try {
    for (let at = 0, i = 0; at < size; at += block.length, i++) {
      block.writeUInt32BE(i, 0);
      const piece = block.subarray(0, Math.min(block.length, size - at));
      hash.update(piece);
      await fh.write(piece);
    }
  } finally {
    await fh.close();
  }
  return hash.digest('hex');
}

/** MB/s of one core hashing with each algorithm (what the agent does to every byte it sends). */
function hashRates(): { sha256: number; md5: number } {
  const buf = randomBytes(64 * MiB);
  const rate = (algorithm: string) => {
    const t0 = performance.now();
    for (let i = 0; i < 2; i++) createHash(algorithm).update(buf).digest();
    return (2 * buf.length) / 1e6 / ((performance.now() - t0) / 1000);
  };
  return { sha256: rate('sha256'), md5: rate('md5') };
}

function positiveInt(name: string, raw: string | boolean | undefined, fallback: number): number {
  if (raw === undefined) return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1) throw new Error(`--${name} must be a whole number >= 1, got ${String(raw)}`);
  return n;
}

export const upload: BenchModule = {
  description: 'one large episode file through the agent upload code (http-put, s3-multipart) vs curl -T and plain undici parallel parts to a discarding local receiver',
  async run(argv) {
    const args = parseBenchArgs(argv, { 'size-mib': { type: 'string' }, 'part-mib': { type: 'string' }, parallel: { type: 'string' } });
    const size = positiveInt('size-mib', args.extra['size-mib'], 2048) * MiB;
    const partSize = positiveInt('part-mib', args.extra['part-mib'], 16) * MiB;
    const parallel = positiveInt('parallel', args.extra.parallel, 3);
    let curl: string | null = null;
    try {
      curl = execFileSync('which', ['curl'], { encoding: 'utf8' }).trim() || null;
    } catch {
      curl = null;
    }

    await using dir = await makeTempDir('fleet-bench-upload-');
    const file = join(dir.path, 'episode.bin');
    process.stderr.write(`bench upload: writing a ${size / MiB} MiB synthetic file in ${tmpdir()}…\n`);
    const sha256 = await syntheticFile(file, size);
    await using receiver = spawnProcess(process.execPath, [RECEIVER], { name: 'upload receiver', cwd: REPO_ROOT });
    const url = (JSON.parse(await receiver.waitForStdout((l) => l.startsWith('{"url"'), { description: 'the receiver address' })) as { url: string }).url;
    const received = async (): Promise<number> => ((await (await fetch(`${url}/stats`)).json()) as { bytes: number }).bytes;

    process.stderr.write(
      `bench upload: ${size / MiB} MiB, parts of ${partSize / MiB} MiB, ${parallel} on the wire, node ${process.version}, ${availableParallelism()} CPUs, curl ${curl ?? 'not found'}\n`,
    );
    const timeoutMs = Math.max(120_000, (size / MiB) * 1000);
    const runs: Run[] = [];
    const check = async (label: string, before: number): Promise<void> => {
      const got = (await received()) - before;
      if (got !== size) throw new Error(`${label}: the receiver got ${got} bytes of ${size}`);
    };

    if (curl) {
      const before = await received();
      const r = await runTimed(curl, ['-sS', '-o', '/dev/null', '-T', file, '-w', '%{time_total} %{http_code}', `${url}/obj/curl`], 'curl -T', timeoutMs);
      const [seconds, status] = r.stdout.trim().split(' ');
      if (status !== '200') throw new Error(`curl: the receiver answered ${status}`);
      await check('curl -T', before);
      runs.push({ label: 'curl -T (one PUT)', ms: Number(seconds) * 1000, bytes: size, rss: null, anon: null, anonGrowth: null, cpu: r.cpu });
    }
    // The other half of the baseline: a plain `sha256sum` of the same file (what a script that
    // verifies what it uploads would run beside curl).
    let sha256sum: Run | null = null;
    try {
      const t = performance.now();
      const r = await runTimed('sha256sum', [file], 'sha256sum', timeoutMs);
      const ms = performance.now() - t;
      if (r.stdout.split(' ')[0] !== sha256) throw new Error('sha256sum disagrees with the synthetic file');
      sha256sum = { label: 'sha256sum (no send)', ms, bytes: size, rss: null, anon: null, anonGrowth: null, cpu: r.cpu };
      runs.push(sha256sum);
    } catch (err) {
      if (!/ENOENT|not found|exited 127/.test(String(err))) throw err;
    }
    const client = async (mode: string, label: string): Promise<void> => {
      const before = await received();
      const r = await runProcess(process.execPath, [CLIENT, JSON.stringify({ mode, url, file, size, sha256, partSize, parallel })], { name: label, cwd: REPO_ROOT, timeoutMs });
      if (r.code !== 0) throw new Error(`${label} exited ${r.code}: ${r.stderr}`);
      const out = JSON.parse(r.stdout.trim().split('\n').at(-1)!) as { ms: number; bytes: number; peak_rss: number; max_rss: number; peak_anon: number; anon_growth: number; cpu_s: number };
      await check(label, before);
      runs.push({ label, ms: out.ms, bytes: out.bytes, rss: Math.max(out.peak_rss, out.max_rss), anon: out.peak_anon || null, anonGrowth: out.anon_growth, cpu: out.cpu_s });
    };
    await client('agent-put', 'agent http-put');
    await client('undici-parts', `undici ${parallel} parallel parts`);
    await client('agent-multipart', `agent s3-multipart`);
    // Verification needs the SHA-256 of every byte (the manifest's hash), and one SHA-256 cannot be
    // split across cores: the agent's own hashing of this file, with nothing sent, is the ceiling
    // of any upload that verifies what it sent on this machine.
    const t0 = performance.now();
    const digest = await hashFile(file, size, size);
    const hashMs = performance.now() - t0;
    if (digest.sha256 !== sha256) throw new Error('hashFile disagrees with the synthetic file');
    await rm(file, { force: true });

    const h = hashRates();
    const hashCeiling = size / 1e6 / (hashMs / 1000);
    const mbps = (r: Run) => r.bytes / 1e6 / (r.ms / 1000);
    const by = (label: string) => runs.find((r) => r.label.startsWith(label));
    const curlRun = by('curl');
    const put = by('agent http-put')!;
    const multi = by('agent s3-multipart')!;
    const parts = by('undici')!;
    const ratio = (a: Run | undefined, b: Run | undefined) => (a && b ? mbps(a) / mbps(b) : NaN);
    const mb = (n: number | null) => (n === null ? 'n/a' : fmt(n / 1e6, 1));
    const GiB = 1024 * MiB;
    const cpuPerGiB = (r: Run | null | undefined) => (r && r.cpu !== null ? r.cpu / (r.bytes / GiB) : NaN);
    const rows = runs.map((r) => [r.label, fmt(mbps(r), 1), fmt(r.ms / 1000, 2), fmt(cpuPerGiB(r), 2), mb(r.rss), mb(r.anon), mb(r.anonGrowth)]);
    rows.push(['agent SHA-256 of the file alone (no send)', fmt(hashCeiling, 1), fmt(hashMs / 1000, 2), '', '', '', '']);
    rows.push(['ratio agent http-put / curl', fmt(ratio(put, curlRun), 3), '', '', '', '', '']);
    rows.push(['ratio agent s3-multipart / curl', fmt(ratio(multi, curlRun), 3), '', '', '', '', '']);
    rows.push(['ratio agent s3-multipart / undici parts', fmt(ratio(multi, parts), 3), '', '', '', '', '']);
    rows.push(['ceiling: SHA-256 alone / curl', fmt(curlRun ? hashCeiling / mbps(curlRun) : NaN, 3), '', '', '', '', '']);
    rows.push(['agent http-put (s3-multipart) / SHA-256 alone', `${fmt(mbps(put) / hashCeiling, 3)} (${fmt(mbps(multi) / hashCeiling, 3)})`, '', '', '', '', '']);
    rows.push(['one core hashing SHA-256 (MD5), in memory', `${fmt(h.sha256, 0)} (${fmt(h.md5, 0)})`, '', '', '', '', '']);
    process.stdout.write(`${table(['target', 'MB/s', 'seconds', 'CPU s/GiB', 'peak RSS MB', 'peak anon RSS MB', 'anon growth MB'], rows)}\n`);
    // The baseline: the slower of sending the file (curl -T) and hashing it (sha256sum),
    // since an upload that verifies what it sent needs both; its CPU is the two together.
    const slower = [curlRun, sha256sum].filter((r): r is Run => !!r).sort((a, b) => mbps(a) - mbps(b))[0] ?? null;
    const baseline = slower ? mbps(slower) : null;
    const baselineName = slower === null ? 'curl and sha256sum not installed' : `${slower === curlRun ? 'curl -T' : 'sha256sum'}, the slower of curl -T and sha256sum of the same file`;
    const scriptCpu = curlRun && sha256sum ? cpuPerGiB(curlRun) + cpuPerGiB(sha256sum) : null;
    process.stdout.write(
      `${JSON.stringify({
        bench: 'upload',
        size_bytes: size,
        part_size_bytes: partSize,
        parallel,
        node: process.version,
        runs: runs.map((r) => ({
          label: r.label,
          mb_per_s: Number(mbps(r).toFixed(1)),
          seconds: Number((r.ms / 1000).toFixed(3)),
          cpu_s_per_gib: r.cpu === null ? null : Number(cpuPerGiB(r).toFixed(3)),
          peak_rss_bytes: r.rss,
          peak_anon_rss_bytes: r.anon,
          anon_rss_growth_bytes: r.anonGrowth,
        })),
        ratio_put_over_curl: Number(ratio(put, curlRun).toFixed(3)),
        ratio_multipart_over_curl: Number(ratio(multi, curlRun).toFixed(3)),
        ratio_multipart_over_undici_parts: Number(ratio(multi, parts).toFixed(3)),
        hash_mb_per_s: { sha256: Math.round(h.sha256), md5: Math.round(h.md5) },
        sha256_file_alone_mb_per_s: Number(hashCeiling.toFixed(1)),
        ratio_sha256_alone_over_curl: curlRun ? Number((hashCeiling / mbps(curlRun)).toFixed(3)) : null,
        baseline: slower?.label ?? null,
      })}\n`,
    );
    const mib = size / MiB;
    const curlName = 'curl -T, same file and receiver';
    const curlMbps = curlRun ? mbps(curlRun) : null;
    return [
      row({ name: `upload http-put, ${mib} MiB`, figure: mbps(put), unit: 'MB/s', baseline, baselineUnit: baseline === null ? null : 'MB/s', baselineName }),
      row({ name: `upload s3-multipart, ${mib} MiB, ${parallel} parts`, figure: mbps(multi), unit: 'MB/s', baseline, baselineUnit: baseline === null ? null : 'MB/s', baselineName }),
      row({ name: `upload http-put against curl -T alone, ${mib} MiB`, figure: mbps(put), unit: 'MB/s', baseline: curlMbps, baselineUnit: curlMbps === null ? null : 'MB/s', baselineName: curlRun ? curlName : 'curl not installed' }),
      row({ name: `upload s3-multipart against curl -T alone, ${mib} MiB`, figure: mbps(multi), unit: 'MB/s', baseline: curlMbps, baselineUnit: curlMbps === null ? null : 'MB/s', baselineName: curlRun ? curlName : 'curl not installed' }),
      row({ name: `upload http-put, CPU per GiB`, figure: cpuPerGiB(put), unit: 'CPU s/GiB', baseline: scriptCpu, baselineUnit: scriptCpu === null ? null : 'CPU s/GiB', baselineName: 'sha256sum plus curl -T of the same file' }),
      row({ name: `upload s3-multipart, CPU per GiB`, figure: cpuPerGiB(multi), unit: 'CPU s/GiB', baseline: scriptCpu, baselineUnit: scriptCpu === null ? null : 'CPU s/GiB', baselineName: 'sha256sum plus curl -T of the same file' }),
      row({ name: `upload http-put, agent anon RSS growth`, figure: (put.anonGrowth ?? NaN) / MiB, unit: 'MiB', baseline: null, baselineUnit: null }),
      row({ name: `upload s3-multipart, agent anon RSS growth`, figure: (multi.anonGrowth ?? NaN) / MiB, unit: 'MiB', baseline: null, baselineUnit: null }),
    ];
  },
};
