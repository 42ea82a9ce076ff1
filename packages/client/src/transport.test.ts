import { describe, expect, it } from 'vitest';
import { isRetryable, retryingFetch } from './transport.js';

/** A scripted fetch: each call takes the next answer (a status, or 'reset' for a network error). */
function scripted(answers: (number | 'reset')[], headers: Record<string, string> = {}) {
  const calls: { method: string; key: string | null; body: string }[] = [];
  const fetch = (async (_url: string, init: RequestInit) => {
    const h = new Headers(init.headers);
    calls.push({ method: String(init.method), key: h.get('idempotency-key'), body: init.body ? Buffer.from(init.body as Uint8Array).toString() : '' });
    const next = answers.shift() ?? 200;
    if (next === 'reset') throw new TypeError('fetch failed');
    return new Response(next === 204 ? null : '{}', { status: next, headers });
  }) as unknown as typeof globalThis.fetch;
  return { calls, fetch };
}

const waits: number[] = [];
const sleep = async (ms: number) => {
  waits.push(ms);
};
const post = (body = '{"a":1}') => new Request('http://api.test/v1/webhooks', { method: 'POST', body, headers: { 'content-type': 'application/json' } });

describe('retryingFetch', () => {
  it('gives every POST an Idempotency-Key and sends the same key and body on each retry', async () => {
    const s = scripted(['reset', 503, 201]);
    const res = await retryingFetch({ fetch: s.fetch, sleep, random: () => 0.5 })(post());
    expect(res.status).toBe(201);
    expect(s.calls).toHaveLength(3);
    expect(s.calls[0]!.key).toMatch(/^[0-9a-f-]{36}$/);
    expect(new Set(s.calls.map((c) => c.key)).size).toBe(1);
    expect(s.calls.every((c) => c.body === '{"a":1}')).toBe(true);
  });

  it('keeps a key the caller gave', async () => {
    const s = scripted([200]);
    await retryingFetch({ fetch: s.fetch, sleep })(new Request('http://api.test/v1/webhooks', { method: 'POST', body: '{}', headers: { 'idempotency-key': 'mine' } }));
    expect(s.calls[0]!.key).toBe('mine');
  });

  it('waits per the schedule, at least what Retry-After asks, and returns the last answer when the schedule runs out', async () => {
    waits.length = 0;
    const s = scripted([429, 429, 429, 429], { 'retry-after': '2' });
    const res = await retryingFetch({ fetch: s.fetch, sleep, retry: { schedule: [100, 5_000] }, random: () => 0.5 })(new Request('http://api.test/v1/robots'));
    expect(res.status).toBe(429);
    expect(s.calls).toHaveLength(3);
    expect(waits).toEqual([2_000, 5_000]);
  });

  it('does not wait for a Retry-After beyond maxRetryAfterMs', async () => {
    const s = scripted([429], { 'retry-after': '3600' });
    const res = await retryingFetch({ fetch: s.fetch, sleep })(new Request('http://api.test/v1/robots'));
    expect(res.status).toBe(429);
    expect(s.calls).toHaveLength(1);
  });

  it('throws FleetConnectionError once network errors outlast the schedule', async () => {
    const s = scripted(['reset', 'reset']);
    await expect(retryingFetch({ fetch: s.fetch, sleep, retry: { schedule: [1] } })(new Request('http://api.test/v1/robots'))).rejects.toMatchObject({ name: 'FleetConnectionError', method: 'GET' });
    expect(s.calls).toHaveLength(2);
  });

  it('never retries a 4xx other than 429, nor a PATCH after a 5xx', async () => {
    const s = scripted([409, 500]);
    expect((await retryingFetch({ fetch: s.fetch, sleep })(post())).status).toBe(409);
    expect((await retryingFetch({ fetch: s.fetch, sleep })(new Request('http://api.test/v1/episodes/e', { method: 'PATCH', body: '{}' }))).status).toBe(500);
    expect(s.calls).toHaveLength(2);
  });
});

describe('retryingFetch: robot commands', () => {
  const command = (action = 'go-home') => new Request(`http://api.test/v1/robots/rbt_1/${action}`, { method: 'POST', body: '{}', headers: { 'content-type': 'application/json' } });

  it('never sends a command again after a 4xx, a 500 (the robot refused in its state) or a 504 (the cloud waited its whole timeout)', async () => {
    for (const status of [400, 409, 422, 429, 500, 504]) {
      const s = scripted([status, 200]);
      const res = await retryingFetch({ fetch: s.fetch, sleep })(command('episodes/start'));
      expect({ status, answered: res.status, calls: s.calls.length }).toEqual({ status, answered: status, calls: 1 });
    }
  });

  it('retries a 503 (robot_offline), a 502 and a network error twice at most, 0.25 s then 0.75 s apart, under one Idempotency-Key', async () => {
    waits.length = 0;
    const s = scripted([503, 502, 'reset', 200]);
    await expect(retryingFetch({ fetch: s.fetch, sleep, random: () => 0.5 })(command())).rejects.toMatchObject({ name: 'FleetConnectionError' });
    expect(s.calls).toHaveLength(3);
    expect(waits).toEqual([250, 750]);
    expect(new Set(s.calls.map((c) => c.key)).size).toBe(1);
  });

  it('starts no retry later than the window after the first attempt, however long the attempts took', async () => {
    let t = 0;
    const slow = scripted([503, 503, 503]);
    const fetch = (async (url: string, init: RequestInit) => {
      t += 1_500; // each attempt takes 1.5 s
      return slow.fetch(url, init);
    }) as unknown as typeof globalThis.fetch;
    const res = await retryingFetch({ fetch, sleep: async (ms) => void (t += ms), random: () => 0.5, now: () => t })(command());
    expect(res.status).toBe(503);
    // 1.5 s + 0.25 s fits in 2 s: one retry; 3.25 s + 0.75 s does not.
    expect(slow.calls).toHaveLength(2);
  });

  it('applies the general schedule to other POSTs under /v1/robots', async () => {
    const s = scripted([500, 500, 201]);
    expect((await retryingFetch({ fetch: s.fetch, sleep })(new Request('http://api.test/v1/robots/enrollment-tokens', { method: 'POST', body: '{}' }))).status).toBe(201);
    expect(s.calls).toHaveLength(3);
  });
});

describe('isRetryable', () => {
  it.each([
    ['GET', '/v1/robots', 500, true],
    ['GET', '/v1/robots', null, true],
    ['DELETE', '/v1/webhooks/x', 502, true],
    ['PUT', '/v1/routing-rules/order', null, true],
    ['POST', '/v1/datasets', 503, true],
    ['POST', '/v1/robots/enroll', 500, false],
    ['POST', '/v1/robots/enroll', null, false],
    ['POST', '/v1/robots/enroll', 429, true],
    ['PATCH', '/v1/episodes/e/outcome', 500, false],
    ['PATCH', '/v1/episodes/e/outcome', 429, true],
    ['GET', '/v1/robots', 404, false],
    ['POST', '/v1/robots/rbt_1/episodes/start', 500, false],
    ['POST', '/v1/robots/rbt_1/episodes/start', 504, false],
    ['POST', '/v1/robots/rbt_1/go-home', 429, false],
    ['POST', '/v1/robots/rbt_1/go-home', 503, true],
    ['POST', '/v1/robots/rbt_1/stack/status', null, true],
    ['POST', '/v1/robots/rbt_1/rotate-credentials', 500, true],
    ['POST', '/v1/episodes/ep_1/read-links', 503, true],
    ['POST', '/v1/episodes/ep_1/read-links', null, true],
    ['POST', '/v1/episodes/ep_1/read-links', 501, false],
    ['POST', '/v1/episodes/ep_1/read-links', 502, false],
    ['POST', '/v1/episodes/ep_1/read-links', 504, false],
  ] as const)('%s %s answered %s: %s', (method, path, status, expected) => {
    expect(isRetryable(method, path, status)).toBe(expected);
  });
});
