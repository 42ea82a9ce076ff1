import { createHash, randomBytes } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ManualClock } from '@fleet/protocol';
import { Agent as HttpAgent } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { makeTempDir, removeTempDirs } from '../test-support.js';
import { ManualScheduler } from '../time.js';
import { meteredRange, RateLimiter } from './rate-limit.js';
import { paceOnManualClock, TestStorage } from './test-storage.js';
import { multipartUpload, putFile } from './transfer.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
  await removeTempDirs();
});

const turn = () => new Promise<void>((resolve) => setImmediate(resolve));

function manual(): { clock: ManualClock; scheduler: ManualScheduler } {
  const clock = new ManualClock(0);
  return { clock, scheduler: new ManualScheduler(clock) };
}

describe('RateLimiter', () => {
  it('three streams sharing one limiter get the limit together (within 2 %) and about a third each', async () => {
    const { clock, scheduler } = manual();
    const limiter = new RateLimiter({ bytesPerSecond: 100_000, clock, scheduler, burstBytes: 10_000 });
    const sent = [0, 0, 0];
    let stop = false;
    const streams = sent.map(async (_, i) => {
      while (!stop) {
        await limiter.take(4096);
        sent[i]! += 4096;
      }
    });
    for (let t = 0; t < 10_000; t += 10) {
      scheduler.advance(10);
      for (let k = 0; k < 5; k++) await turn();
    }
    stop = true;
    scheduler.advance(1_000);
    await Promise.all(streams);
    const total = sent.reduce((a, b) => a + b, 0);
    // 10 s at 100 kB/s, plus the burst, plus the turns reserved when stop was set.
    expect(total).toBeGreaterThan(1_000_000 * 0.98);
    expect(total).toBeLessThan(1_000_000 * 1.02 + 10_000 + 3 * 4096);
    for (const s of sent) expect(Math.abs(s - total / 3)).toBeLessThan(total * 0.05);
  });

  it('lets the burst through at once after an idle spell, then paces', async () => {
    const { clock, scheduler } = manual();
    const limiter = new RateLimiter({ bytesPerSecond: 1000, clock, scheduler, burstBytes: 500 });
    let done = 0;
    void limiter.take(500).then(() => (done += 1));
    await turn();
    expect(done).toBe(1);
    void limiter.take(100).then(() => (done += 1));
    await turn();
    expect(done).toBe(1);
    expect(limiter.waiting).toBe(1);
    scheduler.advance(99);
    await turn();
    expect(done).toBe(1);
    scheduler.advance(1);
    await turn();
    expect(done).toBe(2);
    // Idle for a long time: only the burst is saved up, not the whole idle time.
    scheduler.advance(60_000);
    void limiter.take(500).then(() => (done += 1));
    void limiter.take(500).then(() => (done += 1));
    await turn();
    expect(done).toBe(3);
    scheduler.advance(500);
    await turn();
    expect(done).toBe(4);
  });

  it('an abort ends a wait at once', async () => {
    const { clock, scheduler } = manual();
    const limiter = new RateLimiter({ bytesPerSecond: 1024, clock, scheduler, burstBytes: 1024 });
    await limiter.take(1024);
    const ac = new AbortController();
    const waiting = limiter.take(1024, ac.signal);
    expect(limiter.waiting).toBe(1);
    ac.abort(new Error('stopping'));
    await expect(waiting).rejects.toThrow('stopping');
    expect(limiter.waiting).toBe(0);
    expect(scheduler.pending).toBe(0);
  });

  it('refuses a rate that is not positive', () => {
    const { clock, scheduler } = manual();
    expect(() => new RateLimiter({ bytesPerSecond: 0, clock, scheduler })).toThrow(RangeError);
  });
});

describe('metered bodies', () => {
  it('a range read piece by piece hands on every byte, in order, counting each piece', async () => {
    const data = randomBytes(3 * 1024 * 1024 + 5);
    let counted = 0;
    const reads: number[] = [];
    const out: Buffer[] = [];
    const read = (at: number, n: number) => {
      reads.push(at);
      return data.subarray(at, at + n);
    };
    for await (const c of meteredRange(read, data.length, { onBytes: (n) => (counted += n) })) out.push(c);
    expect(Buffer.concat(out).equals(data)).toBe(true);
    expect(counted).toBe(data.length);
    expect(reads).toEqual([0, 1024 * 1024, 2 * 1024 * 1024, 3 * 1024 * 1024]);
  });
});

describe('an upload under the limit', () => {
  it('a PUT and a multipart upload at once to a local server take size/limit on the injected clock (within 5 %)', async () => {
    const storage = await TestStorage.start();
    const dispatcher = new HttpAgent();
    cleanups.push(async () => {
      await dispatcher.close();
      await storage.close();
    });
    const { clock, scheduler } = manual();
    const rate = 512 * 1024;
    const limiter = new RateLimiter({ bytesPerSecond: rate, clock, scheduler });
    const http = { dispatcher, allowHttp: true, timeoutMs: 10_000, limiter };
    const dir = await makeTempDir();
    const a = randomBytes(2 * 1024 * 1024);
    const b = randomBytes(2 * 1024 * 1024);
    await writeFile(join(dir, 'a.bin'), a);
    await writeFile(join(dir, 'b.bin'), b);
    const sha = (x: Buffer) => createHash('sha256').update(x).digest('hex');
    const entry = storage.grantFile('b.bin', 'b', b.length, 256 * 1024);
    if (!('upload_id' in entry)) throw new Error('expected a multipart entry');
    let counted = 0;
    const signal = new AbortController().signal;
    let finished = 0;
    const uploads = [
      putFile({ http, url: storage.putUrl('a'), file: join(dir, 'a.bin'), label: 'a.bin', size: a.length, expectedSha256: sha(a), signal, onFirstByte: () => undefined, onBytes: (n) => (counted += n) }),
      multipartUpload({
        http,
        job: { file: join(dir, 'b.bin'), label: 'b.bin', size: b.length, expectedSha256: sha(b), uploadId: entry.upload_id, partSize: 256 * 1024, partUrls: entry.part_urls, completeUrl: entry.complete_url, done: new Map() },
        parallel: 2,
        signal,
        onFirstByte: () => undefined,
        onPart: async () => undefined,
        onBytes: (n) => (counted += n),
      }),
    ].map((p) => p.finally(() => (finished += 1)));
    // Time moves only while a body waits for its turn and every turn let go has been counted: what
    // is measured is the limiter's pace, not the machine's. The bytes let go by each two-second
    // mark are read off the limiter itself, at the step that reaches the mark.
    const marks = [0];
    await paceOnManualClock({
      limiter,
      scheduler,
      counted: () => counted,
      done: () => finished === uploads.length,
      onStep: () => {
        if (clock.now() % 2000 === 0) marks.push(limiter.granted);
      },
    });
    await Promise.all(uploads);
    const total = a.length + b.length;
    expect(counted).toBe(total);
    expect(storage.objects.get('a')!.body.equals(a)).toBe(true);
    expect(storage.objects.get('b')!.body.equals(b)).toBe(true);
    const expectedMs = (total * 1000) / rate;
    expect(clock.now()).toBeGreaterThan(expectedMs * 0.95);
    expect(clock.now()).toBeLessThan(expectedMs * 1.05);
    // Every whole two-second window of the run carried the limit (64 KiB turns and the burst: a
    // window may be one turn off).
    expect(limiter.granted).toBe(total);
    expect(marks.length - 1).toBe(Math.floor(clock.now() / 2000));
    expect(marks.length - 1).toBeGreaterThanOrEqual(3);
    for (let w = 1; w < marks.length; w++) {
      const perSecond = (marks[w]! - marks[w - 1]!) / 2;
      expect(perSecond).toBeGreaterThan(rate * 0.9);
      expect(perSecond).toBeLessThan(rate * 1.1);
    }
  }, 30_000);
});
