import { DELIVERY_ATTEMPT_OUTCOMES, DESTINATION_TYPES, GRANT_OUTCOMES, REPLICA_STATES, RETENTION_DIRECTIVES, WEBHOOK_STATUSES } from '@fleet/protocol';

/**
 * The cloud's schema, declared once for both engines: every table, column and index with the
 * migration that brought it, rendered into each engine's dialect by `schemaSql`. Each engine's
 * migration list (sqlite/migrations.ts, postgres/migrations.ts) names its steps and adds only
 * what has no counterpart in the other dialect (triggers, data carried across, PostgreSQL's
 * extended statistics and NOT VALID constraints).
 *
 * History. `since` is the SQLite migration that added a thing. PostgreSQL's history started
 * later: its migration 1 is everything SQLite had by its migration 12, and each SQLite migration
 * after that has a PostgreSQL one of its own (`postgresVersion`). Shipped migrations never
 * change: a new column, index or table is added here with the next `since`, and both engines'
 * lists get a step for it. The schema drift test reads both engines' schemas back after every
 * migration and fails on any difference not listed with its reason.
 *
 * Types, by family: `text`; `int` (INTEGER on both: small counts and codes); `big` (INTEGER on
 * SQLite, BIGINT on PostgreSQL: times in milliseconds since the epoch, sizes, sequence numbers);
 * `real` (REAL, DOUBLE PRECISION); `bool` (0/1 INTEGER on SQLite, BOOLEAN; a default is written
 * `DEFAULT false`); `serial` and `identity` (SQLite's AUTOINCREMENT rowid, PostgreSQL's
 * BIGSERIAL or identity column; both the primary key). JSON is kept as the TEXT the API wrote,
 * read back byte for byte.
 */

export type Engine = 'sqlite' | 'postgres';

type Family = 'text' | 'int' | 'big' | 'real' | 'bool' | 'serial' | 'identity';

interface ColumnOptions {
  /** The SQLite migration that added the column (default: the table's own). */
  since?: number;
  /** On one engine only. */
  only?: Engine;
  /** A definition (type and constraints) that differs on one engine, written whole. */
  sqlite?: string;
  postgres?: string;
}

interface Column extends ColumnOptions {
  name: string;
  type: Family;
  /** Constraints in words both dialects read alike (NOT NULL, UNIQUE, REFERENCES, CHECK, DEFAULT). */
  rest: string;
}

interface Index {
  name: string;
  /** The parenthesised key, the same on both engines or one per engine. */
  on: string | Record<Engine, string>;
  where?: string;
  since?: number;
  /** When PostgreSQL's history added it at another step than SQLite's. */
  postgresSince?: number;
}

interface Table {
  name: string;
  since: number;
  only?: Engine;
  columns: Column[];
  /** A primary key over several columns (a single-column one is written on the column). */
  primaryKey?: string[];
  /** SQLite: the table is its primary key's b-tree (no separate rowid). */
  withoutRowid?: boolean;
  indexes?: Index[];
}

/**
 * `CHECK (column IN (...))` from one of the protocol's lists: a value the API and the wire refuse
 * is refused by the database too, from one source (a list's values are identifiers, never quoted
 * text of a user).
 */
function oneOf(column: string, values: readonly string[]): string {
  return `CHECK (${column} IN (${values.map((v) => `'${v}'`).join(', ')}))`;
}

function c(name: string, type: Family, rest = '', options: ColumnOptions = {}): Column {
  return { name, type, rest, ...options };
}

/** In dependency order: a table comes after every table its foreign keys name. */
const TABLES: readonly Table[] = [
  {
    // Installation settings. 'secret_key_fingerprint' (an HMAC of a fixed label under the
    // sealing key, never the key) lets a process started with another key refuse to serve
    // instead of failing to open every sealed secret.
    name: 'cloud_settings',
    since: 12,
    columns: [c('name', 'text', 'PRIMARY KEY'), c('value', 'text', 'NOT NULL')],
  },
  {
    name: 'orgs',
    since: 1,
    columns: [c('id', 'text', 'PRIMARY KEY'), c('name', 'text', 'NOT NULL'), c('tier', 'text', 'NOT NULL'), c('created_at', 'big', 'NOT NULL')],
  },
  {
    name: 'org_features',
    since: 1,
    columns: [c('org_id', 'text', 'NOT NULL REFERENCES orgs(id)'), c('feature', 'text', 'NOT NULL'), c('enabled', 'bool', 'NOT NULL')],
    primaryKey: ['org_id', 'feature'],
    withoutRowid: true,
  },
  {
    name: 'org_limits',
    since: 1,
    columns: [c('org_id', 'text', 'NOT NULL REFERENCES orgs(id)'), c('name', 'text', 'NOT NULL'), c('value', 'real', 'NOT NULL')],
    primaryKey: ['org_id', 'name'],
    withoutRowid: true,
  },
  {
    name: 'api_keys',
    since: 1,
    columns: [
      c('id', 'text', 'PRIMARY KEY'),
      c('org_id', 'text', 'NOT NULL REFERENCES orgs(id)'),
      c('name', 'text', 'NOT NULL'),
      c('scopes', 'text', 'NOT NULL'),
      c('key_hash', 'text', 'NOT NULL UNIQUE'),
      c('created_by', 'text', 'NOT NULL'),
      c('created_at', 'big', 'NOT NULL'),
      c('expires_at', 'big'),
      c('revoked_at', 'big'),
      c('last_used_at', 'big'),
    ],
    indexes: [{ name: 'api_keys_by_org', on: '(org_id, created_at, id)' }],
  },
  {
    // Bumped by triggers (each engine's own) on every change to what authentication reads, so
    // each replica's cache of keys and organizations knows when it is stale. The API
    // authenticator reads this one row per request. api_keys.last_used_at (batched last-use
    // writes) is left out on purpose: it decides nothing, and bumping on it would empty every
    // replica's cache at each flush. A migration that adds a column to api_keys must add it to
    // the update trigger's column list.
    name: 'auth_revision',
    since: 10,
    columns: [c('id', 'int', 'PRIMARY KEY CHECK (id = 1)'), c('revision', 'big', 'NOT NULL')],
  },
  {
    name: 'idempotency_keys',
    since: 1,
    columns: [
      c('org_id', 'text', 'NOT NULL'),
      c('key', 'text', 'NOT NULL'),
      c('fingerprint', 'text', 'NOT NULL'),
      c('state', 'text', "NOT NULL CHECK (state IN ('in_flight', 'completed'))"),
      c('status', 'int'),
      c('content_type', 'text'),
      c('body', 'text'),
      c('lease_until', 'big'),
      c('expires_at', 'big'),
      c('created_at', 'big', 'NOT NULL'),
      // Who holds an in-flight Idempotency-Key: the token of the request that began it. Only
      // that request completes, releases or renews the claim, so a request whose process came
      // back after its lease ran out (and a retry took the key over) changes nothing.
      c('claim_token', 'text', '', { since: 14 }),
    ],
    primaryKey: ['org_id', 'key'],
    withoutRowid: true,
    indexes: [{ name: 'idempotency_keys_expiry', on: '(expires_at)' }],
  },
  {
    // Request-rate windows shared by the replicas (per key, organization, client address).
    // SQLite is served by one process, which counts in its own memory.
    name: 'rate_counters',
    since: 1,
    only: 'postgres',
    columns: [c('key', 'text', 'PRIMARY KEY'), c('window_start', 'big', 'NOT NULL'), c('count', 'big', 'NOT NULL')],
  },
  {
    name: 'meters',
    since: 1,
    columns: [c('org_id', 'text', 'NOT NULL'), c('meter', 'text', 'NOT NULL'), c('day', 'text', 'NOT NULL'), c('count', 'big', 'NOT NULL')],
    primaryKey: ['org_id', 'day', 'meter'],
    withoutRowid: true,
  },
  {
    name: 'enrollment_tokens',
    since: 2,
    columns: [
      c('id', 'text', 'PRIMARY KEY'),
      c('org_id', 'text', 'NOT NULL REFERENCES orgs(id)'),
      c('token_hash', 'text', 'NOT NULL UNIQUE'),
      c('name_prefix', 'text'),
      c('max_uses', 'int', 'NOT NULL'),
      c('uses', 'int', 'NOT NULL DEFAULT 0'),
      c('expires_at', 'big', 'NOT NULL'),
      c('created_by', 'text', 'NOT NULL'),
      c('created_at', 'big', 'NOT NULL'),
      c('revoked_at', 'big', '', { since: 8 }),
      // The first characters of the token (ret_ and 8 more), to tell tokens apart in a list; NULL for older tokens.
      c('token_prefix', 'text', '', { since: 8 }),
    ],
    indexes: [{ name: 'enrollment_tokens_by_org', on: '(org_id, id)', since: 8 }],
  },
  {
    name: 'robots',
    since: 2,
    columns: [
      c('id', 'text', 'PRIMARY KEY'),
      c('org_id', 'text', 'NOT NULL REFERENCES orgs(id)'),
      c('name', 'text', 'NOT NULL'),
      c('platform', 'text'),
      c('runtime_version', 'text'),
      c('capabilities', 'text', "NOT NULL DEFAULT '[]'"),
      c('mqtt_password_hash', 'text', 'NOT NULL'),
      c('enrollment_token_id', 'text', 'NOT NULL'),
      c('connected', 'bool', 'NOT NULL DEFAULT false'),
      c('recording_state', 'text'),
      c('last_seen_at', 'big'),
      c('created_at', 'big', 'NOT NULL'),
      c('deenrolled_at', 'big', '', { since: 8 }),
      // A rotation asked for and not yet acknowledged by the robot; the old password works meanwhile.
      c('rotation_requested_at', 'big', '', { since: 8 }),
      // The secret of a running rotation, hashed (what the broker checks) and sealed (it is sent
      // again until the robot acknowledges it, so a robot never holds a secret the cloud forgot).
      c('pending_password_hash', 'text', '', { since: 8 }),
      c('pending_secret_sealed', 'text', '', { since: 8 }),
      c('rotated_at', 'big', '', { since: 8 }),
      // Every replica writes every robot status; one that is behind writes statuses the robot
      // has since replaced. The robot's clock of the last status written orders them (NULL: none yet).
      c('status_at', 'big', '', { since: 17 }),
    ],
    indexes: [
      { name: 'robots_by_org', on: '(org_id, id)' },
      // GET /v1/robots sorted by name or by last_seen_at reads a page off an index, so a large
      // fleet is paged without sorting every robot of the organization per request. COLLATE "C":
      // names compare byte by byte, as on SQLite, whatever the database's collation.
      { name: 'robots_by_name', on: { sqlite: '(org_id, name, id)', postgres: '(org_id, name COLLATE "C", id)' }, since: 15 },
      { name: 'robots_by_last_seen', on: { sqlite: '(org_id, COALESCE(last_seen_at, 0), id)', postgres: '(org_id, (COALESCE(last_seen_at, 0)), id)' }, since: 15 },
    ],
  },
  {
    // The event log (episode.finalized, replica and prune events): written in the same
    // transaction as the change it records; the webhook engine fans it out to its queues.
    name: 'events',
    since: 3,
    columns: [
      c('id', 'serial'),
      c('org_id', 'text', 'NOT NULL'),
      c('type', 'text', 'NOT NULL'),
      c('episode_id', 'text'),
      c('payload', 'text', 'NOT NULL'),
      c('created_at', 'big', 'NOT NULL'),
    ],
    indexes: [{ name: 'events_by_org', on: '(org_id, id)' }],
  },
  {
    // `seq` is the keyset of every listing and of routing.
    name: 'episodes',
    since: 3,
    columns: [
      c('seq', 'identity'),
      c('id', 'text', 'NOT NULL UNIQUE'),
      c('org_id', 'text', 'NOT NULL'),
      c('robot_id', 'text', 'NOT NULL'),
      c('recording_session_id', 'text', 'NOT NULL'),
      c('episode_seq', 'big', 'NOT NULL'),
      c('session_name', 'text'),
      c('task_id', 'text'),
      c('task_name', 'text'),
      c('subtask_id', 'text'),
      c('operator_id', 'text'),
      c('operator_name', 'text'),
      c('control_mode', 'text'),
      c('policy_version_id', 'text'),
      c('eval_id', 'text'),
      c('outcome', 'text', 'NOT NULL'),
      c('recorded_outcome', 'text'),
      c('started_at', 'big', 'NOT NULL'),
      c('ended_at', 'big'),
      c('duration_s', 'real'),
      c('message_count', 'big'),
      c('bag_size_bytes', 'big'),
      c('bag_uri', 'text'),
      c('metadata', 'text', 'NOT NULL'),
      c('annotations', 'text', "NOT NULL DEFAULT '{}'"),
      c('segments', 'text', 'NOT NULL'),
      c('manifest', 'text', 'NOT NULL'),
      c('interrupted', 'bool', 'NOT NULL DEFAULT false'),
      c('reported_at', 'big', 'NOT NULL'),
      // 1 when the robot reports that the local files disappeared before a verified sync.
      c('local_missing', 'int', 'NOT NULL DEFAULT 0', { since: 6 }),
      // Robot clock (ms) of the robot's episode.pruned report; set once, with the episode.pruned event.
      c('pruned_at', 'big', '', { since: 7 }),
    ],
    // (org_id, <column>, seq): one value's episodes in seq order, so a page stops after its rows.
    indexes: [
      { name: 'episodes_org', on: '(org_id, seq)' },
      { name: 'episodes_robot', on: '(org_id, robot_id, seq)' },
      { name: 'episodes_task', on: '(org_id, task_id, seq)' },
      { name: 'episodes_subtask', on: '(org_id, subtask_id, seq)' },
      { name: 'episodes_operator', on: '(org_id, operator_id, seq)' },
      { name: 'episodes_control_mode', on: '(org_id, control_mode, seq)' },
      { name: 'episodes_policy', on: '(org_id, policy_version_id, seq)' },
      { name: 'episodes_eval', on: '(org_id, eval_id, seq)' },
      { name: 'episodes_outcome', on: '(org_id, outcome, seq)' },
      // A time range's seqs read from the index alone (the bounds of a list's seq walk): SQLite's
      // index ends with the rowid (seq) by itself, PostgreSQL's names it.
      { name: 'episodes_started', on: { sqlite: '(org_id, started_at)', postgres: '(org_id, started_at, seq)' } },
    ],
  },
  {
    // One row per top-level key of the metadata (layer 'm') and annotations (layer 'a') of an
    // episode, with the value's string form: the index behind metadata.<key> and
    // annotation.<key>. Its key ends in seq, so one (key, value) is read in seq order (a page is
    // a range scan that stops early, and two conditions can be merge-joined on seq); a GIN index
    // on JSONB would hand out bitmaps that must be read whole and sorted before a page's first row.
    name: 'episode_attrs',
    since: 3,
    columns: [
      c('org_id', 'text', 'NOT NULL'),
      c('layer', 'text', "NOT NULL CHECK (layer IN ('m', 'a'))", { postgres: "CHAR(1) NOT NULL CHECK (layer IN ('m', 'a'))" }),
      c('key', 'text', 'NOT NULL'),
      c('value', 'text', 'NOT NULL'),
      c('seq', 'big', 'NOT NULL'),
    ],
    primaryKey: ['org_id', 'layer', 'key', 'value', 'seq'],
    withoutRowid: true,
  },
  {
    // One row per top-level key of the metadata (layer 'm') and annotations (layer 'a') of an
    // episode, whatever its value: the index behind has_metadata.<key> and has_annotation.<key>.
    // episode_attrs cannot say whether an episode has a key: its key puts the value before seq,
    // so one episode's key is found only by reading every value of that key, and a value past the
    // attribute bound has no row there at all. Ending in seq, one key's episodes come in seq
    // order: a page of `=true` is a range scan that stops early, `=false` one lookup per candidate.
    name: 'episode_attr_keys',
    since: 20,
    columns: [
      c('org_id', 'text', 'NOT NULL'),
      c('layer', 'text', "NOT NULL CHECK (layer IN ('m', 'a'))", { postgres: "CHAR(1) NOT NULL CHECK (layer IN ('m', 'a'))" }),
      c('key', 'text', 'NOT NULL'),
      c('seq', 'big', 'NOT NULL'),
    ],
    primaryKey: ['org_id', 'layer', 'key', 'seq'],
    withoutRowid: true,
  },
  {
    name: 'outcome_changes',
    since: 3,
    columns: [
      c('id', 'identity'),
      c('episode_seq', 'big', 'NOT NULL REFERENCES episodes(seq)'),
      c('at', 'big', 'NOT NULL'),
      c('actor', 'text', 'NOT NULL'),
      c('from_outcome', 'text', 'NOT NULL'),
      c('to_outcome', 'text', 'NOT NULL'),
      c('reason', 'text', 'NOT NULL'),
    ],
    indexes: [{ name: 'outcome_changes_by_episode', on: '(episode_seq, id)' }],
  },
  {
    name: 'replicas',
    since: 3,
    columns: [
      c('episode_seq', 'big', 'NOT NULL REFERENCES episodes(seq)'),
      c('destination_id', 'text', 'NOT NULL'),
      c('state', 'text', `NOT NULL ${oneOf('state', REPLICA_STATES)}`),
      c('grant_id', 'text', 'NOT NULL'),
      c('error', 'text'),
      c('object_key', 'text'),
      c('updated_at', 'big', 'NOT NULL'),
      // The robot clock (ms) of the last report applied to a replica: orders reports of one
      // state that arrive out of order. NULL when the cloud wrote the row (a grant handed over).
      c('reported_at', 'big', '', { since: 6 }),
    ],
    primaryKey: ['episode_seq', 'destination_id'],
    withoutRowid: true,
    indexes: [{ name: 'replicas_by_destination', on: '(destination_id, state, episode_seq)' }],
  },
  {
    // COLLATE "C" on PostgreSQL: the list's keyset compares ids byte by byte, like SQLite,
    // whatever the database's collation.
    name: 'datasets',
    since: 4,
    columns: [
      c('id', 'text', 'PRIMARY KEY', { postgres: 'TEXT COLLATE "C" PRIMARY KEY' }),
      c('org_id', 'text', 'NOT NULL REFERENCES orgs(id)'),
      c('name', 'text', 'NOT NULL'),
      c('description', 'text'),
      c('filter', 'text', 'NOT NULL'),
      c('snapshot_at', 'big'),
      c('episode_count', 'big'),
      c('created_by', 'text', 'NOT NULL'),
      c('created_at', 'big', 'NOT NULL'),
      // A snapshot in progress on SQLite: its members are written in bounded chunks (each its
      // own short transaction) while snapshot_at stays NULL, so nobody reads them as a dataset's
      // members until the last transaction pins it. The claim keeps a second snapshot of the
      // same dataset out; a claim whose lease ran out (its process died) is taken over, after
      // the half-written members are removed. PostgreSQL snapshots in one transaction (MVCC:
      // ingest goes on meanwhile).
      c('snapshot_claim', 'text', '', { since: 9, only: 'sqlite' }),
      c('snapshot_lease_until', 'big', '', { since: 9, only: 'sqlite' }),
    ],
    indexes: [{ name: 'datasets_by_org', on: '(org_id, id)' }],
  },
  {
    // A snapshot's members, numbered 1..episode_count in index order: the manifest pages by
    // position, so pages never overlap and later episodes never join.
    name: 'dataset_members',
    since: 4,
    columns: [c('dataset_id', 'text', 'NOT NULL'), c('position', 'big', 'NOT NULL'), c('episode_seq', 'big', 'NOT NULL')],
    primaryKey: ['dataset_id', 'position'],
    withoutRowid: true,
  },
  {
    name: 'webhook_subscriptions',
    since: 5,
    columns: [
      c('id', 'text', 'PRIMARY KEY'),
      c('org_id', 'text', 'NOT NULL REFERENCES orgs(id)'),
      c('url', 'text', 'NOT NULL'),
      c('events', 'text', 'NOT NULL'),
      c('status', 'text', `NOT NULL ${oneOf('status', WEBHOOK_STATUSES)}`),
      c('disabled_reason', 'text'),
      c('secret_sealed', 'text', 'NOT NULL'),
      c('previous_secret_sealed', 'text'),
      c('previous_secret_until', 'big'),
      // The last event of the log already fanned out to this subscription.
      c('event_cursor', 'big', 'NOT NULL'),
      c('last_delivered_at', 'big'),
      c('last_delivery_error', 'text'),
      c('created_at', 'big', 'NOT NULL'),
      // The claim on the queue head: the token of the process attempting it and when that lease
      // runs out (NULL: nobody). Only the holder records, so each queue stays in order across
      // processes; a holder that dies is taken over once its lease has run out.
      c('claim_token', 'text', '', { since: 11 }),
      c('claimed_until', 'big', '', { since: 11 }),
    ],
    indexes: [{ name: 'webhook_subscriptions_by_org', on: '(org_id, created_at)' }],
  },
  {
    // One row per event and subscription; a subscription's queue is its pending rows in id order.
    name: 'webhook_deliveries',
    since: 5,
    columns: [
      c('id', 'serial'),
      c('subscription_id', 'text', 'NOT NULL'),
      c('event_id', 'text', 'NOT NULL'),
      c('event_type', 'text', 'NOT NULL'),
      c('payload', 'text', 'NOT NULL'),
      c('state', 'text', "NOT NULL CHECK (state IN ('pending', 'delivered', 'dead', 'redelivered'))"),
      c('attempts', 'int', 'NOT NULL DEFAULT 0'),
      c('next_attempt_at', 'big', 'NOT NULL'),
      c('last_status', 'int'),
      c('last_error', 'text'),
      c('dead_lettered_at', 'big'),
      c('created_at', 'big', 'NOT NULL'),
    ],
    indexes: [
      { name: 'webhook_deliveries_queue', on: '(subscription_id, state, id)' },
      // The queue's head and its pending count read only pending rows; the partial index holds
      // just those (PostgreSQL from its first migration, SQLite from its 18th).
      { name: 'webhook_deliveries_pending', on: '(subscription_id, id)', where: "state = 'pending'", since: 18, postgresSince: 1 },
    ],
  },
  {
    // Every attempt to deliver a webhook, kept for the newest attempts of each subscription.
    name: 'webhook_attempts',
    since: 8,
    columns: [
      c('id', 'serial'),
      c('subscription_id', 'text', 'NOT NULL'),
      c('delivery_id', 'big', 'NOT NULL'),
      c('event_id', 'text', 'NOT NULL'),
      c('event_type', 'text', 'NOT NULL'),
      c('attempt', 'int', 'NOT NULL'),
      c('status_code', 'int'),
      c('error', 'text'),
      c('latency_ms', 'int'),
      c('outcome', 'text', `NOT NULL ${oneOf('outcome', DELIVERY_ATTEMPT_OUTCOMES)}`),
      c('at', 'big', 'NOT NULL'),
    ],
    indexes: [{ name: 'webhook_attempts_by_subscription', on: '(subscription_id, id)' }],
  },
  {
    name: 'destinations',
    since: 6,
    columns: [
      c('id', 'text', 'PRIMARY KEY'),
      c('org_id', 'text', 'NOT NULL REFERENCES orgs(id)'),
      c('type', 'text', `NOT NULL ${oneOf('type', DESTINATION_TYPES)}`),
      c('url', 'text', 'NOT NULL'),
      c('secret_sealed', 'text', 'NOT NULL'),
      c('retention', 'text', `NOT NULL ${oneOf('retention', RETENTION_DIRECTIVES)}`),
      c('created_at', 'big', 'NOT NULL'),
      c('revoked_at', 'big'),
      // Kept here as well as in grant_forwards, which only holds the last day or so.
      c('last_forward_at', 'big'),
    ],
    indexes: [{ name: 'destinations_by_org', on: '(org_id, created_at, id)' }],
  },
  {
    // match: JSON object of field -> array of accepted strings. position: 1..n per organization.
    name: 'routing_rules',
    since: 6,
    columns: [
      c('id', 'text', 'PRIMARY KEY'),
      c('org_id', 'text', 'NOT NULL REFERENCES orgs(id)'),
      c('destination_id', 'text', 'NOT NULL REFERENCES destinations(id)'),
      c('match', 'text', 'NOT NULL'),
      c('position', 'int', 'NOT NULL'),
      c('created_at', 'big', 'NOT NULL'),
    ],
    indexes: [{ name: 'routing_rules_by_org', on: '(org_id, position)' }],
  },
  {
    // An episode's assignment to a destination: at most one per episode (routing picks the first
    // matching rule; replicas routing at once agree through the primary key); the robot syncs it
    // there until its replica is verified. PostgreSQL's foreign key to episodes came with its
    // migration 7, NOT VALID (postgres/migrations.ts).
    name: 'routes',
    since: 6,
    columns: [
      c('episode_seq', 'big', 'PRIMARY KEY REFERENCES episodes(seq)', { postgres: 'BIGINT PRIMARY KEY' }),
      c('destination_id', 'text', 'NOT NULL'),
      c('org_id', 'text', 'NOT NULL'),
      c('robot_id', 'text', 'NOT NULL'),
      c('decided_at', 'big', 'NOT NULL'),
    ],
    indexes: [
      { name: 'routes_by_robot', on: '(robot_id, episode_seq)' },
      { name: 'routes_by_destination', on: '(destination_id, episode_seq)' },
    ],
  },
  {
    // One row per grant request forwarded to a provider (not the check endpoint's), for the
    // destinations' 24 h health counts; older rows are pruned as new ones come in.
    name: 'grant_forwards',
    since: 6,
    columns: [
      c('id', 'serial'),
      c('org_id', 'text', 'NOT NULL'),
      c('destination_id', 'text', 'NOT NULL'),
      c('at', 'big', 'NOT NULL'),
      c('outcome', 'text', `NOT NULL ${oneOf('outcome', GRANT_OUTCOMES)}`),
      c('grant_id', 'text'),
      c('reason', 'text'),
    ],
    indexes: [{ name: 'grant_forwards_by_destination', on: '(destination_id, at)' }],
  },
  {
    // Every grant id a provider ever answered, per destination: a reused one is refused.
    name: 'grant_ids',
    since: 6,
    columns: [c('destination_id', 'text', 'NOT NULL'), c('grant_id', 'text', 'NOT NULL'), c('claimed_at', 'big', 'NOT NULL')],
    primaryKey: ['destination_id', 'grant_id'],
    withoutRowid: true,
  },
  {
    name: 'robot_pressure',
    since: 6,
    columns: [
      c('robot_id', 'text', 'PRIMARY KEY'),
      c('free_bytes', 'big', 'NOT NULL'),
      c('backlog_bytes', 'big', 'NOT NULL'),
      c('hours_to_full', 'real'),
      c('reported_at', 'big', 'NOT NULL'),
    ],
  },
  {
    // Who is asking a grant provider for (episode, destination) right now: the claim token of
    // the relay forwarding and when its lease runs out. A robot that asks again while the first
    // forward is under way (on this replica or another) is deferred instead of asking the
    // provider a second time. The row is deleted when the forward ends; the row of a process
    // that died is taken over once its lease has run out.
    name: 'grant_forward_claims',
    since: 13,
    columns: [
      c('episode_seq', 'big', 'NOT NULL'),
      c('destination_id', 'text', 'NOT NULL'),
      c('org_id', 'text', 'NOT NULL'),
      c('claim_token', 'text', 'NOT NULL'),
      c('claimed_until', 'big', 'NOT NULL'),
    ],
    primaryKey: ['episode_seq', 'destination_id'],
  },
  {
    // Every grant the relay handed over, for the episode (and so the robot) and destination it
    // was issued for: a replica report naming any other grant is refused.
    name: 'issued_grants',
    since: 16,
    columns: [c('episode_seq', 'big', 'NOT NULL'), c('destination_id', 'text', 'NOT NULL'), c('grant_id', 'text', 'NOT NULL'), c('issued_at', 'big', 'NOT NULL')],
    primaryKey: ['episode_seq', 'destination_id', 'grant_id'],
    withoutRowid: true,
  },
  {
    // The enrolled (not de-enrolled) robots of each organization, kept by triggers on robots
    // (each engine's migration 19 / 8): enrollment checks the robot limit against it instead of
    // counting the organization's robots, which grew with the fleet (15 ms at 50,000 on SQLite,
    // under the write lock, for every enrollment).
    name: 'robot_counts',
    since: 19,
    columns: [c('org_id', 'text', 'PRIMARY KEY REFERENCES orgs(id)'), c('enrolled', 'big', 'NOT NULL DEFAULT 0')],
  },
];

/** The last SQLite migration PostgreSQL's first one covers. */
const POSTGRES_FIRST_COVERS = 12;

/** The PostgreSQL migration that carries what SQLite's migration `since` brought. */
export function postgresVersion(since: number): number {
  return since <= POSTGRES_FIRST_COVERS ? 1 : since - POSTGRES_FIRST_COVERS + 1;
}

function versionOn(engine: Engine, since: number, postgresSince?: number): number {
  if (engine === 'sqlite') return since;
  return postgresSince ?? postgresVersion(since);
}

const TYPES: Record<Family, Record<Engine, string>> = {
  text: { sqlite: 'TEXT', postgres: 'TEXT' },
  int: { sqlite: 'INTEGER', postgres: 'INTEGER' },
  big: { sqlite: 'INTEGER', postgres: 'BIGINT' },
  real: { sqlite: 'REAL', postgres: 'DOUBLE PRECISION' },
  bool: { sqlite: 'INTEGER', postgres: 'BOOLEAN' },
  serial: { sqlite: 'INTEGER PRIMARY KEY AUTOINCREMENT', postgres: 'BIGSERIAL PRIMARY KEY' },
  identity: { sqlite: 'INTEGER PRIMARY KEY AUTOINCREMENT', postgres: 'BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY' },
};

function columnSql(engine: Engine, col: Column): string {
  const whole = col[engine];
  if (whole !== undefined) return `${col.name} ${whole}`;
  // SQLite keeps a boolean as 0/1.
  const rest = engine === 'sqlite' && col.type === 'bool' ? col.rest.replace(/DEFAULT false\b/, 'DEFAULT 0').replace(/DEFAULT true\b/, 'DEFAULT 1') : col.rest;
  return [col.name, TYPES[col.type][engine], rest].filter((s) => s !== '').join(' ');
}

function indexSql(engine: Engine, table: string, ix: Index): string {
  const on = typeof ix.on === 'string' ? ix.on : ix.on[engine];
  return `CREATE INDEX ${ix.name} ON ${table} ${on}${ix.where ? ` WHERE ${ix.where}` : ''};`;
}

const on = (engine: Engine) => (x: { only?: Engine }) => x.only === undefined || x.only === engine;

/**
 * The DDL of one engine's migration `version`: the tables it creates (with every column the
 * engine had by then), then the columns and indexes it adds to older tables. Empty when the
 * migration only carries data or engine-specific statements.
 */
export function schemaSql(engine: Engine, version: number): string {
  const out: string[] = [];
  const at = (since: number, postgresSince?: number) => versionOn(engine, since, postgresSince);
  for (const table of TABLES.filter(on(engine))) {
    const created = at(table.since);
    if (created > version) continue;
    const columns = table.columns.filter(on(engine));
    if (created === version) {
      const defs = columns.filter((col) => at(col.since ?? table.since) <= version).map((col) => columnSql(engine, col));
      if (table.primaryKey) defs.push(`PRIMARY KEY (${table.primaryKey.join(', ')})`);
      const options = engine === 'sqlite' ? (table.withoutRowid ? ' STRICT, WITHOUT ROWID' : ' STRICT') : '';
      out.push(`CREATE TABLE ${table.name} (\n  ${defs.join(',\n  ')}\n)${options};`);
    } else {
      for (const col of columns) if (at(col.since ?? table.since) === version) out.push(`ALTER TABLE ${table.name} ADD COLUMN ${columnSql(engine, col)};`);
    }
    for (const ix of table.indexes ?? []) if (at(ix.since ?? table.since, ix.postgresSince) === version) out.push(indexSql(engine, table.name, ix));
  }
  return out.join('\n');
}
