import { CreateDatasetBodySchema } from '@fleet/protocol';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ApiError } from '../errors.js';
import { EPISODE_EQ_COLUMNS, type EpisodeFilter } from '../store/index.js';
import { FILTER_KEYS, MAX_FILTER_VALUE, parseEpisodeFilter } from './filter.js';

const T1 = '2026-01-01T00:00:00Z';
const T2 = '2026-01-02T12:30:00.500+02:00';

interface Issue {
  location: string;
  path: string;
  code: string;
  message: string;
  keys?: string[];
}

/** The ApiError a parse throws; fails the test when it does not throw one. */
function refusal(input: Record<string, unknown>, location: 'querystring' | 'body' = 'querystring'): ApiError {
  try {
    parseEpisodeFilter(input, location);
  } catch (err) {
    expect(err).toBeInstanceOf(ApiError);
    return err as ApiError;
  }
  throw new Error(`parseEpisodeFilter accepted ${JSON.stringify(input)}`);
}

/** The paths of the issues of a refusal, which name the offending keys. */
function refusedPaths(input: Record<string, unknown>, location: 'querystring' | 'body' = 'querystring'): string[] {
  const err = refusal(input, location);
  expect(err.code).toBe('validation_failed');
  const issues = (err.details as { issues: Issue[] }).issues;
  for (const i of issues) expect(i.location).toBe(location);
  // Unknown keys are one issue listing them, as every route's schema reports them.
  return issues.flatMap((i) => (i.code === 'unrecognized_keys' ? (i.keys ?? []).map((k) => `${i.path}/${k}`) : [i.path]));
}

const empty = (): EpisodeFilter => ({ eq: {}, metadata: {}, annotation: {} });

describe('parseEpisodeFilter', () => {
  it('gives an empty filter for no keys, and skips undefined values', () => {
    expect(parseEpisodeFilter({}, 'querystring')).toEqual(empty());
    expect(parseEpisodeFilter({ task_id: undefined }, 'querystring')).toEqual(empty());
  });

  it.each(EPISODE_EQ_COLUMNS.filter((c) => c !== 'outcome'))('takes %s as an equality filter', (col) => {
    expect(parseEpisodeFilter({ [col]: 'value_1' }, 'querystring')).toEqual({ ...empty(), eq: { [col]: 'value_1' } });
  });

  it.each(['success', 'failure', 'discarded'])('takes outcome=%s', (outcome) => {
    expect(parseEpisodeFilter({ outcome }, 'querystring')).toEqual({ ...empty(), eq: { outcome } });
  });

  it('takes every known key at once', () => {
    const f = parseEpisodeFilter(
      {
        robot_id: 'rbt_1',
        task_id: 'task_1',
        subtask_id: 'sub_1',
        operator_id: 'op_1',
        control_mode: 'teleop',
        policy_version_id: 'pol_1',
        eval_id: 'eval_1',
        outcome: 'failure',
        from: T1,
        to: T2,
        sync_state: 'verified',
        destination_id: 'dst_1',
        'metadata.site': 'lab',
        'metadata.n': '3',
        'annotation.qa': 'pass',
      },
      'querystring',
    );
    expect(f).toEqual({
      eq: {
        robot_id: 'rbt_1',
        task_id: 'task_1',
        subtask_id: 'sub_1',
        operator_id: 'op_1',
        control_mode: 'teleop',
        policy_version_id: 'pol_1',
        eval_id: 'eval_1',
        outcome: 'failure',
      },
      from: Date.parse(T1),
      to: Date.parse(T2),
      metadata: { site: 'lab', n: '3' },
      annotation: { qa: 'pass' },
      syncState: { state: 'verified', destinationId: 'dst_1' },
    });
  });

  it('takes from and to as date-times, inclusive bounds in ms', () => {
    expect(parseEpisodeFilter({ from: T1, to: T1 }, 'querystring')).toEqual({ ...empty(), from: Date.parse(T1), to: Date.parse(T1) });
    expect(parseEpisodeFilter({ from: '2026-01-01T00:00Z' }, 'querystring').from).toBe(Date.parse(T1));
    expect(parseEpisodeFilter({ to: '2026-01-01T01:00:00+01:00' }, 'querystring').to).toBe(Date.parse(T1));
  });

  it('keeps a key that has dots after the layer prefix whole', () => {
    expect(parseEpisodeFilter({ 'metadata.a.b': 'x', 'annotation.c.d': 'y' }, 'querystring')).toEqual({
      ...empty(),
      metadata: { 'a.b': 'x' },
      annotation: { 'c.d': 'y' },
    });
  });

  it.each(['sync_state_x', 'foo', 'metadata', 'annotation', 'annotations.qa', 'meta.k', '.k', 'Robot_id', 'cursor', 'limit', 'recorded_outcome'])(
    'refuses the unknown key %s, naming it',
    (key) => {
      expect(refusedPaths({ [key]: 'v' })).toEqual([`/${key}`]);
    },
  );

  it('names every offending key, in the body form under /filter', () => {
    const paths = refusedPaths({ foo: 'v', task_id: 'ok', outcome: 'maybe' }, 'body');
    expect(paths.sort()).toEqual(['/filter/foo', '/filter/outcome']);
  });

  it('refuses repeated keys (arrays)', () => {
    expect(refusedPaths({ task_id: ['a', 'b'] })).toEqual(['/task_id']);
    expect(refusedPaths({ 'metadata.k': ['a', 'b'] })).toEqual(['/metadata.k']);
    expect(refusedPaths({ outcome: ['success'] })).toEqual(['/outcome']);
  });

  it('refuses values that are not strings', () => {
    expect(refusedPaths({ task_id: 3 }, 'body')).toEqual(['/filter/task_id']);
    expect(refusedPaths({ 'metadata.k': true }, 'body')).toEqual(['/filter/metadata.k']);
    expect(refusedPaths({ robot_id: null }, 'body')).toEqual(['/filter/robot_id']);
    expect(refusedPaths({ robot_id: { a: 1 } }, 'body')).toEqual(['/filter/robot_id']);
  });

  it.each(['SUCCESS', 'ok', 'succeeded', ' success'])('refuses outcome=%j', (outcome) => {
    expect(refusedPaths({ outcome })).toEqual(['/outcome']);
  });

  it.each(['done', 'Verified', 'reported', 'granted'])('refuses sync_state=%j', (sync_state) => {
    expect(refusedPaths({ sync_state })).toEqual(['/sync_state']);
  });

  it.each(['yesterday', '2026-01-01', '2026-01-01T00:00:00', '2026-13-01T00:00:00Z', '2026-01-01 00:00:00Z', '1767225600000', '2026-02-30T00:00:00Z', '2026-04-31T10:00:00+02:00'])(
    'refuses from=%j',
    (from) => {
      expect(refusedPaths({ from })).toEqual(['/from']);
    },
  );

  it('refuses from after to', () => {
    expect(refusedPaths({ from: T2, to: T1 })).toEqual(['/from']);
  });

  describe('to: a date-time bound or a destination id', () => {
    it('is the started_at upper bound when it is a date-time, with or without sync_state', () => {
      expect(parseEpisodeFilter({ to: T1 }, 'querystring')).toEqual({ ...empty(), to: Date.parse(T1) });
      expect(parseEpisodeFilter({ to: T1, sync_state: 'synced' }, 'querystring')).toEqual({
        ...empty(),
        to: Date.parse(T1),
        syncState: { state: 'synced' },
      });
    });

    it('is a destination id with sync_state', () => {
      expect(parseEpisodeFilter({ to: 'dst_1', sync_state: 'unverified' }, 'querystring')).toEqual({
        ...empty(),
        syncState: { state: 'unverified', destinationId: 'dst_1' },
      });
    });

    it('refuses a date-time shaped to that is not a real date, also with sync_state', () => {
      // Date.parse would roll Feb 30 over to Mar 2; it is neither a bound nor a destination id.
      expect(refusedPaths({ to: '2026-02-30T00:00:00Z' })).toEqual(['/to']);
      expect(refusedPaths({ to: '2026-02-30T00:00:00Z', sync_state: 'verified' })).toEqual(['/to']);
      expect(parseEpisodeFilter({ to: '2028-02-29T00:00:00Z' }, 'querystring').to).toBe(Date.parse('2028-02-29T00:00:00Z'));
    });

    it('refuses a destination id without sync_state', () => {
      expect(refusedPaths({ to: 'dst_1' })).toEqual(['/to']);
      expect(refusedPaths({ to: '2026-01-01' })).toEqual(['/to']);
    });

    it('takes destination_id as the alias, which also needs sync_state', () => {
      expect(parseEpisodeFilter({ destination_id: 'dst_1', sync_state: 'verified' }, 'querystring')).toEqual({
        ...empty(),
        syncState: { state: 'verified', destinationId: 'dst_1' },
      });
      expect(refusedPaths({ destination_id: 'dst_1' })).toEqual(['/destination_id']);
    });

    it('takes a date-time to together with destination_id: bound and destination', () => {
      expect(parseEpisodeFilter({ to: T1, destination_id: 'dst_1', sync_state: 'synced' }, 'querystring')).toEqual({
        ...empty(),
        to: Date.parse(T1),
        syncState: { state: 'synced', destinationId: 'dst_1' },
      });
    });

    it('accepts to and destination_id naming the same destination, refuses two different ones', () => {
      expect(parseEpisodeFilter({ to: 'dst_1', destination_id: 'dst_1', sync_state: 'verified' }, 'querystring').syncState).toEqual({
        state: 'verified',
        destinationId: 'dst_1',
      });
      expect(refusedPaths({ to: 'dst_1', destination_id: 'dst_2', sync_state: 'verified' })).toEqual(['/to']);
    });

    it('refuses a destination with an invalid sync_state without crashing', () => {
      expect(refusedPaths({ to: 'dst_1', sync_state: 'nope' }).sort()).toEqual(['/sync_state', '/to']);
    });

    it('names each rule between keys by its own issue code (not the generic invalid)', () => {
      const codes = (input: Record<string, unknown>) => (refusal(input).details as { issues: Issue[] }).issues.map((i) => [i.path, i.code]);
      expect(codes({ destination_id: 'dst_1' })).toEqual([['/destination_id', 'destination_without_sync_state']]);
      expect(codes({ to: 'dst_1' })).toEqual([['/to', 'destination_without_sync_state']]);
      expect(codes({ to: 'dst_1', destination_id: 'dst_2', sync_state: 'synced' })).toEqual([['/to', 'destination_mismatch']]);
      expect(codes({ from: T2, to: T1 })).toEqual([['/from', 'range']]);
      // A bad value keeps the generic code.
      expect(codes({ sync_state: 'lost' })).toEqual([['/sync_state', 'invalid']]);
    });
  });

  describe('metadata.<key> and annotation.<key>', () => {
    it('keeps keys named like Object.prototype members as ordinary keys, never dropping the filter', () => {
      for (const layer of ['metadata', 'annotation'] as const) {
        for (const k of ['__proto__', 'constructor', 'toString']) {
          const f = parseEpisodeFilter({ [`${layer}.${k}`]: 'x' }, 'querystring');
          expect(Object.entries(f[layer])).toEqual([[k, 'x']]);
        }
      }
    });

    it('refuses an empty key name', () => {
      expect(refusedPaths({ 'metadata.': 'v' })).toEqual(['/metadata.']);
      expect(refusedPaths({ 'annotation.': 'v' })).toEqual(['/annotation.']);
    });

    it('refuses a key name longer than 256 characters, accepts 256', () => {
      const k = 'k'.repeat(256);
      expect(parseEpisodeFilter({ [`metadata.${k}`]: 'v' }, 'querystring').metadata).toEqual({ [k]: 'v' });
      // The path quotes at most 64 characters of the key.
      expect(refusedPaths({ [`annotation.${k}x`]: 'v' })).toEqual([`/annotation.${k.slice(0, 53)}…`]);
    });
  });

  describe('has_metadata.<key> and has_annotation.<key>', () => {
    it('takes true (present) and false (absent), separately per layer and key', () => {
      expect(parseEpisodeFilter({ 'has_annotation.qa_status': 'false' }, 'querystring')).toEqual({ ...empty(), hasAnnotation: { qa_status: false } });
      expect(parseEpisodeFilter({ 'has_metadata.site': 'true', 'has_metadata.arm': 'false', 'has_annotation.qa': 'true' }, 'querystring')).toEqual({
        ...empty(),
        hasMetadata: { site: true, arm: false },
        hasAnnotation: { qa: true },
      });
    });

    it('goes with the equality families and every other key, the same key in both included', () => {
      expect(parseEpisodeFilter({ task_id: 't', 'annotation.qa': 'pass', 'has_annotation.qa': 'true', 'has_metadata.site': 'false' }, 'querystring')).toEqual({
        ...empty(),
        eq: { task_id: 't' },
        annotation: { qa: 'pass' },
        hasAnnotation: { qa: true },
        hasMetadata: { site: false },
      });
    });

    it('keeps a key with dots after the prefix whole', () => {
      expect(parseEpisodeFilter({ 'has_annotation.a.b': 'true' }, 'querystring').hasAnnotation).toEqual({ 'a.b': true });
    });

    it.each(['True', 'FALSE', '1', '0', 'yes', 'no', ' true', 'true ', '', 'null', 'pass', 't'.repeat(513)])('refuses the value %j, naming the key', (value) => {
      const err = refusal({ 'has_annotation.qa_status': value });
      const issues = (err.details as { issues: Issue[] }).issues;
      expect(issues.map((i) => [i.path, i.code])).toEqual([['/has_annotation.qa_status', 'invalid']]);
      expect(issues[0]!.message).toMatch(/true .*false/);
      expect(refusedPaths({ 'has_metadata.site': value }, 'body')).toEqual(['/filter/has_metadata.site']);
    });

    it('refuses a repeated key and a value that is not a string', () => {
      expect(refusedPaths({ 'has_annotation.qa': ['true', 'false'] })).toEqual(['/has_annotation.qa']);
      expect(refusedPaths({ 'has_annotation.qa': true }, 'body')).toEqual(['/filter/has_annotation.qa']);
    });

    it('bounds the key after the prefix as for annotation.<key>: 1 to 256 characters', () => {
      const k = 'k'.repeat(256);
      expect(parseEpisodeFilter({ [`has_metadata.${k}`]: 'true' }, 'querystring').hasMetadata).toEqual({ [k]: true });
      expect(refusedPaths({ 'has_metadata.': 'true' })).toEqual(['/has_metadata.']);
      expect(refusedPaths({ 'has_annotation.': 'false' })).toEqual(['/has_annotation.']);
      expect(refusedPaths({ [`has_annotation.${k}x`]: 'true' })).toEqual([`/has_annotation.${k.slice(0, 49)}…`]);
    });

    it.each(['has_annotation', 'has_metadata', 'has_annotations.qa', 'has_meta.k', 'has.k', 'Has_annotation.qa'])('refuses the unknown key %s', (key) => {
      expect(refusedPaths({ [key]: 'true' })).toEqual([`/${key}`]);
    });

    it('keeps keys named like Object.prototype members as ordinary keys, never dropping the condition', () => {
      for (const layer of ['has_metadata', 'has_annotation'] as const) {
        for (const k of ['__proto__', 'constructor', 'toString']) {
          const f = parseEpisodeFilter({ [`${layer}.${k}`]: 'false' }, 'querystring');
          const field = layer === 'has_metadata' ? f.hasMetadata : f.hasAnnotation;
          expect(Object.entries(field ?? {})).toEqual([[k, false]]);
          expect(Object.getPrototypeOf(field)).toBe(Object.prototype);
        }
      }
    });
  });

  describe('value length', () => {
    it.each(['task_id', 'metadata.k', 'annotation.k', 'robot_id'])('accepts %s of 512 characters, refuses 513 and empty', (key) => {
      expect(MAX_FILTER_VALUE).toBe(512);
      const ok = 'v'.repeat(512);
      const f = parseEpisodeFilter({ [key]: ok }, 'querystring');
      expect(JSON.stringify(f)).toContain(ok);
      expect(refusedPaths({ [key]: 'v'.repeat(513) })).toEqual([`/${key}`]);
      expect(refusedPaths({ [key]: '' })).toEqual([`/${key}`]);
    });

    it('refuses a destination id over the limit', () => {
      expect(refusedPaths({ to: 'd'.repeat(513), sync_state: 'verified' })).toEqual(['/to']);
      expect(refusedPaths({ destination_id: 'd'.repeat(513), sync_state: 'verified' })).toEqual(['/destination_id']);
    });
  });
});

describe("a dataset filter's JSON Schema (the OpenAPI document's)", () => {
  // packages/protocol states the filter's keys for the document; this parser is what decides.
  const filter = z.toJSONSchema(CreateDatasetBodySchema.shape.filter, { io: 'input' }) as { properties: Record<string, unknown>; patternProperties: Record<string, unknown>; additionalProperties: unknown };

  it('lists exactly the keys the parser takes, and no other', () => {
    expect(Object.keys(filter.properties).sort()).toEqual([...FILTER_KEYS].sort());
    expect(filter.additionalProperties).toBe(false);
    const patterns = Object.keys(filter.patternProperties).map((p) => new RegExp(p, 'u'));
    for (const key of ['metadata.site', 'annotation.qa', `metadata.${'k'.repeat(256)}`]) {
      expect(patterns.some((p) => p.test(key)), key).toBe(true);
      expect(() => parseEpisodeFilter({ [key]: 'x' }, 'body')).not.toThrow();
    }
    for (const key of ['has_metadata.site', 'has_annotation.qa_status', `has_annotation.${'k'.repeat(256)}`]) {
      expect(patterns.some((p) => p.test(key)), key).toBe(true);
      expect(() => parseEpisodeFilter({ [key]: 'false' }, 'body')).not.toThrow();
    }
    for (const key of ['metadata.', 'annotation.', `metadata.${'k'.repeat(257)}`, 'meta.x', 'bogus', 'has_annotation.', `has_metadata.${'k'.repeat(257)}`, 'has_annotation']) {
      expect(patterns.some((p) => p.test(key)), key).toBe(false);
      expect(() => parseEpisodeFilter({ [key]: 'x' }, 'body'), key).toThrow(ApiError);
    }
  });

  it('states the presence families\' values as the parser takes them: true or false, as booleans or their string form', () => {
    const presence = Object.entries(filter.patternProperties).filter(([p]) => p.startsWith('^has_'));
    expect(presence).toHaveLength(2);
    for (const [, schema] of presence) {
      const values = (schema as { enum: unknown[] }).enum;
      expect([...values].sort()).toEqual([false, 'false', true, 'true'].sort());
      // A dataset filter's boolean is stored as its string form, which the parser takes.
      for (const v of values) expect(() => parseEpisodeFilter({ 'has_annotation.qa': String(v) }, 'body')).not.toThrow();
    }
  });
});

