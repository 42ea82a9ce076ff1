import { describe, expect, it } from 'vitest';
import { FleetClient } from '../client.js';
import { robotLabels, ROBOT_NAME_LOOKUP_MAX } from './robot-names.js';

/** A robot list of `count` robots (rbt_0000 … named arm-0 …), 100 a page; `status` instead for every request when given. */
function robotList(count: number, named: (i: number) => string = (i) => `arm-${i}`, status?: number) {
  const requests: URL[] = [];
  const fetch = (async (input: Request | string | URL) => {
    const url = new URL(input instanceof Request ? input.url : String(input));
    requests.push(url);
    if (status !== undefined) return new Response(JSON.stringify({ error: { code: 'insufficient_scope', message: 'no' } }), { status, headers: { 'content-type': 'application/json' } });
    const from = Number(url.searchParams.get('cursor') ?? 0);
    const ids = Array.from({ length: Math.min(100, count - from) }, (_, k) => from + k);
    const robots = ids.map((i) => ({ id: `rbt_${String(i).padStart(4, '0')}`, name: named(i) }));
    const next = from + ids.length < count ? String(from + ids.length) : null;
    return new Response(JSON.stringify({ robots, cursor: next, prev_cursor: null }), { status: 200, headers: { 'content-type': 'application/json' } });
  }) as typeof globalThis.fetch;
  return { requests, client: new FleetClient({ baseUrl: 'http://fleet.test', apiKey: 'ak_0123456789abcdefghij', fetch }) };
}

describe('robot names in tables', () => {
  it('come from one robot list request for a small fleet, de-enrolled robots included', async () => {
    const { requests, client } = robotList(30);
    const label = await robotLabels(client, ['rbt_0003', 'rbt_0017', 'rbt_0003']);
    expect([label('rbt_0003'), label('rbt_0017')]).toEqual(['arm-3', 'arm-17']);
    expect(requests).toHaveLength(1);
    expect(requests[0]!.searchParams.get('include_deenrolled')).toBe('true');
  });

  it('read pages only until every id is found, and never past the bound', async () => {
    const found = robotList(5_000);
    expect((await robotLabels(found.client, ['rbt_0250']))('rbt_0250')).toBe('arm-250');
    expect(found.requests).toHaveLength(3);

    const missing = robotList(5_000);
    const label = await robotLabels(missing.client, ['rbt_4999', 'rbt_gone']);
    expect([label('rbt_4999'), label('rbt_gone')]).toEqual(['rbt_4999', 'rbt_gone']);
    expect(missing.requests).toHaveLength(ROBOT_NAME_LOOKUP_MAX / 100);
  });

  it('add the id where two robots share a name, and show ids when the key may not list robots', async () => {
    const twins = robotList(3, (i) => (i < 2 ? 'arm' : 'gripper'));
    const label = await robotLabels(twins.client, ['rbt_0000', 'rbt_0002']);
    expect([label('rbt_0000'), label('rbt_0002')]).toEqual(['arm (rbt_0000)', 'gripper']);

    const forbidden = robotList(3, undefined, 403);
    expect((await robotLabels(forbidden.client, ['rbt_0001']))('rbt_0001')).toBe('rbt_0001');
    const none = robotList(3);
    await robotLabels(none.client, []);
    expect(none.requests).toEqual([]);
  });
});
