import { describe, expect, it } from 'vitest';
import { FleetClient } from './client.js';
import { serializeQuery } from './query.js';

describe('query strings', () => {
  it('encodes keys and values as URI components, repeats arrays, leaves out undefined and null', () => {
    expect(serializeQuery({ 'annotation.a=b&c': 'x=y&z', 'metadata.1+1 #': '2 + 2', limit: 5, flag: true, none: undefined, nil: null, types: ['a', 'b'] })).toBe(
      'annotation.a%3Db%26c=x%3Dy%26z&metadata.1%2B1%20%23=2%20%2B%202&limit=5&flag=true&types=a&types=b',
    );
    expect(serializeQuery({})).toBe('');
    expect(serializeQuery(undefined)).toBe('');
  });

  it('a filter key with reserved characters reaches the server as one key', async () => {
    const urls: string[] = [];
    const fetch: typeof globalThis.fetch = async (input) => {
      urls.push(input instanceof Request ? input.url : String(input));
      return new Response(JSON.stringify({ episodes: [], cursor: null }), { status: 200, headers: { 'content-type': 'application/json' } });
    };
    const c = new FleetClient({ baseUrl: 'http://fleet.test', apiKey: 'ak_test_0123456789abcdef', fetch });
    const key = 'annotation.<img src=x onerror=a=1>&b';
    await c.episodes.list({ [key]: 'v=1&w', task_id: 'pick' }, { limit: 2 });
    const q = new URL(urls[0]!).searchParams;
    expect([...q.entries()]).toEqual([
      [key, 'v=1&w'],
      ['task_id', 'pick'],
      ['limit', '2'],
    ]);
  });
});
