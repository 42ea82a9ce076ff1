import { GrantAnswerSchema, ManualClock, isMultipartFile, type GrantRequestEnvelope, type MultipartGrantFile } from '@fleet/protocol';
import { pino } from 'pino';
import { describe, expect, test } from 'vitest';
import { parseGrantProviderConfig } from './config.js';
import { answerGrantRequest } from './grants.js';
import type { InFlightUpload, UploadStore } from './s3-store.js';

const MiB = 1024 * 1024;
const config = parseGrantProviderConfig({
  secrets: ['dsec_0123456789abcdef'],
  insecureHttp: true,
  s3Bucket: 'bucket',
  keyPrefix: 'fleet/',
  multipartThresholdBytes: 8 * MiB,
  partSizeBytes: 5 * MiB,
});
const logger = pino({ level: 'silent' });

/** An in-memory store: signed URLs say what and when they were signed for. */
class FakeStore implements UploadStore {
  uploads: InFlightUpload[] = [];
  created: string[] = [];
  down = false;
  private n = 0;
  async listUploads(prefix: string): Promise<InFlightUpload[]> {
    if (this.down) throw Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' });
    return this.uploads.filter((u) => u.key.startsWith(prefix));
  }
  async createUpload(key: string): Promise<string> {
    const uploadId = `up_${++this.n}`;
    this.uploads.push({ key, uploadId, initiated: new Date(this.n * 1000).toISOString() });
    this.created.push(key);
    return uploadId;
  }
  presignPut = async (key: string, at: Date) => `https://s3/${key}?at=${at.getTime()}`;
  presignPart = async (key: string, id: string, n: number, at: Date) => `https://s3/${key}?uploadId=${id}&partNumber=${n}&at=${at.getTime()}`;
  presignComplete = async (key: string, id: string, at: Date) => `https://s3/${key}?uploadId=${id}&at=${at.getTime()}`;
  presignGet = async (key: string, at: Date) => `https://s3/${key}?get&at=${at.getTime()}`;
  close(): void {}
}

function envelope(files: [string, number][], extra: Partial<GrantRequestEnvelope['request']> = {}): GrantRequestEnvelope {
  return {
    episode_id: 'ep_1',
    org_id: 'org_1',
    request: {
      destination_id: 'dst_1',
      episode: { robot_id: 'rob_1', recording_session_id: 'rs_1', episode_seq: 1 },
      manifest: { files: files.map(([path, size_bytes]) => ({ path, size_bytes, sha256: 'a'.repeat(64) })), total_bytes: 0 },
      ...extra,
    },
  };
}

function setup() {
  const store = new FakeStore();
  const clock = new ManualClock();
  let g = 0;
  return { store, clock, deps: { store, clock, logger, newGrantId: () => `grt_${++g}` } };
}

describe('answerGrantRequest', () => {
  test('a grant the cloud accepts: every file at its path, parts covering the file, expiry one hour on', async () => {
    const { store, clock, deps } = setup();
    const answer = await answerGrantRequest(envelope([['a.mcap', 12 * MiB], ['b.json', 10]]), config, deps);
    expect(GrantAnswerSchema.safeParse(answer).success).toBe(true);
    expect(answer).toMatchObject({ grant_id: 'grt_1', retry_after: null, expires_at: new Date(clock.now() + 3600_000).toISOString() });
    const dest = answer.destinations[0] as { protocol: string; object_key: string; files: unknown[] };
    expect(dest).toMatchObject({ protocol: 's3-multipart', object_key: 'fleet/org_1/rob_1/ep_1/' });
    const [mp, put] = dest.files as [MultipartGrantFile, { path: string; put_url: string }];
    expect(mp).toMatchObject({ path: 'a.mcap', upload_id: 'up_1', part_size: 5 * MiB });
    expect(mp.part_urls).toHaveLength(3);
    expect(mp.part_urls[2]).toContain('partNumber=3');
    expect(put.put_url).toContain('fleet/org_1/rob_1/ep_1/b.json');
    expect(store.created).toEqual(['fleet/org_1/rob_1/ep_1/a.mcap']);
  });

  test('a re-ask: the same upload id, fresh URLs, a new grant id, nothing created', async () => {
    const { store, clock, deps } = setup();
    const env = envelope([['a.mcap', 12 * MiB]]);
    const first = await answerGrantRequest(env, config, deps);
    clock.advance(60_000);
    const second = await answerGrantRequest(env, config, deps);
    const f1 = (first.destinations[0] as { files: MultipartGrantFile[] }).files[0]!;
    const f2 = (second.destinations[0] as { files: MultipartGrantFile[] }).files[0]!;
    expect(f2.upload_id).toBe(f1.upload_id);
    expect(f2.part_urls[0]).not.toBe(f1.part_urls[0]);
    expect(second.grant_id).not.toBe(first.grant_id);
    expect(store.created).toHaveLength(1);
  });

  test('the resume block picks among several uploads of one key; an unknown one gets the oldest', async () => {
    const { store, deps } = setup();
    const key = 'fleet/org_1/rob_1/ep_1/a.mcap';
    store.uploads = [
      { key, uploadId: 'old', initiated: '2026-01-01T00:00:00.000Z' },
      { key, uploadId: 'new', initiated: '2026-01-01T00:01:00.000Z' },
    ];
    const resume = (id: string) => [{ destination_id: 'dst_1', uploads: [{ path: 'a.mcap', upload_id: id, parts_done: [1] }] }];
    const pick = async (id: string) =>
      ((await answerGrantRequest(envelope([['a.mcap', 12 * MiB]], { resume: resume(id) }), config, deps)).destinations[0] as { files: MultipartGrantFile[] }).files[0]!.upload_id;
    expect(await pick('new')).toBe('new');
    expect(await pick('gone')).toBe('old');
    expect(store.created).toEqual([]);
  });

  test('a check lists but creates nothing, and still answers every file', async () => {
    const { store, deps } = setup();
    const answer = await answerGrantRequest(envelope([['a.mcap', 12 * MiB], ['b', 1]], { check: true }), config, deps);
    expect(answer.grant_id).not.toBeNull();
    const files = (answer.destinations[0] as { files: { path: string }[] }).files;
    expect(files.map((f) => f.path)).toEqual(['a.mcap', 'b']);
    expect(files.some((f) => isMultipartFile(f as MultipartGrantFile))).toBe(false);
    expect(store.created).toEqual([]);
  });

  test('an answer that would pass 1 MiB (thousands of files) is a deferral, not an answer the cloud refuses', async () => {
    const { store, deps } = setup();
    // Real presigned URLs are about 500 bytes.
    store.presignPut = async (key: string) => `https://bucket.s3.example/${key}?${'X'.repeat(450)}`;
    expect((await answerGrantRequest(envelope([['a', 1]]), config, deps)).grant_id).not.toBeNull();
    const files = Array.from({ length: 2000 }, (_, i): [string, number] => [`frames/${String(i).padStart(6, '0')}.jpg`, 1000]);
    expect(await answerGrantRequest(envelope(files), config, deps)).toMatchObject({ grant_id: null, retry_after: 3600 });
  });

  test('the store unreachable: a deferral with the configured retry_after', async () => {
    const { store, deps } = setup();
    store.down = true;
    expect(await answerGrantRequest(envelope([['a', 1]]), config, deps)).toEqual({ grant_id: null, destinations: [], retention: { local: 'keep' }, retry_after: 30 });
    expect(await answerGrantRequest(envelope([['a', 1]], { check: true }), config, deps)).toMatchObject({ grant_id: null });
  });
});
