/**
 * The playback harness's plumbing, without the player: from the signed-in console page (under the
 * cloud's real Content-Security-Policy) a read-links call to the cloud, then a Range GET of the
 * link straight from the bucket, cross-origin. What the page reads must equal the bucket's bytes;
 * the S3 log shows the GET without its query string; the cloud's log shows no recorded bytes.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { startPlaybackHarness, type PlaybackHarness } from './playback-harness.js';

let h: PlaybackHarness;
beforeAll(async () => {
  h = await startPlaybackHarness({ robots: 1, episodesPerRobot: 1, rosbags: 1 });
}, 600_000);
afterAll(async () => {
  await h?.[Symbol.asyncDispose]();
});

interface PageRead {
  links: { status: number; body: { files?: { path: string; url: string; size_bytes: number }[]; error?: { code: string } } };
  range?: { status: number; contentRange: string | null; bytes: number[] } | { error: string };
}

/** In the console's page: POST read-links for `id` and `path`, then GET `range` of the link. */
function readInPage(id: string, path: string, range: string): Promise<PageRead> {
  return h.page.evaluate(
    async ([id, path, range, key]) => {
      const res = await fetch(`/v1/episodes/${id}/read-links`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify({ files: [path] }) });
      const links = { status: res.status, body: (await res.json()) as PageRead['links']['body'] };
      const url = links.body.files?.[0]?.url;
      if (url === undefined) return { links };
      try {
        const got = await fetch(url, { headers: { Range: range } });
        return { links, range: { status: got.status, contentRange: got.headers.get('content-range'), bytes: [...new Uint8Array(await got.arrayBuffer())] } };
      } catch (err) {
        return { links, range: { error: String(err) } };
      }
    },
    [id, path, range, h.adminKey] as const,
  );
}

describe('the playback harness', () => {
  test('a simulated ROS 2 episode and a rosbags one, verified, each with an MCAP the bucket holds', () => {
    expect(h.episodes.map((e) => e.source)).toEqual(['simulator', 'rosbags']);
    for (const e of h.episodes) {
      expect(e.mcap).toMatch(/\.mcap$/);
      const file = readFileSync(h.episodeFile(e.id));
      const listed = e.files.find((f) => f.path === e.mcap)!;
      expect(file.length).toBe(listed.size_bytes);
      expect(createHash('sha256').update(file).digest('hex')).toBe(listed.sha256);
    }
  });

  test("the console page gets a read link and reads a range of the MCAP from the bucket, cross-origin, under the console's CSP", async () => {
    for (const e of h.episodes) {
      await h.clearS3Requests();
      h.clearCloudRequests();
      const file = readFileSync(h.episodeFile(e.id));
      const got = await readInPage(e.id, e.mcap, 'bytes=0-63');
      expect(got.links.status, JSON.stringify(got.links.body)).toBe(200);
      expect(new URL(got.links.body.files![0]!.url).origin).toBe(h.bucketOrigin);
      expect(got.range).toEqual({ status: 206, contentRange: `bytes 0-63/${file.length}`, bytes: [...file.subarray(0, 64)] });

      await expect.poll(async () => (await h.s3Requests()).filter((r) => r.method === 'GET').length).toBe(1);
      const [get] = (await h.s3Requests()).filter((r) => r.method === 'GET');
      expect(get).toMatchObject({ path: `/${h.s3.bucket}/${e.objectKey}${e.mcap}`, range: 'bytes=0-63', status: 206, bytes: 64, origin: h.baseUrl });
      // The cloud never carried the recording: the read-links exchange is a few hundred bytes each way.
      const toCloud = h.cloudRequests();
      expect(toCloud.some((r) => r.path === `/v1/episodes/${e.id}/read-links` && r.status === 200)).toBe(true);
      for (const r of toCloud) expect(r.requestBytes + r.responseBytes, `${r.method} ${r.path}`).toBeLessThan(64 * 1024);
    }
    expect(h.errors).toEqual([]);
  });

  test('with the provider restarted without read support, read-links answers 501 read_links_unsupported; on again, links again', async () => {
    const e = h.episodes[0]!;
    await h.restartProvider({ reads: false });
    try {
      const off = await readInPage(e.id, e.mcap, 'bytes=0-0');
      expect(off.links).toMatchObject({ status: 501, body: { error: { code: 'read_links_unsupported' } } });
    } finally {
      await h.restartProvider({ reads: true });
    }
    expect((await readInPage(e.id, e.mcap, 'bytes=0-0')).range).toMatchObject({ status: 206 });
  });
});
