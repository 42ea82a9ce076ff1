import { describe, expect, it } from 'vitest';
import { apiBaseUrl, FleetClient } from './client.js';
import { apiKeyProblem, MalformedApiKeyError } from './errors.js';

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
