import { describe, expect, it } from 'vitest';
import { FleetClient } from './client.js';
import type { EpisodeFilters } from './types.js';

/** A client whose fetch records each request and answers `body`. */
function recording(body: unknown, status = 200): { client: FleetClient; requests: Request[] } {
  const requests: Request[] = [];
  const fetch: typeof globalThis.fetch = async (input, init) => {
    requests.push(input instanceof Request ? input : new Request(String(input), init));
    return new Response(JSON.stringify(body), { status, headers: { 'content-type': 'application/json' } });
  };
  return { client: new FleetClient({ baseUrl: 'http://fleet.test', apiKey: 'ak_test_0123456789abcdef', fetch }), requests };
}

describe('presence filters (has_metadata.<key>, has_annotation.<key>)', () => {
  it('go out as true or false, booleans or their string form, next to the other filters', async () => {
    const { client, requests } = recording({ episodes: [], cursor: null });
    const notYetReviewed: EpisodeFilters = { 'has_annotation.qa_status': false, 'has_metadata.site': 'true', 'annotation.qa_tags': 'x', task_id: 'pick' };
    await client.episodes.list(notYetReviewed, { limit: 10 });
    expect([...new URL(requests[0]!.url).searchParams.entries()]).toEqual([
      ['has_annotation.qa_status', 'false'],
      ['has_metadata.site', 'true'],
      ['annotation.qa_tags', 'x'],
      ['task_id', 'pick'],
      ['limit', '10'],
    ]);
  });

  it('are a dataset filter as well', async () => {
    const { client, requests } = recording({}, 201);
    await client.datasets.create({ name: 'todo', filter: { 'has_annotation.qa_status': false } }).catch(() => undefined);
    expect(await requests[0]!.json()).toEqual({ name: 'todo', filter: { 'has_annotation.qa_status': false } });
  });

  it('take only true or false in the type (checked by the type checker, not at run time)', () => {
    const ok: EpisodeFilters[] = [{ 'has_annotation.qa_status': true }, { 'has_metadata.site': 'false' }];
    // @ts-expect-error a presence filter is true or false, not any string
    const yes: EpisodeFilters = { 'has_annotation.qa_status': 'yes' };
    // @ts-expect-error an equality filter's value is a string
    const flag: EpisodeFilters = { 'annotation.qa_status': false };
    expect([...ok, yes, flag]).toHaveLength(4);
  });
});
