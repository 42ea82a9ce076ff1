import { describe, expect, it } from 'vitest';
import { WebhookPayloadSchema, type ReplicaReport } from '@fleet/protocol';
import { decidePruned, decideReplicaReport, refuseReport, type ReplicaFacts, type ReportedEpisode } from './episode-reports.js';

const EPISODE: ReportedEpisode = { seq: 41, orgId: 'org_a', robotId: 'rbt_1', recordingSessionId: 'rs_1', episodeSeq: 3 };
const REPORT: ReplicaReport = { episode_id: 'ep_1', destination_id: 'dst_1', grant_id: 'gr_1', state: 'verified', error: null, object_key: 'k/1', at: 200 };

function facts(over: Partial<ReplicaFacts> = {}): ReplicaFacts {
  return { episode: EPISODE, destinationKnown: true, current: undefined, ...over };
}

/** The report rules alone, without a database; the store suite runs the same cases on both engines. */
describe('refuseReport: a robot reports only on its own indexed episodes', () => {
  it.each([
    ['not indexed', undefined, 'rbt_1', 'unknown_episode'],
    ["another robot's", EPISODE, 'rbt_2', 'conflict'],
    ['its own', EPISODE, 'rbt_1', undefined],
  ] as const)('%s', (_name, episode, robotId, expected) => {
    expect(refuseReport(episode, robotId)).toBe(expected);
  });
});

describe('decideReplicaReport', () => {
  it('refuses in order: unknown episode, then conflict, then a destination outside the organization', () => {
    expect(decideReplicaReport('rbt_1', REPORT, facts({ episode: undefined, destinationKnown: false })).result).toBe('unknown_episode');
    expect(decideReplicaReport('rbt_2', REPORT, facts({ destinationKnown: false })).result).toBe('conflict');
    expect(decideReplicaReport('rbt_1', REPORT, facts({ destinationKnown: false })).result).toBe('unknown_destination');
  });

  it('hands the transition the episode as payloads name it, and the row to write', () => {
    const d = decideReplicaReport('rbt_1', REPORT, facts());
    expect(d.result).toBe('applied');
    if (d.result !== 'applied') return;
    expect(d.episode).toBe(EPISODE);
    expect(d.write).toMatchObject({ state: 'verified', grantId: 'gr_1', objectKey: 'k/1', reportedAt: 200 });
    expect(d.write.events.map((e) => e.type)).toEqual(['episode.synced', 'episode.verified']);
    for (const e of d.write.events) {
      expect(WebhookPayloadSchema.safeParse(e.payload).success).toBe(true);
      expect(e.payload).toMatchObject({ episode_id: 'ep_1', robot_id: 'rbt_1', recording_session_id: 'rs_1', episode_seq: 3 });
    }
  });

  it('a replica already there at that state, reported again (not newer), changes nothing', () => {
    expect(decideReplicaReport('rbt_1', REPORT, facts({ current: { state: 'verified', objectKey: 'k/1', reportedAt: 200 } })).result).toBe('unchanged');
    // A second, newer verified report: written, announcing nothing.
    const newer = decideReplicaReport('rbt_1', { ...REPORT, at: 300 }, facts({ current: { state: 'verified', objectKey: 'k/1', reportedAt: 200 } }));
    expect(newer.result === 'applied' && newer.write.events).toEqual([]);
  });
});

describe('decidePruned', () => {
  it('refuses what refuseReport refuses', () => {
    expect(decidePruned('rbt_1', 'ep_1', undefined, null).result).toBe('unknown_episode');
    expect(decidePruned('rbt_2', 'ep_1', EPISODE, null).result).toBe('conflict');
  });

  it('the first report applies and announces episode.pruned; once pruned, nothing more', () => {
    const d = decidePruned('rbt_1', 'ep_1', EPISODE, null);
    expect(d.result).toBe('applied');
    if (d.result !== 'applied') return;
    expect(d.event.type).toBe('episode.pruned');
    expect(d.event.payload).toEqual({ episode_id: 'ep_1', robot_id: 'rbt_1', recording_session_id: 'rs_1', episode_seq: 3, state: 'pruned', schema_version: 1 });
    expect(decidePruned('rbt_1', 'ep_1', EPISODE, 1_000).result).toBe('unchanged');
  });
});
