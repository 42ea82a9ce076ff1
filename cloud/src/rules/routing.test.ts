import { describe, expect, it } from 'vitest';
import type { RoutingFacts } from '../store/shared/sync-types.js';
import { hasAutonomous } from './has-autonomous.js';
import { decideRoute, matches, sameRuleSet } from './routing.js';

const facts = (over: Partial<RoutingFacts> = {}): RoutingFacts => ({
  episode_id: 'ep_000000000001',
  robot_id: 'rbt_a',
  task_id: 'pick',
  recording_session_id: 'rs_1',
  episode_seq: 7,
  outcome: 'success',
  robot_platform: 'arm-v2',
  has_autonomous: false,
  ...over,
});

const live = (id: string) => ({ id, revokedAt: null });
const revoked = (id: string) => ({ id, revokedAt: 1 });
let pos = 0;
const rule = (destinationId: string, match: Record<string, string[]> = {}, position = ++pos) => ({ destinationId, match, position });

describe('decideRoute: the four routing rules', () => {
  it('no rules and exactly one live destination: every episode routes to it', () => {
    expect(decideRoute(facts(), [], [live('dst_a')])).toBe('dst_a');
    // A revoked destination does not count: the one live destination still takes everything.
    expect(decideRoute(facts(), [], [revoked('dst_old'), live('dst_a')])).toBe('dst_a');
  });

  it('no rules and several live destinations (or none): nothing routes', () => {
    expect(decideRoute(facts(), [], [live('dst_a'), live('dst_b')])).toBeNull();
    expect(decideRoute(facts(), [], [])).toBeNull();
    expect(decideRoute(facts(), [], [revoked('dst_a')])).toBeNull();
  });

  it('once a rule exists only rules decide: an episode matching none stays local, even with one destination', () => {
    const rules = [rule('dst_a', { robot_id: ['rbt_other'] })];
    expect(decideRoute(facts(), rules, [live('dst_a')])).toBeNull();
  });

  it('the first matching rule in order wins, whatever the array order', () => {
    const rules = [rule('dst_b', { task_id: ['pick'] }, 2), rule('dst_a', { robot_id: ['rbt_a'] }, 1), rule('dst_c', {}, 3)];
    const dests = [live('dst_a'), live('dst_b'), live('dst_c')];
    expect(decideRoute(facts(), rules, dests)).toBe('dst_a');
    expect(decideRoute(facts({ robot_id: 'rbt_z' }), rules, dests)).toBe('dst_b');
    expect(decideRoute(facts({ robot_id: 'rbt_z', task_id: null }), rules, dests)).toBe('dst_c');
  });

  it('a rule pointing at a revoked destination never matches; the next rule may', () => {
    const rules = [rule('dst_gone', {}, 1), rule('dst_b', { outcome: ['success'] }, 2)];
    expect(decideRoute(facts(), rules, [revoked('dst_gone'), live('dst_b')])).toBe('dst_b');
    expect(decideRoute(facts({ outcome: 'failure' }), rules, [revoked('dst_gone'), live('dst_b')])).toBeNull();
    // A rule naming a destination that is not listed at all is treated the same way.
    expect(decideRoute(facts(), [rule('dst_unknown', {}, 1)], [live('dst_b')])).toBeNull();
  });

  it('discarded episodes never route (they have no files)', () => {
    expect(decideRoute(facts({ outcome: 'discarded' }), [], [live('dst_a')])).toBeNull();
    expect(decideRoute(facts({ outcome: 'discarded' }), [rule('dst_a', { outcome: ['discarded'] })], [live('dst_a')])).toBeNull();
  });
});

describe('matches', () => {
  it('{} matches every episode', () => {
    expect(matches({}, facts())).toBe(true);
    expect(matches({}, facts({ task_id: null, robot_platform: null }))).toBe(true);
  });

  it('array values: any of them; several fields: all of them', () => {
    expect(matches({ robot_id: ['rbt_x', 'rbt_a'] }, facts())).toBe(true);
    expect(matches({ robot_id: ['rbt_x', 'rbt_y'] }, facts())).toBe(false);
    expect(matches({ robot_id: ['rbt_a'], task_id: ['pick'] }, facts())).toBe(true);
    expect(matches({ robot_id: ['rbt_a'], task_id: ['place'] }, facts())).toBe(false);
  });

  it('every match field, numbers and booleans compared as strings', () => {
    const f = facts({ has_autonomous: true });
    expect(matches({ episode_id: ['ep_000000000001'] }, f)).toBe(true);
    expect(matches({ recording_session_id: ['rs_1'] }, f)).toBe(true);
    expect(matches({ episode_seq: ['7'] }, f)).toBe(true);
    expect(matches({ episode_seq: ['07'] }, f)).toBe(false);
    expect(matches({ outcome: ['success', 'failure'] }, f)).toBe(true);
    expect(matches({ robot_platform: ['arm-v2'] }, f)).toBe(true);
    expect(matches({ has_autonomous: ['true'] }, f)).toBe(true);
    expect(matches({ has_autonomous: ['false'] }, f)).toBe(false);
    expect(matches({ has_autonomous: ['false'] }, facts())).toBe(true);
  });

  it('a null fact matches no value, and an unknown field never matches', () => {
    expect(matches({ task_id: ['pick'] }, facts({ task_id: null }))).toBe(false);
    expect(matches({ robot_platform: ['null'] }, facts({ robot_platform: null }))).toBe(false);
    expect(matches({ colour: ['red'] }, facts())).toBe(false);
  });
});

describe('hasAutonomous', () => {
  it('is true when the control mode names autonomy, or the recorded metadata says so', () => {
    expect(hasAutonomous('autonomous', {})).toBe(true);
    expect(hasAutonomous('shared_autonomy', {})).toBe(true);
    expect(hasAutonomous('Autonomous-Eval', {})).toBe(true);
    expect(hasAutonomous('teleop', {})).toBe(false);
    expect(hasAutonomous(null, {})).toBe(false);
    expect(hasAutonomous('teleop', { has_autonomous: true })).toBe(true);
    expect(hasAutonomous(null, { has_autonomous: 'true' })).toBe(true);
    expect(hasAutonomous(null, { has_autonomous: 'yes' })).toBe(false);
  });
});

describe('sameRuleSet: a reorder names every rule exactly once', () => {
  it.each([
    [['r1', 'r2', 'r3'], ['r3', 'r1', 'r2'], true],
    [['r1', 'r2'], ['r1', 'r2'], true],
    [[], [], true],
    [['r1', 'r2'], ['r1'], false],
    [['r1', 'r2'], ['r1', 'r2', 'r3'], false],
    [['r1', 'r2'], ['r1', 'r1'], false],
    [['r1', 'r2'], ['r1', 'r3'], false],
    [['r1', 'r2', 'r2x'], ['r1', 'r2', 'r2'], false],
  ] as const)('%j reordered as %j: %s', (current, wanted, ok) => {
    expect(sameRuleSet(current, wanted)).toBe(ok);
  });
});
