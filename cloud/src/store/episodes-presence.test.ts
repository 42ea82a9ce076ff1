/**
 * Presence filters (`has_metadata.<key>`, `has_annotation.<key>`) on both engines: the key index
 * follows ingest and annotation patches (a key deleted with null is absent), combines with every
 * other condition and with keyset pagination, feeds dataset snapshots, and is filled for the
 * episodes a database held before it existed.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { EpisodeReport } from '@fleet/protocol';
import { testReport } from '../test-support.js';
import { keyChanges, MAX_INDEXED_ATTR_KEY, MAX_INDEXED_ATTR_VALUE, storedKeys } from './shared/episode-lines.js';
import { describeStore, openTestStore, openTwin, REAL_TIME, sqliteDb, type TestEngine, type TestStore } from './test-store.js';
import type { EpisodeFilter, IngestItem, Store } from './shared/types.js';
import { MIGRATIONS } from './sqlite/migrations.js';
import { PG_MIGRATIONS } from './postgres/migrations.js';
import type { PgStore } from './postgres/store.js';
import { openSqliteStore } from './sqlite/store.js';
import type { SqliteDatasets } from './sqlite/datasets.js';

const T0 = Date.parse('2026-01-01T00:00:00Z');
const ORG = 'org_a';
const OTHER_ORG = 'org_b';
const ROBOT = 'rbt_1';

let store: TestStore;

function filter(over: Partial<EpisodeFilter> = {}): EpisodeFilter {
  return { eq: {}, metadata: {}, annotation: {}, ...over };
}

async function ingest(reports: EpisodeReport[], orgId = ORG, s: Store = store): Promise<string[]> {
  const items: IngestItem[] = reports.map((r) => ({ orgId, robotId: ROBOT, report: r, reportedAt: T0 + 1000 }));
  expect(await s.episodes.ingest(items)).toEqual(reports.map(() => 'inserted'));
  return reports.map((r) => r.id);
}

async function ids(f: Partial<EpisodeFilter>, orgId = ORG, s: Store = store): Promise<string[]> {
  return (await s.episodes.list(orgId, filter(f), 0, 1000)).map((r) => r.id);
}

async function annotate(id: string, patch: Record<string, unknown>, s: Store = store): Promise<void> {
  expect(await s.episodes.patchAnnotations(ORG, id, patch)).toBeDefined();
}

/** Every episode of the organization, the plain reading of a presence filter over the rows themselves. */
async function expected(f: EpisodeFilter, s: Store = store): Promise<string[]> {
  const rows = await s.episodes.list(ORG, filter(), 0, 100_000);
  const holds = (layer: Record<string, unknown>, want: Record<string, boolean> | undefined) =>
    Object.entries(want ?? {}).every(([k, present]) => Object.prototype.hasOwnProperty.call(layer, k) === present);
  return rows.filter((r) => holds(r.metadata, f.hasMetadata) && holds(r.annotations, f.hasAnnotation)).map((r) => r.id);
}

describeStore('presence filters', (open, engine) => {
  beforeEach(async () => {
    store = await open();
  });
  afterEach(async () => {
    await store.close();
  });

  it('has_metadata: a recorded key is present whatever its value, even one too long for the attribute index', async () => {
    const long = 'v'.repeat(MAX_INDEXED_ATTR_VALUE + 1);
    const [a, b, c, d] = await ingest([
      testReport({ metadata: { site: 'lab', note: long } }),
      testReport({ metadata: { site: null, arm: { side: 'left' } } }),
      testReport({ metadata: {} }),
      testReport({ metadata: { arm: [1, 2], flag: false } }),
    ]);
    expect(await ids({ hasMetadata: { site: true } })).toEqual([a, b]);
    expect(await ids({ hasMetadata: { site: false } })).toEqual([c, d]);
    // The long value has no row in the attribute index; its key is present all the same.
    expect(await ids({ metadata: { note: long.slice(0, 512) } })).toEqual([]);
    expect(await ids({ hasMetadata: { note: true } })).toEqual([a]);
    expect(await ids({ hasMetadata: { note: false } })).toEqual([b, c, d]);
    expect(await ids({ hasMetadata: { arm: true, flag: true } })).toEqual([d]);
    expect(await ids({ hasMetadata: { arm: true, flag: false } })).toEqual([b]);
    // The layers do not mix: no annotation is named site.
    expect(await ids({ hasAnnotation: { site: true } })).toEqual([]);
    expect(await ids({ hasAnnotation: { site: false } })).toEqual([a, b, c, d]);
  });

  it('has_annotation follows patches: set, changed, deleted with null (absent), set again; other keys stay', async () => {
    const [a, b, c] = await ingest([testReport(), testReport(), testReport({ metadata: { qa_status: 'recorded' } })]);
    const unreviewed = { hasAnnotation: { qa_status: false } };
    const reviewed = { hasAnnotation: { qa_status: true } };
    expect(await ids(unreviewed)).toEqual([a, b, c]);
    expect(await ids(reviewed)).toEqual([]);

    await annotate(a!, { qa_status: 'accepted', qa_by: 'key_1' });
    await annotate(b!, { qa_status: 'rejected', qa_tags: ['blurry'] });
    expect(await ids(unreviewed)).toEqual([c]);
    expect(await ids(reviewed)).toEqual([a, b]);
    // A changed value keeps the key present.
    await annotate(a!, { qa_status: 'rejected' });
    expect(await ids(reviewed)).toEqual([a, b]);
    // Deleted with null: absent again; the untouched key stays present.
    await annotate(b!, { qa_status: null });
    expect(await ids(unreviewed)).toEqual([b, c]);
    expect(await ids({ hasAnnotation: { qa_tags: true } })).toEqual([b]);
    expect((await store.episodes.get(ORG, b!))!.annotations).toEqual({ qa_tags: ['blurry'] });
    // Deleting a key that is not there changes nothing; setting it again makes it present.
    await annotate(c!, { qa_status: null, other: null });
    expect(await ids(unreviewed)).toEqual([b, c]);
    await annotate(b!, { qa_status: 'accepted' });
    expect(await ids(unreviewed)).toEqual([c]);
    // A patch that leaves the key alone leaves its presence alone.
    await annotate(a!, { qa_by: null });
    expect(await ids(reviewed)).toEqual([a, b]);
    // Recorded metadata of the same name is another layer.
    expect(await ids({ hasMetadata: { qa_status: true } })).toEqual([c]);
  });

  it('combines with equality, attribute and time filters, and the same key with its value', async () => {
    const at = (s: number) => new Date(T0 + s * 1000).toISOString();
    const [a, b, c, d] = await ingest([
      testReport({ task_id: 't1', started_at: at(0), metadata: { site: 'lab' } }),
      testReport({ task_id: 't1', started_at: at(10), metadata: { site: 'lab' } }),
      testReport({ task_id: 't2', started_at: at(20), metadata: { site: 'field' } }),
      testReport({ task_id: 't1', started_at: at(30), metadata: {} }),
    ]);
    await annotate(b!, { qa_status: 'accepted' });
    await annotate(c!, { qa_status: 'rejected' });
    const unreviewed = { qa_status: false };
    expect(await ids({ eq: { task_id: 't1' }, hasAnnotation: unreviewed })).toEqual([a, d]);
    expect(await ids({ eq: { task_id: 't1', outcome: 'success' }, hasAnnotation: unreviewed, hasMetadata: { site: true } })).toEqual([a]);
    expect(await ids({ metadata: { site: 'lab' }, hasAnnotation: unreviewed })).toEqual([a]);
    expect(await ids({ metadata: { site: 'lab' }, hasAnnotation: { qa_status: true } })).toEqual([b]);
    expect(await ids({ hasAnnotation: unreviewed, from: T0 + 1 })).toEqual([d]);
    expect(await ids({ hasAnnotation: { qa_status: true }, to: T0 + 15_000 })).toEqual([b]);
    // Value and presence of one key together: the value implies presence, and contradicts absence.
    expect(await ids({ annotation: { qa_status: 'rejected' }, hasAnnotation: { qa_status: true } })).toEqual([c]);
    expect(await ids({ annotation: { qa_status: 'rejected' }, hasAnnotation: { qa_status: false } })).toEqual([]);
    // Evaluation and discarded rules (dataset snapshots) still apply.
    expect(await ids({ hasAnnotation: unreviewed, excludeDiscarded: true, excludeEval: true })).toEqual([a, d]);
    // Another organization's episodes never show, present or absent.
    const [theirs] = await ingest([testReport({ metadata: { site: 'lab' } })], OTHER_ORG);
    expect(await ids({ hasAnnotation: unreviewed })).toEqual([a, d]);
    expect(await ids({ hasMetadata: { site: true } }, OTHER_ORG)).toEqual([theirs]);
    expect(await ids({ hasAnnotation: unreviewed }, OTHER_ORG)).toEqual([theirs]);
  });

  it('pages by keyset: every page of list, lines and seqs is exactly the filter, in order, whatever the page size', async () => {
    const reports = Array.from({ length: 23 }, (_, i) => testReport({ task_id: `t${i % 3}`, metadata: i % 4 === 0 ? {} : { site: `s${i % 2}` } }));
    const all = await ingest(reports);
    for (let i = 0; i < all.length; i++) {
      if (i % 3 === 0) await annotate(all[i]!, { qa_status: 'accepted' });
      if (i % 5 === 0) await annotate(all[i]!, { qa_status: null, note: 'x' });
    }
    const filters: EpisodeFilter[] = [
      filter({ hasAnnotation: { qa_status: false } }),
      filter({ hasAnnotation: { qa_status: true } }),
      filter({ hasAnnotation: { qa_status: false, note: false }, hasMetadata: { site: true } }),
      filter({ eq: { task_id: 't1' }, hasAnnotation: { qa_status: false } }),
      filter({ metadata: { site: 's1' }, hasAnnotation: { note: true } }),
      filter({ hasMetadata: { site: true }, hasAnnotation: { qa_status: true } }),
    ];
    for (const f of filters) {
      const want = (await expected(f)).filter((id) => f.eq.task_id === undefined || reports.find((r) => r.id === id)!.task_id === f.eq.task_id);
      const wantWithAttrs = f.metadata.site === undefined ? want : want.filter((id) => reports.find((r) => r.id === id)!.metadata.site === f.metadata.site);
      expect(wantWithAttrs.length, JSON.stringify(f)).toBeGreaterThan(0);
      for (const size of [1, 2, 5, 100]) {
        const got: string[] = [];
        const seqs: number[] = [];
        for (let after = 0; ; ) {
          const page = await store.episodes.list(ORG, f, after, size);
          got.push(...page.map((r) => r.id));
          seqs.push(...page.map((r) => r.seq));
          if (page.length < size) break;
          after = page[page.length - 1]!.seq;
        }
        expect(got, `${JSON.stringify(f)} by ${size}`).toEqual(wantWithAttrs);
        expect(await store.episodes.listSeqs(ORG, f, 0, 1000)).toEqual(seqs);
        // The export's page: lines up to the page's last seq.
        const upTo = seqs[Math.floor(seqs.length / 2)]!;
        const lines = await store.episodes.listLines(ORG, f, 0, 1000, upTo);
        expect(lines.rows.map((r) => r[0])).toEqual(seqs.filter((s) => s <= upTo));
        const tail = await store.episodes.listSeqs(ORG, f, seqs[0]!, 1000);
        expect(tail).toEqual(seqs.slice(1));
      }
    }
  });

  it('tells keys apart exactly: a NUL, a backslash, dots, a key named __proto__, a long key', async () => {
    const metadata = JSON.parse('{"a\\u0000b": 1, "a\\\\b": 2, "x.y": 3, "__proto__": 4, "nul": "v\\u0000"}') as Record<string, unknown>;
    const longKey = 'k'.repeat(256);
    const [a, b] = await ingest([testReport({ metadata }), testReport({ metadata: { a: 1, [longKey]: 1 } })]);
    expect(Object.keys((await store.episodes.get(ORG, a!))!.metadata)).toContain('__proto__');
    for (const key of ['a\u0000b', 'a\\b', 'x.y', '__proto__', 'nul']) {
      expect(await ids({ hasMetadata: { [key]: true } }), key).toEqual([a]);
      expect(await ids({ hasMetadata: { [key]: false } }), key).toEqual([b]);
    }
    for (const key of ['a', 'ab', 'a\\\\b', 'a\u0000', 'x', 'constructor']) {
      expect(await ids({ hasMetadata: { [key]: true } }), key).toEqual(key === 'a' ? [b] : []);
    }
    expect(await ids({ hasMetadata: { [longKey]: true } })).toEqual([b]);
    // The same keys in the annotation layer, set and then deleted with null.
    const ann = JSON.parse('{"a\\u0000b": "x", "a\\\\b": "y", "__proto__": "z"}') as Record<string, unknown>;
    await annotate(b!, ann);
    for (const key of ['a\u0000b', 'a\\b', '__proto__']) expect(await ids({ hasAnnotation: { [key]: true } }), key).toEqual([b]);
    await annotate(b!, JSON.parse('{"a\\u0000b": null, "__proto__": null}') as Record<string, unknown>);
    expect(await ids({ hasAnnotation: { 'a\u0000b': true } })).toEqual([]);
    expect(await ids({ hasAnnotation: JSON.parse('{"__proto__": true}') as Record<string, boolean> })).toEqual([]);
    expect(await ids({ hasAnnotation: JSON.parse('{"__proto__": false}') as Record<string, boolean> })).toEqual([a, b]);
    expect(await ids({ hasAnnotation: { 'a\\b': true } })).toEqual([b]);
  });

  it('a dataset snapshot pins exactly the episodes the presence filter lists at that moment', async () => {
    await store.orgs.create({ id: ORG, name: 'a', tier: 'enterprise', createdAt: T0 });
    const all = await ingest(Array.from({ length: 9 }, (_, i) => testReport({ metadata: i % 2 ? { site: 'lab' } : {} })));
    for (const i of [0, 1, 2, 5]) await annotate(all[i]!, { qa_status: 'accepted' });
    await annotate(all[2]!, { qa_status: null });
    const f = filter({ hasAnnotation: { qa_status: false }, hasMetadata: { site: true }, excludeDiscarded: true, excludeEval: true });
    const want = await ids(f);
    expect(want).toEqual([all[3], all[7]]);
    await store.datasets.create({ id: 'ds_presence', orgId: ORG, name: 'unreviewed', description: null, filter: { 'has_annotation.qa_status': 'false' }, createdBy: 'key_1', createdAt: T0 });
    const snapshot = await store.datasets.snapshot(ORG, 'ds_presence', f, T0 + 5000);
    expect(snapshot).toMatchObject({ episodeCount: 2 });
    // Reviewed afterwards: the snapshot keeps its members, the live filter moves on.
    await annotate(all[3]!, { qa_status: 'rejected' });
    expect((await store.datasets.members('ds_presence', 0, 100)).map((r) => r.id)).toEqual(want);
    expect(await ids(f)).toEqual([all[7]]);
  });

  it('a database from before the key index gets the keys of every episode it holds on upgrade', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'fleet-presence-upgrade-'));
    const disk = await openTestStore(engine, engine === 'sqlite' ? { dataDir: dir } : {});
    try {
      const long = 'v'.repeat(MAX_INDEXED_ATTR_VALUE + 10);
      // A NUL in a value: PostgreSQL's JSON functions refuse such text, so the backfill must not use them.
      const withNul = JSON.parse('{"site": "lab\\u0000", "k\\u0000": 1, "note": "n"}') as Record<string, unknown>;
      const [a, b, c] = await ingest([testReport({ metadata: withNul }), testReport({ metadata: { note: long } }), testReport()], ORG, disk);
      const [theirs] = await ingest([testReport({ metadata: { site: 'x' } })], OTHER_ORG, disk);
      await disk.episodes.patchAnnotations(ORG, a!, { qa_status: 'accepted', big: long });
      await disk.episodes.patchAnnotations(ORG, b!, { qa_status: 'rejected' });
      await disk.episodes.patchAnnotations(ORG, b!, { qa_status: null });
      // The database as the previous version left it: no key index, the migration not applied.
      await downgrade(disk, engine);
      const upgraded = await openTwin(disk);
      try {
        expect(await ids({ hasAnnotation: { qa_status: false } }, ORG, upgraded)).toEqual([b, c]);
        expect(await ids({ hasAnnotation: { qa_status: true, big: true } }, ORG, upgraded)).toEqual([a]);
        expect(await ids({ hasMetadata: { note: true } }, ORG, upgraded)).toEqual([a, b]);
        expect(await ids({ hasMetadata: { 'k\u0000': true, site: true } }, ORG, upgraded)).toEqual([a]);
        expect(await ids({ hasMetadata: { site: true } }, OTHER_ORG, upgraded)).toEqual([theirs]);
        // Writes after the upgrade keep it in step.
        await annotate(c!, { qa_status: 'accepted' }, upgraded);
        expect(await ids({ hasAnnotation: { qa_status: false } }, ORG, upgraded)).toEqual([b]);
      } finally {
        await upgraded.close();
      }
    } finally {
      await disk.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

/** Drops the key index and forgets the migration that made it, as a database of the previous version. */
async function downgrade(s: TestStore, engine: TestEngine): Promise<void> {
  if (engine === 'sqlite') {
    const version = MIGRATIONS.find((m) => m.name.startsWith('the key index'))!.version;
    expect(version).toBe(MIGRATIONS.length);
    sqliteDb(s).exec(`DROP TABLE episode_attr_keys; DELETE FROM schema_migrations WHERE version = ${version}`);
  } else {
    const version = PG_MIGRATIONS.find((m) => m.name.startsWith('the key index'))!.version;
    expect(version).toBe(PG_MIGRATIONS.length);
    await (s as PgStore).db.query(`DROP TABLE episode_attr_keys; DELETE FROM schema_migrations WHERE version = ${version}`);
  }
}

describe('the key index rows', () => {
  it('hold every top-level key within the key bound, whatever the value; a patch moves only the keys it adds or deletes', () => {
    const long = 'k'.repeat(MAX_INDEXED_ATTR_KEY);
    expect(storedKeys(JSON.stringify({ a: null, [long]: 1, [`${long}x`]: 1, b: 'v'.repeat(10_000) }), '{"__proto__":{"x":1}}')).toEqual([
      ['m', 'a'],
      ['m', long],
      ['m', 'b'],
      ['a', '__proto__'],
    ]);
    // Not an object (never written so, but read defensively): no keys.
    expect(storedKeys('null', '[1,2]')).toEqual([]);
    expect(keyChanges({ a: 1, b: 2, c: 3 }, { a: 9, c: 3, d: null })).toEqual({ removed: ['b'], added: ['d'] });
    expect(keyChanges({}, {})).toEqual({ removed: [], added: [] });
  });
});

describe('presence filters in a chunked SQLite snapshot (the background thread plans and reads the windows)', () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'fleet-presence-chunks-'));
  });
  afterEach(() => {
    rmSync(dir, { recursive: true, force: true });
  });

  it('pins what the list gives, across windows of three seqs', async () => {
    const disk = openSqliteStore(dir, REAL_TIME);
    try {
      (disk.datasets as SqliteDatasets).snapshotWindow = { initial: 3, min: 3, max: 3 };
      await disk.orgs.create({ id: ORG, name: 'a', tier: 'enterprise', createdAt: T0 });
      const all = await ingest(Array.from({ length: 20 }, (_, i) => testReport({ metadata: i % 3 ? { site: 'lab' } : {} })), ORG, disk);
      for (let i = 0; i < all.length; i += 2) await disk.episodes.patchAnnotations(ORG, all[i]!, { qa_status: 'accepted' });
      await disk.episodes.patchAnnotations(ORG, all[4]!, { qa_status: null });
      for (const f of [filter({ hasAnnotation: { qa_status: false } }), filter({ hasAnnotation: { qa_status: true }, hasMetadata: { site: true } })]) {
        const want = await ids(f, ORG, disk);
        expect(want).toEqual(await expected(f, disk));
        const id = `ds_${want.length}_${JSON.stringify(f).length}`;
        await disk.datasets.create({ id, orgId: ORG, name: id, description: null, filter: {}, createdBy: 'key_1', createdAt: T0 });
        expect(await disk.datasets.snapshot(ORG, id, f, T0 + 5000)).toMatchObject({ episodeCount: want.length });
        expect((await disk.datasets.members(id, 0, 100)).map((r) => r.id)).toEqual(want);
      }
    } finally {
      await disk.close();
    }
  });
});
