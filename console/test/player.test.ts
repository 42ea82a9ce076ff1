/**
 * The episode page's player in Chromium, against real parts: `fleet-cloud serve` with a read
 * origin, the reference grant provider issuing presigned read links, the S3-compatible test
 * server with a CORS rule for the console's origin and a request log, and a simulated robot whose
 * ROS 2 recording (zstd chunks, a JPEG and a raw rgb8 camera, joint states) is verified in the
 * bucket. The browser reads the recording from the bucket by Range GETs through a small proxy in
 * this file that can expire links (an S3 "Request has expired" 403), so renewal is tested on
 * real presigned URLs. Expected values come from the same object read in Node with
 * @fleet/recordings; JPEG frames are compared with ffmpeg's decode of the same bytes.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { createServer, request, type IncomingMessage, type Server } from 'node:http';
import { cameraImage, openMcap, type McapRecording } from '@fleet/recordings';
import { fileSource } from '@fleet/recordings/node';
import { createTestPki, type TestPki } from '../../cloud/src/egress/test-https.js';
import { checkA11y, launchBrowser, PHONE, screenshot, type TestBrowser, type WatchedPage } from '../../test/support/browser.js';
import { makeTempDir, REPO_ROOT, startCloud, type CloudProcess, type TempDir } from '../../test/support/cloud.js';
import { ensureDebianPackages, FFMPEG } from '../../test/support/debian.js';
import { holdExclusive } from '../../test/support/exclusive.js';
import { startGrantProvider, writeProviderTls, type GrantProviderProcess } from '../../test/support/grant-provider.js';
import { freePort, okJson } from '../../test/support/http.js';
import { sendCommand, startFleet, type FleetProcess } from '../../test/support/robots.js';
import { startS3Server, type S3Request, type S3ServerProcess } from '../../test/support/s3-server.js';
import { waitFor } from '../../test/support/wait.js';
import { CONSOLE_DIST, signIn } from './harness.js';
import { attr, canvasRgb, latestAtOrBefore, seekIntoRecording } from './player-support.js';

/** Long enough that the 10 s plot window around a seek is a fraction of the file. */
const RECORD_MS = 40_000;
const JOINT_TOPIC = '/joint_states';
const RAW_TOPIC = '/camera/front/image_raw';
const JPEG_TOPIC = '/camera/front/image_raw/compressed';
/** Mean absolute difference per channel accepted between Chromium's and ffmpeg's decode of one JPEG. */
const JPEG_MAD = 2;
/** Screenshots of the player go here when FLEET_PLAYER_SCREENSHOTS=1 (docs/console). */
const SHOTS = process.env.FLEET_PLAYER_SCREENSHOTS === '1' ? join(REPO_ROOT, 'docs', 'console') : undefined;

/**
 * An HTTP proxy in front of the S3 server (Host kept, so SigV4 presigned URLs made for its
 * address verify at the store) that answers S3's "Request has expired" 403, with the CORS
 * headers S3 keeps on errors, to GETs of links signed at or before a cutoff. It keeps each GET's
 * X-Amz-Date (not a secret) and never the rest of the query string.
 */
interface ExpiringProxy {
  endpoint: string;
  /** Links signed at or before `amzDate` (`YYYYMMDDTHHMMSSZ`) are refused from now on. */
  expireUpTo(amzDate: string): void;
  /** The X-Amz-Date of every presigned GET seen, and how each was answered. */
  readonly seen: { amzDate: string; status: number }[];
  close(): Promise<void>;
}

async function startExpiringProxy(target: string): Promise<ExpiringProxy> {
  const upstream = new URL(target);
  const seen: { amzDate: string; status: number }[] = [];
  let cutoff = '';
  const server: Server = createServer((req: IncomingMessage, res) => {
    const u = new URL(req.url ?? '/', 'http://proxy');
    const amzDate = u.searchParams.get('X-Amz-Date') ?? '';
    if (req.method === 'GET' && amzDate !== '' && amzDate <= cutoff) {
      seen.push({ amzDate, status: 403 });
      const origin = req.headers.origin;
      res.writeHead(403, { 'content-type': 'application/xml', ...(origin ? { 'access-control-allow-origin': origin, 'access-control-expose-headers': 'Content-Range, Content-Length, ETag, Accept-Ranges' } : {}) });
      res.end('<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>Request has expired</Message></Error>');
      req.resume();
      return;
    }
    const out = request({ host: upstream.hostname, port: upstream.port, method: req.method, path: req.url, headers: req.headers }, (answer) => {
      if (req.method === 'GET' && amzDate !== '') seen.push({ amzDate, status: answer.statusCode ?? 0 });
      res.writeHead(answer.statusCode ?? 502, answer.headers);
      answer.pipe(res);
    });
    out.on('error', () => res.destroy());
    req.pipe(out);
    res.on('close', () => out.destroy());
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    endpoint: `http://127.0.0.1:${(server.address() as { port: number }).port}`,
    expireUpTo: (d) => void (cutoff = d),
    seen,
    close: () => new Promise<void>((r) => (server.closeAllConnections(), server.close(() => r()))),
  };
}

interface PlayerStack extends AsyncDisposable {
  cloud: CloudProcess;
  s3: S3ServerProcess;
  proxy: ExpiringProxy;
  episodeId: string;
  /** The episode's MCAP as the store holds it, opened in Node. */
  recording: McapRecording;
  fileSize: number;
  /** Starts the provider again on its port, with read links on or off. */
  restartProvider(reads: boolean): Promise<void>;
}

async function startPlayerStack(opts: { recordMs: number }): Promise<PlayerStack> {
  const cleanups: (() => PromiseLike<unknown>)[] = [];
  const dispose = async () => {
    for (const c of cleanups.splice(0).reverse()) await Promise.resolve(c()).catch(() => undefined);
  };
  try {
    const pki: TestPki = createTestPki();
    cleanups.push(async () => pki.cleanup());
    const tmp: TempDir = await makeTempDir('fleet-player-');
    cleanups.push(() => tmp[Symbol.asyncDispose]());
    const tls = { ...writeProviderTls(pki, tmp.path), ca: pki.caPem };
    const s3 = await startS3Server({ implementation: 's3rver', requestLog: true });
    cleanups.push(() => s3[Symbol.asyncDispose]());
    const proxy = await startExpiringProxy(s3.endpoint);
    cleanups.push(() => proxy.close());
    const cloud = await startCloud({ args: ['--console-dir', CONSOLE_DIST, '--egress-allow-loopback', '--egress-ca-file', pki.caFile, '--read-origin', proxy.endpoint], logLevel: 'warn' });
    cleanups.push(() => cloud[Symbol.asyncDispose]());
    await s3.setCors([cloud.http]);
    const port = await freePort();
    const destination = await okJson<{ id: string; secret: string }>(await cloud.fetch('/v1/destinations', { method: 'POST', json: { type: 'external', url: `https://127.0.0.1:${port}/grant` } }));
    // Presigned for the proxy's address: uploads and the browser's reads both go through it.
    const providerOpts = { s3: { ...s3, endpoint: proxy.endpoint }, secret: destination.secret, tls, args: ['--port', String(port)] };
    let provider: GrantProviderProcess | undefined = await startGrantProvider(providerOpts);
    cleanups.push(async () => provider?.[Symbol.asyncDispose]());
    const fleet: FleetProcess = await startFleet(cloud, { count: 1, logLevel: 'warn', args: ['--allow-http-uploads', '--camera-width', '320', '--camera-height', '240', '--camera-hz', '15', '--state-hz', '50'] });
    cleanups.push(() => fleet[Symbol.asyncDispose]());
    const robot = fleet.robots[0]!;
    const started = await sendCommand(cloud, robot, 'episodes/start', { body: { task_id: 'pick-cube' } });
    if (started.status !== 200) throw new Error(`episodes/start: ${JSON.stringify(started.body)}`);
    const episodeId = String(started.body.result!.episode_id);
    // The recording's length is the input: nothing else to wait on.
    await new Promise((r) => setTimeout(r, opts.recordMs));
    const done = await sendCommand(cloud, robot, 'episodes/finish');
    if (done.status !== 200) throw new Error(`episodes/finish: ${JSON.stringify(done.body)}`);
    const c = cloud.client();
    const ep = await waitFor(
      async () => {
        const e = await c.episodes.get(episodeId);
        return e.replicas[0]?.state === 'verified' ? e : undefined;
      },
      { timeoutMs: 180_000, intervalMs: 250, description: `episode ${episodeId} verified in the bucket` },
    );
    const files = await c.episodes.files(episodeId);
    const mcap = files.files.find((f) => f.path.endsWith('.mcap'))!;
    const prefix = ep.replicas[0]!.object_key ?? '';
    const key = (await s3.listObjects()).map((o) => o.key).find((k) => k.startsWith(prefix) && k.endsWith(mcap.path));
    if (!key) throw new Error(`no object for ${mcap.path} under ${prefix}`);
    // From s3rver's own file: no request that would show in the request log.
    const recording = await openMcap(await fileSource(s3.objectFile(key)!), { name: mcap.path });
    cleanups.push(() => recording.close());
    return {
      cloud,
      s3,
      proxy,
      episodeId,
      recording,
      fileSize: mcap.size_bytes,
      async restartProvider(reads) {
        await provider?.[Symbol.asyncDispose]();
        provider = undefined;
        provider = await startGrantProvider({ ...providerOpts, reads });
      },
      [Symbol.asyncDispose]: dispose,
    };
  } catch (err) {
    await dispose();
    throw err;
  }
}

let stack: PlayerStack;
let cloud: CloudProcess;
let s3: S3ServerProcess;
let proxy: ExpiringProxy;
let browser: TestBrowser;
let release: AsyncDisposable;
let episodeId: string;
let recording: McapRecording;
let fileSize: number;

beforeAll(async () => {
  const missing = ensureDebianPackages([FFMPEG]);
  if (missing.length > 0) throw new Error('ffmpeg is needed: apt-get install -y ffmpeg (as root the tests install it)');
  // One chromium with a cloud at a time across the run's workers (console/test/harness.ts).
  release = await holdExclusive('console-browser');
  [stack, browser] = await Promise.all([startPlayerStack({ recordMs: RECORD_MS }), launchBrowser()]);
  ({ cloud, s3, proxy, episodeId, recording, fileSize } = stack);
}, 420_000);

afterAll(async () => {
  await browser?.close();
  await stack?.[Symbol.asyncDispose]();
  await release?.[Symbol.asyncDispose]();
});

async function openPlayer(): Promise<WatchedPage> {
  const watched = await browser.newPage();
  await signIn(watched.page, cloud.http, cloud.adminKey);
  await watched.page.goto(`${cloud.http}/console/episodes/${episodeId}`);
  return watched;
}

function ffmpegRgb(jpeg: Uint8Array): Buffer {
  const dir = mkdtempSync(join(tmpdir(), 'fleet-jpeg-'));
  try {
    const file = join(dir, 'frame.jpg');
    writeFileSync(file, jpeg);
    return execFileSync('ffmpeg', ['-v', 'error', '-i', file, '-f', 'rawvideo', '-pix_fmt', 'rgb24', '-'], { maxBuffer: 64 * 1024 * 1024 });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function meanAbsDiff(a: Buffer, b: Buffer): number {
  let sum = 0;
  for (let i = 0; i < a.length; i++) sum += Math.abs(a[i]! - b[i]!);
  return sum / a.length;
}

/** The browser's requests to the store (they carry the console's Origin); robots' uploads do not. */
async function browserRequests(): Promise<S3Request[]> {
  return (await s3.requests()).filter((r) => r.origin === cloud.http);
}

describe('the episode player', () => {
  test('opens the episode: first frame of each camera drawn from the bucket, zstd chunks decoded under the real CSP, zero console errors', async () => {
    const { page, errors } = await openPlayer();
    const res = await page.reload();
    const csp = res!.headers()['content-security-policy'] ?? '';
    expect(csp).toContain("'wasm-unsafe-eval'");
    expect(csp).toContain(proxy.endpoint);
    await page.getByRole('heading', { name: 'Recording' }).waitFor();
    for (const topic of [RAW_TOPIC, JPEG_TOPIC]) {
      await expect.poll(() => attr(page, `canvas[data-topic="${topic}"]`, 'data-frame-log-time'), { timeout: 60_000 }).not.toBeNull();
      const first = await recording.first(topic);
      const playhead = BigInt((await attr(page, '.player-stage', 'data-playhead-ns'))!);
      const expected = await latestAtOrBefore(recording, topic, playhead);
      expect(await attr(page, `canvas[data-topic="${topic}"]`, 'data-frame-log-time')).toBe((expected ?? first)!.logTimeNs.toString());
    }
    // The links live in memory only: not in the address, storage or console output.
    expect(page.url()).not.toContain('X-Amz');
    expect(await page.evaluate(() => JSON.stringify({ ...sessionStorage }) + JSON.stringify({ ...localStorage }))).not.toContain('X-Amz');
    if (SHOTS) await screenshot(page, SHOTS, 'player', { fullPage: false });
    expect(errors).toEqual([]);
    await page.close();
  });

  test('a seek shows the source frame at that time (raw exactly, JPEG within ffmpeg\'s decode), the readout equals the source, and reads far less than the file by Range GETs only', async () => {
    const { page, errors } = await openPlayer();
    await expect.poll(() => attr(page, `canvas[data-topic="${RAW_TOPIC}"]`, 'data-frame-log-time'), { timeout: 60_000 }).not.toBeNull();
    // Settle the first window's reads, then measure the seek alone.
    await expect.poll(() => page.locator('.player-plot').count(), { timeout: 30_000 }).toBeGreaterThan(0);
    await s3.clearRequests();
    const playhead = await seekIntoRecording(page);

    // Frames: the latest message with log time <= playhead.
    const raw = (await latestAtOrBefore(recording, RAW_TOPIC, playhead))!;
    const jpeg = (await latestAtOrBefore(recording, JPEG_TOPIC, playhead))!;
    await expect.poll(() => attr(page, `canvas[data-topic="${RAW_TOPIC}"]`, 'data-frame-log-time'), { timeout: 30_000 }).toBe(raw.logTimeNs.toString());
    await expect.poll(() => attr(page, `canvas[data-topic="${JPEG_TOPIC}"]`, 'data-frame-log-time'), { timeout: 30_000 }).toBe(jpeg.logTimeNs.toString());
    const rawImage = cameraImage(recording.channel(RAW_TOPIC)!.schemaName, raw.data, 'raw');
    if (rawImage.kind !== 'raw') throw new Error('expected a raw frame');
    const drawnRaw = await canvasRgb(page, RAW_TOPIC);
    expect([drawnRaw.width, drawnRaw.height]).toEqual([rawImage.width, rawImage.height]);
    expect(drawnRaw.rgb.equals(Buffer.from(rawImage.rgb))).toBe(true);
    const jpegImage = cameraImage(recording.channel(JPEG_TOPIC)!.schemaName, jpeg.data, 'jpeg');
    if (jpegImage.kind !== 'compressed') throw new Error('expected a compressed frame');
    const reference = ffmpegRgb(jpegImage.data);
    const drawnJpeg = await canvasRgb(page, JPEG_TOPIC);
    expect(drawnJpeg.rgb.length).toBe(reference.length);
    expect(meanAbsDiff(drawnJpeg.rgb, reference)).toBeLessThanOrEqual(JPEG_MAD);

    // The readout: each plotted joint position at the playhead is the source's latest sample.
    const joints = (await latestAtOrBefore(recording, JOINT_TOPIC, playhead))!;
    const js = joints.data as { name: string[]; position: ArrayLike<number> };
    const rows = page.locator('tr[data-series]');
    await expect.poll(() => rows.first().getAttribute('data-log-time')).toBe(joints.logTimeNs.toString());
    const shown = await rows.evaluateAll((trs) => trs.map((tr) => [tr.getAttribute('data-series'), tr.getAttribute('data-value')]));
    expect(shown.length).toBeGreaterThan(0);
    for (const [series, value] of shown) {
      const m = /^\/joint_states position\.(.+)$/.exec(series ?? '');
      expect(m, `series ${series}`).not.toBeNull();
      const i = js.name.indexOf(m![1]!);
      expect(Number(value)).toBe(js.position[i]);
    }

    // Only Range GETs (and CORS preflights), and the seek read a fraction of the file.
    await expect.poll(async () => (await browserRequests()).length).toBeGreaterThan(0);
    await expect.poll(() => page.locator('.player-plot').count(), { timeout: 30_000 }).toBeGreaterThan(0);
    const reqs = await browserRequests();
    for (const r of reqs.filter((x) => x.method !== 'OPTIONS')) {
      expect(r.method).toBe('GET');
      expect(r.range).toMatch(/^bytes=\d+-\d+$/);
      expect(r.status).toBe(206);
    }
    const bytes = reqs.reduce((n, r) => n + r.bytes, 0);
    expect(bytes).toBeLessThan(fileSize * 0.4);
    expect(await checkA11y(page)).toEqual([]);
    if (SHOTS) {
      await screenshot(page, SHOTS, 'player-seek', { fullPage: true });
      await page.setViewportSize(PHONE);
      await screenshot(page, SHOTS, 'player-phone', { fullPage: false });
    }
    expect(errors).toEqual([]);
    await page.close();
  });

  test('plays, and a link that expires mid-playback is renewed: the playhead goes on from where it was', async () => {
    const { page, errors } = await openPlayer();
    await expect.poll(() => attr(page, `canvas[data-topic="${RAW_TOPIC}"]`, 'data-frame-log-time'), { timeout: 60_000 }).not.toBeNull();
    await page.getByRole('button', { name: 'Play' }).click();
    const startNs = BigInt((await attr(page, '.player-stage', 'data-start-ns'))!);
    await expect.poll(async () => BigInt((await attr(page, '.player-stage', 'data-playhead-ns'))!) - startNs > 1_000_000_000n, { timeout: 30_000 }).toBe(true);
    // Every link issued so far expires now.
    const issued = proxy.seen.map((s) => s.amzDate).sort().at(-1)!;
    proxy.expireUpTo(issued);
    const before = BigInt((await attr(page, '.player-stage', 'data-playhead-ns'))!);
    await expect.poll(() => proxy.seen.some((s) => s.status === 403), { timeout: 60_000 }).toBe(true);
    await expect.poll(() => proxy.seen.some((s) => s.amzDate > issued && s.status === 206), { timeout: 60_000 }).toBe(true);
    // Still playing past the renewal, never sent back to the start.
    await expect.poll(async () => BigInt((await attr(page, '.player-stage', 'data-playhead-ns'))!) > before + 500_000_000n, { timeout: 30_000 }).toBe(true);
    expect(await page.locator('.player-problem').count()).toBe(0);
    // The refused GETs show as failed loads in the browser's console; nothing else may.
    expect(errors.filter((e) => !/status of 403/.test(e))).toEqual([]);
    await page.close();
  });

  test('keys: Space plays and pauses, → and ← step frames of the main camera, End and Home jump', async () => {
    const { page, errors } = await openPlayer();
    const canvas = `canvas[data-topic="${RAW_TOPIC}"]`;
    await expect.poll(() => attr(page, canvas, 'data-frame-log-time'), { timeout: 60_000 }).not.toBeNull();
    await page.locator('h1').click();
    const first = BigInt((await attr(page, canvas, 'data-frame-log-time'))!);
    // Steps follow the main camera (the first shown), whichever of the two it is.
    await page.keyboard.press('ArrowRight');
    await expect.poll(async () => BigInt((await attr(page, '.player-stage', 'data-playhead-ns'))!) > first).toBe(true);
    const stepped = BigInt((await attr(page, '.player-stage', 'data-playhead-ns'))!);
    await page.keyboard.press('ArrowLeft');
    await expect.poll(async () => BigInt((await attr(page, '.player-stage', 'data-playhead-ns'))!) < stepped).toBe(true);
    await page.keyboard.press('End');
    await expect.poll(() => attr(page, '.player-stage', 'data-playhead-ns')).toBe(await attr(page, '.player-stage', 'data-end-ns'));
    await page.keyboard.press('Home');
    await expect.poll(() => attr(page, '.player-stage', 'data-playhead-ns')).toBe(await attr(page, '.player-stage', 'data-start-ns'));
    await page.keyboard.press(' ');
    await expect.poll(() => attr(page, '.player-stage', 'data-status')).toMatch(/playing|buffering/);
    await page.keyboard.press(' ');
    await expect.poll(() => attr(page, '.player-stage', 'data-status')).toBe('paused');
    await page.keyboard.press(']');
    await expect.poll(() => page.getByLabel('Speed').inputValue()).toBe('1.5');
    expect(errors).toEqual([]);
    await page.close();
  });

  test('an episode of another organization is not found, on the page and for read links', async () => {
    const org = await cloud.cli(['orgs', 'create', '--name', 'other', '--tier', 'pro']);
    expect(org.code, org.stderr).toBe(0);
    const key = await cloud.cli(['keys', 'create', '--org', org.stdout.trim(), '--name', 'other admin', '--scopes', 'admin']);
    expect(key.code, key.stderr).toBe(0);
    const otherKey = key.stdout.trim();
    const res = await fetch(`${cloud.http}/v1/episodes/${episodeId}/read-links`, { method: 'POST', headers: { authorization: `Bearer ${otherKey}`, 'content-type': 'application/json' }, body: '{}' });
    expect(res.status).toBe(404);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('not_found');
    const { page } = await browser.newPage();
    await signIn(page, cloud.http, otherKey);
    await page.goto(`${cloud.http}/console/episodes/${episodeId}`);
    await expect.poll(() => page.getByRole('alert').first().textContent()).toContain('not_found');
    expect(await page.locator('canvas').count()).toBe(0);
    await page.close();
  });

  test('a provider without read support: the player says so in words', async () => {
    await stack.restartProvider(false);
    const { page, errors } = await openPlayer();
    const notice = page.locator('[data-problem="unsupported"]');
    await notice.waitFor({ timeout: 30_000 });
    expect(await notice.textContent()).toContain('does not issue read links');
    expect(await notice.textContent()).toContain('read_links_unsupported');
    expect(await page.locator('canvas').count()).toBe(0);
    if (SHOTS) await screenshot(page, SHOTS, 'player-unsupported');
    // The 501 shows as a failed request in the console; nothing else may.
    expect(errors.filter((e) => !/status of 501/.test(e))).toEqual([]);
    await page.close();
  });
});
