/**
 * Numbered schema migrations, applied in order at start inside one transaction each. Never edit
 * a migration that has shipped: add the next number.
 */
export const MIGRATIONS: readonly { version: number; name: string; sql: string }[] = [
  {
    version: 1,
    name: 'organizations, api keys, idempotency, meters',
    sql: `
      CREATE TABLE orgs (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        tier TEXT NOT NULL,
        created_at INTEGER NOT NULL
      ) STRICT;
      CREATE TABLE org_features (
        org_id TEXT NOT NULL REFERENCES orgs(id),
        feature TEXT NOT NULL,
        enabled INTEGER NOT NULL,
        PRIMARY KEY (org_id, feature)
      ) STRICT, WITHOUT ROWID;
      CREATE TABLE org_limits (
        org_id TEXT NOT NULL REFERENCES orgs(id),
        name TEXT NOT NULL,
        value REAL NOT NULL,
        PRIMARY KEY (org_id, name)
      ) STRICT, WITHOUT ROWID;
      CREATE TABLE api_keys (
        id TEXT PRIMARY KEY,
        org_id TEXT NOT NULL REFERENCES orgs(id),
        name TEXT NOT NULL,
        scopes TEXT NOT NULL,
        key_hash TEXT NOT NULL UNIQUE,
        created_by TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        expires_at INTEGER,
        revoked_at INTEGER,
        last_used_at INTEGER
      ) STRICT;
      CREATE INDEX api_keys_by_org ON api_keys (org_id, created_at, id);
      CREATE TABLE idempotency_keys (
        org_id TEXT NOT NULL,
        key TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('in_flight', 'completed')),
        status INTEGER,
        content_type TEXT,
        body TEXT,
        lease_until INTEGER,
        expires_at INTEGER,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (org_id, key)
      ) STRICT, WITHOUT ROWID;
      CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at);
      CREATE TABLE meters (
        org_id TEXT NOT NULL,
        meter TEXT NOT NULL,
        day TEXT NOT NULL,
        count INTEGER NOT NULL,
        PRIMARY KEY (org_id, day, meter)
      ) STRICT, WITHOUT ROWID;
    `,
  },
  {
    version: 2,
    name: 'robots and enrollment tokens',
    sql: `
      CREATE TABLE enrollment_tokens (
        id TEXT PRIMARY KEY,
        org_id TEXT NOT NULL REFERENCES orgs(id),
        token_hash TEXT NOT NULL UNIQUE,
        name_prefix TEXT,
        max_uses INTEGER NOT NULL,
        uses INTEGER NOT NULL DEFAULT 0,
        expires_at INTEGER NOT NULL,
        created_by TEXT NOT NULL,
        created_at INTEGER NOT NULL
      ) STRICT;
      CREATE TABLE robots (
        id TEXT PRIMARY KEY,
        org_id TEXT NOT NULL REFERENCES orgs(id),
        name TEXT NOT NULL,
        platform TEXT,
        runtime_version TEXT,
        capabilities TEXT NOT NULL DEFAULT '[]',
        mqtt_password_hash TEXT NOT NULL,
        enrollment_token_id TEXT NOT NULL,
        connected INTEGER NOT NULL DEFAULT 0,
        recording_state TEXT,
        last_seen_at INTEGER,
        created_at INTEGER NOT NULL
      ) STRICT;
      CREATE INDEX robots_by_org ON robots (org_id, id);
    `,
  },
  {
    version: 3,
    name: 'episodes, attributes, outcome changes, replicas, events',
    sql: `
      CREATE TABLE episodes (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        org_id TEXT NOT NULL,
        robot_id TEXT NOT NULL,
        recording_session_id TEXT NOT NULL,
        episode_seq INTEGER NOT NULL,
        session_name TEXT,
        task_id TEXT,
        task_name TEXT,
        subtask_id TEXT,
        operator_id TEXT,
        operator_name TEXT,
        control_mode TEXT,
        policy_version_id TEXT,
        eval_id TEXT,
        outcome TEXT NOT NULL,
        recorded_outcome TEXT,
        started_at INTEGER NOT NULL,
        ended_at INTEGER,
        duration_s REAL,
        message_count INTEGER,
        bag_size_bytes INTEGER,
        bag_uri TEXT,
        metadata TEXT NOT NULL,
        annotations TEXT NOT NULL DEFAULT '{}',
        segments TEXT NOT NULL,
        manifest TEXT NOT NULL,
        interrupted INTEGER NOT NULL DEFAULT 0,
        reported_at INTEGER NOT NULL
      ) STRICT;
      CREATE INDEX episodes_org ON episodes (org_id, seq);
      CREATE INDEX episodes_robot ON episodes (org_id, robot_id, seq);
      CREATE INDEX episodes_task ON episodes (org_id, task_id, seq);
      CREATE INDEX episodes_subtask ON episodes (org_id, subtask_id, seq);
      CREATE INDEX episodes_operator ON episodes (org_id, operator_id, seq);
      CREATE INDEX episodes_control_mode ON episodes (org_id, control_mode, seq);
      CREATE INDEX episodes_policy ON episodes (org_id, policy_version_id, seq);
      CREATE INDEX episodes_eval ON episodes (org_id, eval_id, seq);
      CREATE INDEX episodes_outcome ON episodes (org_id, outcome, seq);
      CREATE INDEX episodes_started ON episodes (org_id, started_at);
      -- One row per top-level key of the metadata (layer 'm') and annotations (layer 'a') of an
      -- episode, with the value's string form: the index behind metadata.<key> and annotation.<key>.
      CREATE TABLE episode_attrs (
        org_id TEXT NOT NULL,
        layer TEXT NOT NULL CHECK (layer IN ('m', 'a')),
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        seq INTEGER NOT NULL,
        PRIMARY KEY (org_id, layer, key, value, seq)
      ) STRICT, WITHOUT ROWID;
      CREATE TABLE outcome_changes (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        episode_seq INTEGER NOT NULL REFERENCES episodes(seq),
        at INTEGER NOT NULL,
        actor TEXT NOT NULL,
        from_outcome TEXT NOT NULL,
        to_outcome TEXT NOT NULL,
        reason TEXT NOT NULL
      ) STRICT;
      CREATE INDEX outcome_changes_by_episode ON outcome_changes (episode_seq, id);
      CREATE TABLE replicas (
        episode_seq INTEGER NOT NULL REFERENCES episodes(seq),
        destination_id TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('granted', 'syncing', 'synced', 'verified')),
        grant_id TEXT NOT NULL,
        error TEXT,
        object_key TEXT,
        updated_at INTEGER NOT NULL,
        PRIMARY KEY (episode_seq, destination_id)
      ) STRICT, WITHOUT ROWID;
      CREATE INDEX replicas_by_destination ON replicas (destination_id, state, episode_seq);
      -- The event log: written in the same transaction as the change it records; the webhook
      -- engine delivers from it.
      CREATE TABLE events (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        org_id TEXT NOT NULL,
        type TEXT NOT NULL,
        episode_id TEXT,
        payload TEXT NOT NULL,
        created_at INTEGER NOT NULL
      ) STRICT;
      CREATE INDEX events_by_org ON events (org_id, id);
    `,
  },
  {
    version: 4,
    name: 'datasets and pinned snapshot members',
    sql: `
      CREATE TABLE datasets (
        id TEXT PRIMARY KEY,
        org_id TEXT NOT NULL REFERENCES orgs(id),
        name TEXT NOT NULL,
        description TEXT,
        filter TEXT NOT NULL,
        snapshot_at INTEGER,
        episode_count INTEGER,
        created_by TEXT NOT NULL,
        created_at INTEGER NOT NULL
      ) STRICT;
      CREATE INDEX datasets_by_org ON datasets (org_id, id);
      -- A snapshot's members, numbered 1..episode_count in index order: the manifest pages by
      -- position, so pages never overlap and later episodes never join.
      CREATE TABLE dataset_members (
        dataset_id TEXT NOT NULL,
        position INTEGER NOT NULL,
        episode_seq INTEGER NOT NULL,
        PRIMARY KEY (dataset_id, position)
      ) STRICT, WITHOUT ROWID;
    `,
  },
  {
    version: 5,
    name: 'webhook subscriptions and deliveries',
    sql: `
      CREATE TABLE webhook_subscriptions (
        id TEXT PRIMARY KEY,
        org_id TEXT NOT NULL REFERENCES orgs(id),
        url TEXT NOT NULL,
        events TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('active', 'disabled')),
        disabled_reason TEXT,
        secret_sealed TEXT NOT NULL,
        previous_secret_sealed TEXT,
        previous_secret_until INTEGER,
        -- The last event of the log already fanned out to this subscription.
        event_cursor INTEGER NOT NULL,
        last_delivered_at INTEGER,
        last_delivery_error TEXT,
        created_at INTEGER NOT NULL
      ) STRICT;
      CREATE INDEX webhook_subscriptions_by_org ON webhook_subscriptions (org_id, created_at);
      -- One row per event and subscription; a subscription's queue is its pending rows in id order.
      CREATE TABLE webhook_deliveries (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        subscription_id TEXT NOT NULL,
        event_id TEXT NOT NULL,
        event_type TEXT NOT NULL,
        payload TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'dead', 'redelivered')),
        attempts INTEGER NOT NULL DEFAULT 0,
        next_attempt_at INTEGER NOT NULL,
        last_status INTEGER,
        last_error TEXT,
        dead_lettered_at INTEGER,
        created_at INTEGER NOT NULL
      ) STRICT;
      CREATE INDEX webhook_deliveries_queue ON webhook_deliveries (subscription_id, state, id);
    `,
  },
  {
    version: 6,
    name: 'cloud sync: destinations, routing rules, routes, grant forwards, pressure',
    sql: `
      CREATE TABLE destinations (
        id TEXT PRIMARY KEY,
        org_id TEXT NOT NULL REFERENCES orgs(id),
        type TEXT NOT NULL CHECK (type IN ('external')),
        url TEXT NOT NULL,
        secret_sealed TEXT NOT NULL,
        retention TEXT NOT NULL CHECK (retention IN ('keep', 'until_all_verified_plus_72h')),
        created_at INTEGER NOT NULL,
        revoked_at INTEGER,
        -- Kept here as well as in grant_forwards, which only holds the last day or so.
        last_forward_at INTEGER
      ) STRICT;
      CREATE INDEX destinations_by_org ON destinations (org_id, created_at, id);
      -- match: JSON object of field -> array of accepted strings. position: 1..n per org.
      CREATE TABLE routing_rules (
        id TEXT PRIMARY KEY,
        org_id TEXT NOT NULL REFERENCES orgs(id),
        destination_id TEXT NOT NULL REFERENCES destinations(id),
        match TEXT NOT NULL,
        position INTEGER NOT NULL,
        created_at INTEGER NOT NULL
      ) STRICT;
      CREATE INDEX routing_rules_by_org ON routing_rules (org_id, position);
      -- An episode's assignment to a destination: at most one per episode (routing picks the
      -- first matching rule); the robot syncs it there until its replica is verified.
      CREATE TABLE routes (
        episode_seq INTEGER PRIMARY KEY REFERENCES episodes(seq),
        destination_id TEXT NOT NULL,
        org_id TEXT NOT NULL,
        robot_id TEXT NOT NULL,
        decided_at INTEGER NOT NULL
      ) STRICT;
      CREATE INDEX routes_by_robot ON routes (robot_id, episode_seq);
      CREATE INDEX routes_by_destination ON routes (destination_id, episode_seq);
      -- One row per grant request forwarded to a provider (not the check endpoint's), for the
      -- destinations' 24 h health counts; older rows are pruned as new ones come in.
      CREATE TABLE grant_forwards (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        org_id TEXT NOT NULL,
        destination_id TEXT NOT NULL,
        at INTEGER NOT NULL,
        outcome TEXT NOT NULL CHECK (outcome IN ('granted', 'deferred')),
        grant_id TEXT,
        reason TEXT
      ) STRICT;
      CREATE INDEX grant_forwards_by_destination ON grant_forwards (destination_id, at);
      -- Every grant id a provider ever answered, per destination: a reused one is refused.
      CREATE TABLE grant_ids (
        destination_id TEXT NOT NULL,
        grant_id TEXT NOT NULL,
        claimed_at INTEGER NOT NULL,
        PRIMARY KEY (destination_id, grant_id)
      ) STRICT, WITHOUT ROWID;
      CREATE TABLE robot_pressure (
        robot_id TEXT PRIMARY KEY,
        free_bytes INTEGER NOT NULL,
        backlog_bytes INTEGER NOT NULL,
        hours_to_full REAL,
        reported_at INTEGER NOT NULL
      ) STRICT;
      -- The robot clock (ms) of the last report applied to a replica: orders reports of one
      -- state that arrive out of order. NULL when the cloud wrote the row (a grant handed over).
      ALTER TABLE replicas ADD COLUMN reported_at INTEGER;
      -- Set when the robot reports that an episode's local files disappeared before a verified sync.
      ALTER TABLE episodes ADD COLUMN local_missing INTEGER NOT NULL DEFAULT 0;
    `,
  },
  {
    version: 7,
    name: 'retention: when the robot pruned an episode\'s local copy',
    sql: `
      -- Robot clock (ms) of the robot's episode.pruned report; set once, with the episode.pruned event.
      ALTER TABLE episodes ADD COLUMN pruned_at INTEGER;
    `,
  },
  {
    version: 8,
    name: 'fleet administration: revoked enrollment tokens, de-enrolled robots, credential rotation, webhook attempt log',
    sql: `
      ALTER TABLE enrollment_tokens ADD COLUMN revoked_at INTEGER;
      -- The first characters of the token (ret_ and 8 more), to tell tokens apart in a list; NULL for older tokens.
      ALTER TABLE enrollment_tokens ADD COLUMN token_prefix TEXT;
      CREATE INDEX enrollment_tokens_by_org ON enrollment_tokens (org_id, id);
      ALTER TABLE robots ADD COLUMN deenrolled_at INTEGER;
      -- A rotation asked for and not yet acknowledged by the robot; the old password works meanwhile.
      ALTER TABLE robots ADD COLUMN rotation_requested_at INTEGER;
      -- The secret of a running rotation, sealed (it is sent again until the robot acknowledges
      -- it, so a robot never holds a secret the cloud forgot) and hashed (what the broker checks).
      ALTER TABLE robots ADD COLUMN pending_password_hash TEXT;
      ALTER TABLE robots ADD COLUMN pending_secret_sealed TEXT;
      ALTER TABLE robots ADD COLUMN rotated_at INTEGER;
      -- Every attempt to deliver a webhook, kept for the newest attempts of each subscription.
      CREATE TABLE webhook_attempts (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        subscription_id TEXT NOT NULL,
        delivery_id INTEGER NOT NULL,
        event_id TEXT NOT NULL,
        event_type TEXT NOT NULL,
        attempt INTEGER NOT NULL,
        status_code INTEGER,
        error TEXT,
        latency_ms INTEGER,
        outcome TEXT NOT NULL CHECK (outcome IN ('delivered', 'retry', 'dead')),
        at INTEGER NOT NULL
      ) STRICT;
      CREATE INDEX webhook_attempts_by_subscription ON webhook_attempts (subscription_id, id);
    `,
  },
  {
    version: 9,
    name: 'reads at scale: a claim for snapshots written in chunks',
    sql: `
      -- A snapshot in progress: its members are written in bounded chunks (each its own short
      -- transaction) while snapshot_at stays NULL, so nobody reads them as a dataset's members
      -- until the last transaction pins it. The claim keeps a second snapshot of the same
      -- dataset out; a claim whose lease ran out (its process died) is taken over, after the
      -- half-written members are removed.
      ALTER TABLE datasets ADD COLUMN snapshot_claim TEXT;
      ALTER TABLE datasets ADD COLUMN snapshot_lease_until INTEGER;
    `,
  },
  {
    version: 10,
    name: 'auth revision: a counter every change to keys and organizations bumps',
    sql: `
      -- The API authenticator caches keys with their organizations in memory and reads this
      -- one row per request: any writer (this process, the admin CLI, another replica) that
      -- changes what a principal is made of bumps it in the same transaction, and a changed
      -- revision drops the cache, so a revocation or an entitlement change holds from the very
      -- next request. api_keys.last_used_at (batched last-use writes) is left out on purpose: it
      -- decides nothing, and bumping on it would empty every replica's cache at each flush. A
      -- migration that adds a column to api_keys must add it to that trigger's column list.
      CREATE TABLE auth_revision (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        revision INTEGER NOT NULL
      ) STRICT;
      INSERT INTO auth_revision (id, revision) VALUES (1, 0);
      CREATE TRIGGER api_keys_insert_auth_revision AFTER INSERT ON api_keys BEGIN UPDATE auth_revision SET revision = revision + 1 WHERE id = 1; END;
      CREATE TRIGGER api_keys_update_auth_revision AFTER UPDATE OF id, org_id, name, scopes, key_hash, created_by, created_at, expires_at, revoked_at ON api_keys BEGIN UPDATE auth_revision SET revision = revision + 1 WHERE id = 1; END;
      CREATE TRIGGER api_keys_delete_auth_revision AFTER DELETE ON api_keys BEGIN UPDATE auth_revision SET revision = revision + 1 WHERE id = 1; END;
      CREATE TRIGGER orgs_insert_auth_revision AFTER INSERT ON orgs BEGIN UPDATE auth_revision SET revision = revision + 1 WHERE id = 1; END;
      CREATE TRIGGER orgs_update_auth_revision AFTER UPDATE ON orgs BEGIN UPDATE auth_revision SET revision = revision + 1 WHERE id = 1; END;
      CREATE TRIGGER orgs_delete_auth_revision AFTER DELETE ON orgs BEGIN UPDATE auth_revision SET revision = revision + 1 WHERE id = 1; END;
      CREATE TRIGGER org_features_insert_auth_revision AFTER INSERT ON org_features BEGIN UPDATE auth_revision SET revision = revision + 1 WHERE id = 1; END;
      CREATE TRIGGER org_features_update_auth_revision AFTER UPDATE ON org_features BEGIN UPDATE auth_revision SET revision = revision + 1 WHERE id = 1; END;
      CREATE TRIGGER org_features_delete_auth_revision AFTER DELETE ON org_features BEGIN UPDATE auth_revision SET revision = revision + 1 WHERE id = 1; END;
      CREATE TRIGGER org_limits_insert_auth_revision AFTER INSERT ON org_limits BEGIN UPDATE auth_revision SET revision = revision + 1 WHERE id = 1; END;
      CREATE TRIGGER org_limits_update_auth_revision AFTER UPDATE ON org_limits BEGIN UPDATE auth_revision SET revision = revision + 1 WHERE id = 1; END;
      CREATE TRIGGER org_limits_delete_auth_revision AFTER DELETE ON org_limits BEGIN UPDATE auth_revision SET revision = revision + 1 WHERE id = 1; END;
    `,
  },
  {
    version: 11,
    name: 'webhook claims with a lease',
    sql: `
      -- The claim on a subscription's queue head: the token of the process attempting it and
      -- when that lease runs out (NULL: nobody). Only the holder records, so each queue stays in
      -- order across processes; a holder that dies is taken over once its lease has run out.
      ALTER TABLE webhook_subscriptions ADD COLUMN claim_token TEXT;
      ALTER TABLE webhook_subscriptions ADD COLUMN claimed_until INTEGER;
    `,
  },
  {
    version: 12,
    name: 'cloud settings: the fingerprint of the key that seals stored secrets',
    sql: `
      -- One row per setting of the installation. 'secret_key_fingerprint' (an HMAC of a fixed
      -- label under the sealing key, never the key) lets a process started with another key
      -- refuse to serve instead of failing to open every sealed secret.
      CREATE TABLE cloud_settings (
        name TEXT PRIMARY KEY,
        value TEXT NOT NULL
      ) STRICT;
    `,
  },
  {
    version: 13,
    name: 'grant forward claims with a lease',
    sql: `
      -- Who is asking a grant provider for (episode, destination) right now: the claim token of
      -- the relay forwarding and when its lease runs out. A robot that asks again while the
      -- first forward is under way (on this replica or another) is deferred instead of asking
      -- the provider a second time. The row is deleted when the forward ends; the row of a
      -- process that died is taken over once its lease has run out.
      CREATE TABLE grant_forward_claims (
        episode_seq INTEGER NOT NULL,
        destination_id TEXT NOT NULL,
        org_id TEXT NOT NULL,
        claim_token TEXT NOT NULL,
        claimed_until INTEGER NOT NULL,
        PRIMARY KEY (episode_seq, destination_id)
      ) STRICT;
    `,
  },
  {
    version: 14,
    name: 'idempotency claim tokens',
    sql: `
      -- Who holds an in-flight Idempotency-Key: the token of the request that began it. Only
      -- that request completes, releases or renews the claim, so a request whose process came
      -- back after its lease ran out (and a retry took the key over) changes nothing.
      ALTER TABLE idempotency_keys ADD COLUMN claim_token TEXT;
    `,
  },
  {
    version: 15,
    name: 'robot list orders: by name and by last seen',
    sql: `
      -- GET /v1/robots sorted by name or by last_seen_at reads a page off an index, so a large
      -- fleet is paged without sorting every robot of the organization per request.
      CREATE INDEX robots_by_name ON robots (org_id, name, id);
      CREATE INDEX robots_by_last_seen ON robots (org_id, COALESCE(last_seen_at, 0), id);
    `,
  },
  {
    version: 16,
    name: 'issued grants: the grants the relay handed to a robot, per episode and destination',
    sql: `
      -- Every grant the relay handed over, for the episode (and so the robot) and destination it
      -- was issued for: a replica report naming any other grant is refused. Seeded with the
      -- grant each replica already names, so uploads under way across the upgrade still report.
      CREATE TABLE issued_grants (
        episode_seq INTEGER NOT NULL,
        destination_id TEXT NOT NULL,
        grant_id TEXT NOT NULL,
        issued_at INTEGER NOT NULL,
        PRIMARY KEY (episode_seq, destination_id, grant_id)
      ) STRICT, WITHOUT ROWID;
      INSERT OR IGNORE INTO issued_grants (episode_seq, destination_id, grant_id, issued_at)
        SELECT episode_seq, destination_id, grant_id, updated_at FROM replicas;
    `,
  },
  {
    version: 17,
    name: 'robot status order: the robot clock of the last status written',
    sql: `
      -- Every replica writes every robot status; one that is behind writes statuses the robot has
      -- since replaced. The robot's clock of the last status written orders them (NULL: none yet).
      ALTER TABLE robots ADD COLUMN status_at INTEGER;
    `,
  },
  {
    version: 18,
    name: 'schema parity with PostgreSQL (found by the schema drift test): the pending deliveries of a subscription (PostgreSQL migration 7)',
    sql: `
      -- The delivery queue's head and its pending count read only pending rows; the partial index
      -- holds just those (PostgreSQL has had it from its first migration).
      CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (subscription_id, id) WHERE state = 'pending';
    `,
  },
];
