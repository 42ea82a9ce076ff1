import { storedKeys } from '../shared/episode-lines.js';
import { schemaSql } from '../shared/schema.js';
import type { Db } from './db.js';

/**
 * SQLite's numbered schema migrations, applied in order at start inside one transaction each.
 * Tables, columns and indexes come from the schema both engines share (shared/schema.ts, where
 * each names the migration that brought it); a step adds here only what is SQLite's own:
 * triggers and data carried across. Never change a step that has shipped: add the next one.
 */
const STEPS: readonly { name: string; after?: string; backfill?: (db: Db) => void }[] = [
  { name: 'organizations, api keys, idempotency, meters' },
  { name: 'robots and enrollment tokens' },
  { name: 'episodes, attributes, outcome changes, replicas, events' },
  { name: 'datasets and pinned snapshot members' },
  { name: 'webhook subscriptions and deliveries' },
  { name: 'cloud sync: destinations, routing rules, routes, grant forwards, pressure' },
  { name: "retention: when the robot pruned an episode's local copy" },
  { name: 'fleet administration: revoked enrollment tokens, de-enrolled robots, credential rotation, webhook attempt log' },
  { name: 'reads at scale: a claim for snapshots written in chunks' },
  {
    name: 'auth revision: a counter every change to keys and organizations bumps',
    // Any writer (this process, the admin CLI) that changes what a principal is made of bumps
    // the revision in the same transaction, and a changed revision drops the authenticator's
    // cache, so a revocation or an entitlement change holds from the very next request.
    after: [
      'INSERT INTO auth_revision (id, revision) VALUES (1, 0);',
      ...bumpAuthRevisionOn('api_keys', 'id, org_id, name, scopes, key_hash, created_by, created_at, expires_at, revoked_at'),
      ...bumpAuthRevisionOn('orgs'),
      ...bumpAuthRevisionOn('org_features'),
      ...bumpAuthRevisionOn('org_limits'),
    ].join('\n'),
  },
  { name: 'webhook claims with a lease' },
  { name: 'cloud settings: the fingerprint of the key that seals stored secrets' },
  { name: 'grant forward claims with a lease' },
  { name: 'idempotency claim tokens' },
  { name: 'robot list orders: by name and by last seen' },
  {
    name: 'issued grants: the grants the relay handed to a robot, per episode and destination',
    // Seeded with the grant each replica already names, so uploads under way across the upgrade still report.
    after: 'INSERT OR IGNORE INTO issued_grants (episode_seq, destination_id, grant_id, issued_at) SELECT episode_seq, destination_id, grant_id, updated_at FROM replicas;',
  },
  { name: 'robot status order: the robot clock of the last status written' },
  { name: 'schema parity with PostgreSQL (found by the schema drift test): the pending deliveries of a subscription (PostgreSQL migration 7)' },
  {
    name: 'enrolled robots counted per organization, kept by triggers',
    after: [
      ...robotCountTriggers(),
      'INSERT INTO robot_counts (org_id, enrolled) SELECT org_id, COUNT(*) FROM robots WHERE deenrolled_at IS NULL GROUP BY org_id;',
    ].join('\n'),
  },
  { name: 'the key index: which top-level metadata and annotation keys each episode has', backfill: backfillAttrKeys },
];

/** Episodes read per page of the key index's backfill. */
const BACKFILL_PAGE = 1_000;

/**
 * The keys of the episodes indexed before the key index, computed by the same code the writes
 * use (JSON.parse and the key bound, not SQLite's json_each, whose idea of a key's length and of
 * `\u0000` in it is its own), a page of episodes at a time inside the migration's transaction.
 */
function backfillAttrKeys(db: Db): void {
  const page = db.prepare<[number, number], { seq: number; org_id: string; metadata: string; annotations: string }>(
    'SELECT seq, org_id, metadata, annotations FROM episodes WHERE seq > ? ORDER BY seq LIMIT ?',
  );
  const insert = db.prepare('INSERT OR IGNORE INTO episode_attr_keys (org_id, layer, key, seq) VALUES (?, ?, ?, ?)');
  for (let after = 0; ; ) {
    const rows = page.all(after, BACKFILL_PAGE);
    for (const r of rows) for (const [layer, key] of storedKeys(r.metadata, r.annotations)) insert.run(r.org_id, layer, key, r.seq);
    if (rows.length < BACKFILL_PAGE) return;
    after = rows[rows.length - 1]!.seq;
  }
}

/** robot_counts follows every write of robots: an enrolled robot added, de-enrolled, enrolled again or deleted. */
function robotCountTriggers(): string[] {
  const add = (org: string) => `INSERT INTO robot_counts (org_id, enrolled) VALUES (${org}, 1) ON CONFLICT (org_id) DO UPDATE SET enrolled = enrolled + 1;`;
  const remove = (org: string) => `UPDATE robot_counts SET enrolled = enrolled - 1 WHERE org_id = ${org};`;
  return [
    `CREATE TRIGGER robots_count_insert AFTER INSERT ON robots WHEN NEW.deenrolled_at IS NULL BEGIN ${add('NEW.org_id')} END;`,
    `CREATE TRIGGER robots_count_delete AFTER DELETE ON robots WHEN OLD.deenrolled_at IS NULL BEGIN ${remove('OLD.org_id')} END;`,
    `CREATE TRIGGER robots_count_update AFTER UPDATE OF org_id, deenrolled_at ON robots BEGIN
       UPDATE robot_counts SET enrolled = enrolled - 1 WHERE OLD.deenrolled_at IS NULL AND org_id = OLD.org_id;
       INSERT INTO robot_counts (org_id, enrolled) SELECT NEW.org_id, 1 WHERE NEW.deenrolled_at IS NULL ON CONFLICT (org_id) DO UPDATE SET enrolled = enrolled + 1;
     END;`,
  ];
}

/** One trigger per write kind: SQLite triggers fire per row and name one event each. */
function bumpAuthRevisionOn(table: string, updatedColumns?: string): string[] {
  const bump = 'BEGIN UPDATE auth_revision SET revision = revision + 1 WHERE id = 1; END;';
  return [
    `CREATE TRIGGER ${table}_insert_auth_revision AFTER INSERT ON ${table} ${bump}`,
    `CREATE TRIGGER ${table}_update_auth_revision AFTER UPDATE${updatedColumns ? ` OF ${updatedColumns}` : ''} ON ${table} ${bump}`,
    `CREATE TRIGGER ${table}_delete_auth_revision AFTER DELETE ON ${table} ${bump}`,
  ];
}

/** `backfill` runs after `sql`, in the same transaction: data a statement cannot carry across. */
export const MIGRATIONS: readonly { version: number; name: string; sql: string; backfill?: (db: Db) => void }[] = STEPS.map((step, i) => ({
  version: i + 1,
  name: step.name,
  sql: [schemaSql('sqlite', i + 1), step.after ?? ''].join('\n'),
  ...(step.backfill ? { backfill: step.backfill } : {}),
}));
