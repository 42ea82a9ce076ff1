import { describe, expect, it } from 'vitest';
import { apiBaseUrl, FleetClient } from './client.js';
import { apiKeyProblem, FleetApiError, MalformedApiKeyError } from './errors.js';

const KEY = 'ak_0123456789abcdefghij';

/** A fetch that records what was sent and answers an empty robot list. */
function recording() {
  const sent: { url: string; authorization: string | null }[] = [];
  const fetch = (async (input: Request | string | URL, init?: RequestInit) => {
    const url = input instanceof Request ? input.url : String(input);
    sent.push({ url, authorization: new Headers(init?.headers ?? (input instanceof Request ? input.headers : undefined)).get('authorization') });
    return new Response(JSON.stringify({ robots: [], cursor: null, prev_cursor: null }), { status: 200, headers: { 'content-type': 'application/json' } });
  }) as typeof globalThis.fetch;
  return { sent, fetch };
}

describe('the base URL', () => {
  it.each(['http://fleet.test:8080', 'http://fleet.test:8080/', 'http://fleet.test:8080/v1', 'http://fleet.test:8080/v1/', ' http://fleet.test:8080/v1// '])(
    '%j reaches /v1/robots once',
    async (baseUrl) => {
      const r = recording();
      await new FleetClient({ baseUrl, apiKey: KEY, fetch: r.fetch }).robots.list();
      expect(r.sent.map((s) => new URL(s.url).pathname)).toEqual(['/v1/robots']);
    },
  );

  it('keeps a path in front of /v1', () => {
    expect(apiBaseUrl('https://example.test/fleet/v1/')).toBe('https://example.test/fleet');
    expect(apiBaseUrl('https://example.test/fleet')).toBe('https://example.test/fleet');
  });
});

describe('the API key', () => {
  it.each([
    ['sk_0123456789abcdefghij', /does not start with ak_/],
    ['ak_0123456789', /has 10 characters after ak_/],
    ['ak_0123456789 abcdefghij', /other than letters.*\(a space or a line break\)/],
    ['ak_0123456789abcdefghij\u201d', /other than letters.*\(a quote\)/],
    ['   ', /is empty/],
  ])('%j is refused before anything is sent, without quoting it', async (key, problem) => {
    const r = recording();
    let thrown: unknown;
    try {
      new FleetClient({ baseUrl: 'http://fleet.test', apiKey: key, fetch: r.fetch });
    } catch (err) {
      thrown = err;
    }
    expect(thrown).toBeInstanceOf(MalformedApiKeyError);
    const err = thrown as MalformedApiKeyError;
    expect(err.code).toBe('malformed_api_key');
    expect(err.message).toMatch(/^malformed API key: expected ak_ followed by 16 to 128 letters, digits, _ or -; /);
    expect(err.message).toMatch(problem);
    if (key.trim().length > 3) expect(err.message).not.toContain(key.trim().slice(3, 13));
    expect(r.sent).toEqual([]);
  });

  it('is sent without the whitespace around it (a pasted line break)', async () => {
    const r = recording();
    await new FleetClient({ baseUrl: 'http://fleet.test', apiKey: ` ${KEY}\n`, fetch: r.fetch }).robots.list();
    expect(r.sent[0]!.authorization).toBe(`Bearer ${KEY}`);
    expect(apiKeyProblem(KEY)).toBeNull();
  });
});

describe('episodes.readLinks', () => {
  const links = {
    episode_id: 'ep_1',
    destination_id: 'dst_1',
    files: [{ path: 'recording.mcap', url: 'https://bucket.test/k?X-Amz-Signature=s', expires_at: '2026-06-01T00:15:00Z', destination_id: 'dst_1', size_bytes: 10, sha256: 'a'.repeat(64) }],
  };

  /** Answers each call with the next of `answers`, recording method, path, body and key. */
  function scripted(answers: { status: number; body: unknown }[]) {
    const sent: { method: string; path: string; body: unknown; key: string | null }[] = [];
    const fetch = (async (input: Request | string | URL, init?: RequestInit) => {
      const req = input instanceof Request ? input : new Request(String(input), init);
      const h = new Headers(init?.headers ?? req.headers);
      const text = init?.body ? Buffer.from(init.body as Uint8Array).toString() : await req.text();
      sent.push({ method: init?.method ?? req.method, path: new URL(req.url).pathname, body: text ? JSON.parse(text) : undefined, key: h.get('idempotency-key') });
      const next = answers.shift() ?? { status: 200, body: links };
      return new Response(JSON.stringify(next.body), { status: next.status, headers: { 'content-type': 'application/json' } });
    }) as typeof globalThis.fetch;
    return { sent, fetch };
  }

  it('POSTs {} by default, or the files and destination asked, and resolves with the links', async () => {
    const s = scripted([]);
    const client = new FleetClient({ baseUrl: 'http://fleet.test', apiKey: KEY, fetch: s.fetch });
    expect(await client.episodes.readLinks('ep_1')).toEqual(links);
    await client.episodes.readLinks('ep_1', { destination_id: 'dst_1', files: ['recording.mcap'] }, { idempotencyKey: 'k-1' });
    expect(s.sent).toEqual([
      { method: 'POST', path: '/v1/episodes/ep_1/read-links', body: {}, key: expect.stringMatching(/^[0-9a-f-]{36}$/) as unknown },
      { method: 'POST', path: '/v1/episodes/ep_1/read-links', body: { destination_id: 'dst_1', files: ['recording.mcap'] }, key: 'k-1' },
    ]);
  });

  it('throws the documented code with its details; a provider verdict (501) is not asked again', async () => {
    const replicas = [{ destination_id: 'dst_1', state: 'syncing' }];
    const s = scripted([
      { status: 409, body: { error: { code: 'replica_not_verified', message: 'no verified replica', details: { replicas } } } },
      { status: 501, body: { error: { code: 'read_links_unsupported', message: 'the provider does not issue read links' } } },
    ]);
    const client = new FleetClient({ baseUrl: 'http://fleet.test', apiKey: KEY, fetch: s.fetch, sleep: async () => undefined });
    const notVerified = await client.episodes.readLinks('ep_1').catch((e: unknown) => e);
    expect(notVerified).toBeInstanceOf(FleetApiError);
    expect(notVerified).toMatchObject({ status: 409, code: 'replica_not_verified', details: { replicas } });
    const unsupported = await client.episodes.readLinks('ep_1').catch((e: unknown) => e);
    expect(unsupported).toMatchObject({ status: 501, code: 'read_links_unsupported' });
    expect(s.sent).toHaveLength(2);
  });
});
