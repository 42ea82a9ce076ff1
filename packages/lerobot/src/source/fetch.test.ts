import { createHash } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { EpisodeFetcher, objectAddress, parseSourceUrl, resolveLocation } from './fetch.js';
import type { ManifestEpisode } from './manifest.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'lerobot-fetch-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');
const KEY = 'fleet/org_1/rbt_1/ep_0123456789/';
const files = { 'recording.mcap': Buffer.alloc(300_000, 7), 'bag/metadata.yaml': Buffer.from('rosbag2: {}\n') };

function line(over: Partial<ManifestEpisode> = {}, content: Record<string, Buffer> = files): ManifestEpisode {
  return {
    id: 'ep_0123456789',
    robot_id: 'rbt_1',
    task_id: 't',
    outcome: 'success',
    metadata: null,
    started_at: '2026-01-01T00:00:00.000Z',
    ended_at: null,
    files: Object.entries(content).map(([path, b]) => ({ path, size_bytes: b.length, sha256: sha256(b) })),
    locations: [{ destination_id: 'dst_a', state: 'verified', object_key: KEY, grant_id: 'g' }],
    ...over,
  };
}

/** A bucket mirrored on disk: file `path` at `<root>/<object_key>/<path>`. */
async function mirror(root: string, content: Record<string, Buffer> = files): Promise<void> {
  for (const [path, b] of Object.entries(content)) {
    await mkdir(join(root, KEY, path, '..'), { recursive: true });
    await writeFile(join(root, KEY, path), b);
  }
}

async function listTree(root: string): Promise<string[]> {
  return (await readdir(root, { recursive: true, withFileTypes: true })).filter((d) => d.isFile()).map((d) => join(d.parentPath, d.name).slice(root.length + 1)).sort();
}

describe('resolveLocation', () => {
  it('takes a verified location with a source before a synced one, and refuses when none fits', () => {
    const l = line({
      locations: [
        { destination_id: 'dst_a', state: 'synced', object_key: 'a/', grant_id: 'g' },
        { destination_id: 'dst_b', state: 'verified', object_key: 'b/', grant_id: 'g' },
        { destination_id: 'dst_c', state: 'verified', object_key: 'c/', grant_id: 'g' },
      ],
    });
    expect(resolveLocation(l, { dst_a: 's3://x', dst_c: 's3://y' }).destinationId).toBe('dst_c');
    expect(resolveLocation(l, { dst_a: 's3://x' }).destinationId).toBe('dst_a');
    expect(() => resolveLocation(l, { dst_z: 's3://x' })).toThrow(/^no_location: .*dst_a \(synced, no source\)/);
    expect(() => resolveLocation(line({ locations: [{ destination_id: 'dst_a', state: 'granted', object_key: null, grant_id: 'g' }] }), { dst_a: 's3://x' })).toThrow(
      expect.objectContaining({ code: 'no_location' }),
    );
  });

  it('joins the S3 prefix, object key and path; refuses a key that leaves a file source', () => {
    const s3 = { destinationId: 'd', state: 'verified', objectKey: KEY, source: parseSourceUrl('s3://bucket/mirror') };
    expect(objectAddress(s3, 'recording.mcap')).toBe(`mirror/${KEY}recording.mcap`);
    expect(objectAddress({ ...s3, source: parseSourceUrl('s3://bucket') }, 'a/b')).toBe(`${KEY}a/b`);
    const file = { ...s3, source: parseSourceUrl('file:///data/bucket') };
    expect(objectAddress(file, 'recording.mcap')).toBe(`/data/bucket/${KEY}recording.mcap`);
    expect(() => objectAddress({ ...file, objectKey: '../../etc/' }, 'passwd')).toThrow(expect.objectContaining({ code: 'io' }));
    expect(() => parseSourceUrl('http://x')).toThrow(expect.objectContaining({ code: 'io' }));
  });
});

describe('EpisodeFetcher, file:// source', () => {
  it('copies and verifies every file, then reuses them on resume', async () => {
    const root = join(dir, 'bucket');
    await mirror(root);
    const fetcher = new EpisodeFetcher({ sources: { dst_a: pathToFileURL(root).href } });
    const work = join(dir, 'work');
    const got = await fetcher.fetchEpisode(line(), work);
    expect(got.files.map((f) => [f.path, f.sizeBytes, f.reused])).toEqual([
      ['recording.mcap', 300_000, false],
      ['bag/metadata.yaml', 12, false],
    ]);
    expect(await readFile(join(work, 'bag', 'metadata.yaml'), 'utf8')).toBe('rosbag2: {}\n');
    expect((await fetcher.fetchEpisode(line(), work)).files.every((f) => f.reused)).toBe(true);
    // A local file that no longer matches is fetched again.
    await writeFile(join(work, 'recording.mcap'), Buffer.alloc(300_000, 8));
    expect((await fetcher.fetchEpisode(line(), work)).files.map((f) => f.reused)).toEqual([false, true]);
    expect(sha256(await readFile(join(work, 'recording.mcap')))).toBe(sha256(files['recording.mcap']));
  });

  it('a checksum or size mismatch fails the file and leaves no file behind', async () => {
    const root = join(dir, 'bucket');
    await mirror(root, { 'recording.mcap': Buffer.alloc(100, 1) });
    const fetcher = new EpisodeFetcher({ sources: { dst_a: pathToFileURL(root).href } });
    const work = join(dir, 'work');
    await expect(fetcher.fetchEpisode(line({}, { 'recording.mcap': Buffer.alloc(100, 2) }), work)).rejects.toMatchObject({ code: 'checksum_mismatch' });
    await expect(fetcher.fetchEpisode(line({}, { 'recording.mcap': Buffer.alloc(99, 1) }), work)).rejects.toMatchObject({ code: 'size_mismatch' });
    await expect(fetcher.fetchEpisode(line({}, { 'recording.mcap': Buffer.alloc(101, 1) }), work)).rejects.toMatchObject({ code: 'size_mismatch' });
    expect(await listTree(work)).toEqual([]);
  });

  it('a missing object is missing', async () => {
    const fetcher = new EpisodeFetcher({ sources: { dst_a: pathToFileURL(join(dir, 'empty')).href } });
    await expect(fetcher.fetchEpisode(line(), join(dir, 'work'))).rejects.toMatchObject({ code: 'missing' });
  });
});

/**
 * A stand-in for an S3-compatible store, in process: path-style GET only, S3's XML errors. (The
 * s3rver of test/support runs as its own process, which unit tests do not start; the end-to-end
 * export test reads from it.)
 */
async function fakeS3(objects: Map<string, Buffer>, denied: Set<string>): Promise<Server & AsyncDisposable & { endpoint: string; seen: string[] }> {
  const seen: string[] = [];
  const server = createServer((req, res) => {
    const path = decodeURIComponent(new URL(req.url!, 'http://x').pathname);
    seen.push(`${req.method} ${path}`);
    const error = (status: number, code: string) => {
      res.writeHead(status, { 'content-type': 'application/xml' });
      res.end(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>${code}</Code><Message>${code}</Message></Error>`);
    };
    if (denied.has(path)) return error(403, 'AccessDenied');
    const body = objects.get(path);
    if (body === undefined) return error(404, 'NoSuchKey');
    res.writeHead(200, { 'content-length': String(body.length), 'content-type': 'application/octet-stream', etag: '"x"' });
    res.end(body);
  });
  await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
  const endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return Object.assign(server, {
    endpoint,
    seen,
    [Symbol.asyncDispose]: () => new Promise<void>((ok) => server.close(() => ok())),
  });
}

describe('EpisodeFetcher, s3:// source', () => {
  const s3Options = (endpoint: string) => ({ endpoint, forcePathStyle: true, region: 'us-east-1', credentials: { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' }, maxAttempts: 1 });

  it('streams objects at prefix + object_key + path, and maps 404 / 403 to missing / denied', async () => {
    const objects = new Map(Object.entries(files).map(([p, b]) => [`/episodes/mirror/${KEY}${p}`, b]));
    await using s3 = await fakeS3(objects, new Set([`/locked/${KEY}recording.mcap`]));
    const fetcher = new EpisodeFetcher({ sources: { dst_a: 's3://episodes/mirror', dst_b: 's3://locked', dst_c: 's3://episodes' }, s3: s3Options(s3.endpoint) });
    try {
      const work = join(dir, 'work');
      const got = await fetcher.fetchEpisode(line(), work);
      expect(got.location).toMatchObject({ destinationId: 'dst_a', objectKey: KEY });
      expect(s3.seen).toEqual([`GET /episodes/mirror/${KEY}recording.mcap`, `GET /episodes/mirror/${KEY}bag/metadata.yaml`]);
      expect(await listTree(work)).toEqual(['bag/metadata.yaml', 'recording.mcap']);

      const at = (destination_id: string) => line({ locations: [{ destination_id, state: 'verified', object_key: KEY, grant_id: 'g' }] });
      await expect(fetcher.fetchEpisode(at('dst_b'), join(dir, 'w2'))).rejects.toMatchObject({ code: 'denied' });
      await expect(fetcher.fetchEpisode(at('dst_c'), join(dir, 'w3'))).rejects.toMatchObject({ code: 'missing' });
      await expect(fetcher.fetchEpisode(line({}, { 'recording.mcap': Buffer.alloc(300_000, 9) }), join(dir, 'w4'))).rejects.toMatchObject({ code: 'checksum_mismatch' });
      expect(await listTree(join(dir, 'w4'))).toEqual([]);
    } finally {
      fetcher.destroy();
    }
  });

  it('an unreachable store is io', async () => {
    const s3 = await fakeS3(new Map(), new Set());
    await s3[Symbol.asyncDispose]();
    const fetcher = new EpisodeFetcher({ sources: { dst_a: 's3://episodes' }, s3: s3Options(s3.endpoint) });
    try {
      await expect(fetcher.fetchEpisode(line(), join(dir, 'work'))).rejects.toMatchObject({ code: 'io' });
    } finally {
      fetcher.destroy();
    }
  });
});
