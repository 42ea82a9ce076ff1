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
];
