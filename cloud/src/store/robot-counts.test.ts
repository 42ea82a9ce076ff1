/**
 * robot_counts (migration 19 on SQLite, 8 on PostgreSQL): the enrolled robots of each
 * organization, kept by triggers, which enrollment checks the robot limit against. An upgraded
 * database starts from the robots it already has; every later write of robots keeps it.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { MIGRATIONS } from './sqlite/migrations.js';
import { PG_MIGRATIONS } from './postgres/migrations.js';
import type { PgStore } from './postgres/store.js';
import { openTestStore, openTwin, postgresAvailable, sqliteDb, type TestEngine } from './test-store.js';
import type { NewRobotRow, Store } from './shared/types.js';

const T0 = Date.parse('2026-01-01T00:00:00Z');

describe.each((postgresAvailable() ? ['sqlite', 'postgres'] : ['sqlite']) as TestEngine[])('enrolled robots counted per organization [%s]', (engine) => {
  let n = 0;
  async function enroll(store: Store, orgId: string, tokenHash: string, limit?: number) {
    return store.robots.enroll({
      tokenHash,
      now: T0,
      robotLimit: () => limit,
      build: (): NewRobotRow => ({
        id: `rbt_${engine}_${++n}`,
        name: `robot ${n}`,
        platform: null,
        runtimeVersion: null,
        capabilities: [],
        mqttPasswordHash: 'h',
        connected: false,
        recordingState: null,
        lastSeenAt: null,
        createdAt: T0,
      }),
    });
  }

  it('an upgraded database counts the robots it has; enrollments, de-enrollments and deletes keep the count', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'fleet-robot-counts-'));
    const store = await openTestStore(engine, engine === 'sqlite' ? { dataDir: dir } : {});
    try {
      for (const org of ['org_a', 'org_b']) {
        await store.orgs.create({ id: org, name: org, tier: 'enterprise', createdAt: T0 });
        await store.robots.createEnrollmentToken({ id: `ret_${org}`, orgId: org, tokenHash: `hash-${org}`, tokenPrefix: 'ret_x', namePrefix: null, maxUses: 100, expiresAt: T0 + 1e9, createdBy: 'test', createdAt: T0 });
      }
      const a: string[] = [];
      for (let i = 0; i < 4; i++) {
        const r = await enroll(store, 'org_a', 'hash-org_a');
        if (r.kind === 'enrolled') a.push(r.robot.id);
      }
      expect(a).toHaveLength(4);
      await enroll(store, 'org_b', 'hash-org_b');
      await store.robots.deenroll('org_a', a[0]!, T0 + 1);
      // The database as the previous version left it: no counts, no triggers.
      const drop = 'DROP TABLE robot_counts';
      if (engine === 'sqlite') {
        const version = MIGRATIONS.find((m) => m.name.startsWith('enrolled robots counted'))!.version;
        sqliteDb(store).exec(`DROP TRIGGER robots_count_insert; DROP TRIGGER robots_count_delete; DROP TRIGGER robots_count_update; ${drop}; DELETE FROM schema_migrations WHERE version = ${version}`);
      } else {
        const version = PG_MIGRATIONS.find((m) => m.name.startsWith('enrolled robots counted'))!.version;
        await (store as PgStore).db.query(`${drop}; DROP FUNCTION count_enrolled_robots() CASCADE; DELETE FROM schema_migrations WHERE version = ${version}`);
      }
      const upgraded = await openTwin(store);
      try {
        // Three enrolled robots in org_a (one de-enrolled), one in org_b.
        expect(await enroll(upgraded, 'org_a', 'hash-org_a', 3)).toEqual({ kind: 'robot_limit', limit: 3 });
        expect(await enroll(upgraded, 'org_a', 'hash-org_a', 4)).toMatchObject({ kind: 'enrolled' });
        expect(await enroll(upgraded, 'org_a', 'hash-org_a', 4)).toEqual({ kind: 'robot_limit', limit: 4 });
        expect(await enroll(upgraded, 'org_b', 'hash-org_b', 2)).toMatchObject({ kind: 'enrolled' });
        expect(await enroll(upgraded, 'org_b', 'hash-org_b', 2)).toEqual({ kind: 'robot_limit', limit: 2 });
        // A de-enrollment frees a place, once (a second de-enrollment of the same robot changes nothing).
        await upgraded.robots.deenroll('org_a', a[1]!, T0 + 2);
        await upgraded.robots.deenroll('org_a', a[1]!, T0 + 3);
        expect(await enroll(upgraded, 'org_a', 'hash-org_a', 4)).toMatchObject({ kind: 'enrolled' });
        expect(await enroll(upgraded, 'org_a', 'hash-org_a', 4)).toEqual({ kind: 'robot_limit', limit: 4 });
        // Rows written by hand (an operator's SQL) are counted too: the triggers see every write.
        const countOf = async (org: string): Promise<number> =>
          engine === 'sqlite'
            ? (sqliteDb(upgraded).prepare('SELECT enrolled FROM robot_counts WHERE org_id = ?').get(org) as { enrolled: number }).enrolled
            : Number((await (upgraded as PgStore).db.query<{ enrolled: string }>('SELECT enrolled FROM robot_counts WHERE org_id = $1', [org])).rows[0]!.enrolled);
        expect(await countOf('org_a')).toBe(4);
        const sql = `UPDATE robots SET deenrolled_at = NULL WHERE id = '${a[0]}'`;
        const del = `DELETE FROM robots WHERE id = '${a[2]}'`;
        if (engine === 'sqlite') sqliteDb(upgraded).exec(`${sql}; ${del}`);
        else await (upgraded as PgStore).db.query(`${sql}; ${del}`);
        expect(await countOf('org_a')).toBe(4);
        expect(await countOf('org_b')).toBe(2);
      } finally {
        await upgraded.close();
      }
    } finally {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
