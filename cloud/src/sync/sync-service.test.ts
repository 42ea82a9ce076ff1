import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import type { SyncMessage } from '@fleet/protocol';
import type { RouteRow, SyncStore } from '../store/shared/sync-types.js';
import { ASSIGNMENTS_PER_MESSAGE, SyncService } from './sync-service.js';

const route = (i: number, robotId = 'rbt_a'): RouteRow => ({ orgId: 'org', robotId, episodeId: `ep_${i}`, episodeSeq: i, destinationId: 'dst', decidedAt: 0 });

function service(routes: RouteRow[], relayed: string[] = []) {
  const published: [string, SyncMessage][] = [];
  const svc = new SyncService({
    store: { sync: { pendingAssignments: async (robotId: string) => routes.filter((r) => r.robotId === robotId) } as unknown as SyncStore },
    relay: {
      handle: async (robotId, req) => {
        relayed.push(`${robotId}:${req.episode_id}`);
        return { type: 'deferral', req_id: req.req_id, episode_id: req.episode_id, destination_id: req.destination_id, reason: 'deferred', message: 'later', retry_after_s: 5 };
      },
    },
    publish: async (robotId, msg) => void published.push([robotId, msg]),
    logger: pino({ level: 'silent' }),
  });
  return { svc, published };
}

describe('SyncService', () => {
  it('answers assignments.request with the complete list, in pages, the last marked complete', async () => {
    const routes = Array.from({ length: ASSIGNMENTS_PER_MESSAGE + 5 }, (_, i) => route(i));
    const { svc, published } = service([...routes, route(9999, 'rbt_b')]);
    await svc.submit('rbt_a', Buffer.from(JSON.stringify({ type: 'assignments.request', req_id: 'q1' })));
    expect(published.map(([r, m]) => [r, m.type, m.type === 'assignments' ? [m.assignments.length, m.complete, m.req_id] : null])).toEqual([
      ['rbt_a', 'assignments', [ASSIGNMENTS_PER_MESSAGE, false, 'q1']],
      ['rbt_a', 'assignments', [5, true, 'q1']],
    ]);
  });

  it('answers with one empty, complete page when nothing is pending', async () => {
    const { svc, published } = service([]);
    await svc.submit('rbt_a', Buffer.from(JSON.stringify({ type: 'assignments.request', req_id: 'q1' })));
    expect(published).toEqual([['rbt_a', { type: 'assignments', req_id: 'q1', assignments: [], complete: true }]]);
  });

  it('hands grant requests to the relay and publishes its answer to the asking robot', async () => {
    const relayed: string[] = [];
    const { svc, published } = service([], relayed);
    await svc.submit('rbt_a', Buffer.from(JSON.stringify({ type: 'grant.request', req_id: 'g1', episode_id: 'ep_1', destination_id: 'dst' })));
    expect(relayed).toEqual(['rbt_a:ep_1']);
    expect(published[0]).toEqual(['rbt_a', expect.objectContaining({ type: 'deferral', req_id: 'g1' })]);
  });

  it('drops malformed, deep and oversized requests without answering', async () => {
    const { svc, published } = service([route(1)]);
    for (const raw of ['nope', '{"type":"grant.request"}', `{"type":"assignments.request","req_id":${'['.repeat(3000)}${']'.repeat(3000)}}`, `{"x":"${'y'.repeat(600 * 1024)}"}`]) {
      await svc.submit('rbt_a', Buffer.from(raw));
    }
    expect(published).toEqual([]);
  });

  it('pushes new routes to each robot, not marked complete', async () => {
    const { svc, published } = service([]);
    await svc.pushAssignments([route(1, 'rbt_a'), route(2, 'rbt_b'), route(3, 'rbt_a')]);
    expect(published).toEqual([
      ['rbt_a', { type: 'assignments', assignments: [{ episode_id: 'ep_1', destination_id: 'dst' }, { episode_id: 'ep_3', destination_id: 'dst' }], complete: false }],
      ['rbt_b', { type: 'assignments', assignments: [{ episode_id: 'ep_2', destination_id: 'dst' }], complete: false }],
    ]);
  });
});
