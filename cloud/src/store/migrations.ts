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
];
