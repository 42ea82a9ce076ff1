/**
 * Organizations, api keys, idempotency, meters, robots and enrollment tokens, and the event log
 * every domain appends to. Times are BIGINT milliseconds since the epoch; JSON kept as the TEXT
 * the API wrote (read back byte for byte).
 */
export const ACCOUNTS_SCHEMA = `
  -- Installation settings, e.g. the fingerprint of the key that seals stored secrets.
  CREATE TABLE cloud_settings (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
  );
  CREATE TABLE orgs (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    tier TEXT NOT NULL,
    created_at BIGINT NOT NULL
  );
  CREATE TABLE org_features (
    org_id TEXT NOT NULL REFERENCES orgs(id),
    feature TEXT NOT NULL,
    enabled BOOLEAN NOT NULL,
    PRIMARY KEY (org_id, feature)
  );
  CREATE TABLE org_limits (
    org_id TEXT NOT NULL REFERENCES orgs(id),
    name TEXT NOT NULL,
    value DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (org_id, name)
  );
  CREATE TABLE api_keys (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL REFERENCES orgs(id),
    name TEXT NOT NULL,
    scopes TEXT NOT NULL,
    key_hash TEXT NOT NULL UNIQUE,
    created_by TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT,
    revoked_at BIGINT,
    last_used_at BIGINT
  );
  CREATE INDEX api_keys_by_org ON api_keys (org_id, created_at, id);

  -- Bumped by triggers on every change to what authentication reads, so that each replica's
  -- cache of keys and organizations knows when it is stale (api_keys.last_used_at excluded).
  CREATE TABLE auth_revision (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    revision BIGINT NOT NULL
  );
  INSERT INTO auth_revision (id, revision) VALUES (1, 0);
  CREATE FUNCTION bump_auth_revision() RETURNS trigger LANGUAGE plpgsql AS $$
  BEGIN
    UPDATE auth_revision SET revision = revision + 1 WHERE id = 1;
    RETURN NULL;
  END $$;
  CREATE TRIGGER orgs_auth_revision AFTER INSERT OR UPDATE OR DELETE ON orgs FOR EACH STATEMENT EXECUTE FUNCTION bump_auth_revision();
  CREATE TRIGGER org_features_auth_revision AFTER INSERT OR UPDATE OR DELETE ON org_features FOR EACH STATEMENT EXECUTE FUNCTION bump_auth_revision();
  CREATE TRIGGER org_limits_auth_revision AFTER INSERT OR UPDATE OR DELETE ON org_limits FOR EACH STATEMENT EXECUTE FUNCTION bump_auth_revision();
  CREATE TRIGGER api_keys_auth_revision_write AFTER INSERT OR DELETE ON api_keys FOR EACH STATEMENT EXECUTE FUNCTION bump_auth_revision();
  CREATE TRIGGER api_keys_auth_revision_update AFTER UPDATE OF id, org_id, name, scopes, key_hash, created_by, created_at, expires_at, revoked_at ON api_keys FOR EACH STATEMENT EXECUTE FUNCTION bump_auth_revision();

  CREATE TABLE idempotency_keys (
    org_id TEXT NOT NULL,
    key TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('in_flight', 'completed')),
    status INTEGER,
    content_type TEXT,
    body TEXT,
    lease_until BIGINT,
    expires_at BIGINT,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (org_id, key)
  );
  CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at);
  -- Request-rate windows shared by the replicas (per key, organization, client address).
  CREATE TABLE rate_counters (
    key TEXT PRIMARY KEY,
    window_start BIGINT NOT NULL,
    count BIGINT NOT NULL
  );
  CREATE TABLE meters (
    org_id TEXT NOT NULL,
    meter TEXT NOT NULL,
    day TEXT NOT NULL,
    count BIGINT NOT NULL,
    PRIMARY KEY (org_id, day, meter)
  );

  CREATE TABLE enrollment_tokens (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL REFERENCES orgs(id),
    token_hash TEXT NOT NULL UNIQUE,
    name_prefix TEXT,
    max_uses INTEGER NOT NULL,
    uses INTEGER NOT NULL DEFAULT 0,
    expires_at BIGINT NOT NULL,
    created_by TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    revoked_at BIGINT,
    token_prefix TEXT
  );
  CREATE INDEX enrollment_tokens_by_org ON enrollment_tokens (org_id, id);
  CREATE TABLE robots (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL REFERENCES orgs(id),
    name TEXT NOT NULL,
    platform TEXT,
    runtime_version TEXT,
    capabilities TEXT NOT NULL DEFAULT '[]',
    mqtt_password_hash TEXT NOT NULL,
    enrollment_token_id TEXT NOT NULL,
    connected BOOLEAN NOT NULL DEFAULT false,
    recording_state TEXT,
    last_seen_at BIGINT,
    created_at BIGINT NOT NULL,
    deenrolled_at BIGINT,
    rotation_requested_at BIGINT,
    pending_password_hash TEXT,
    pending_secret_sealed TEXT,
    rotated_at BIGINT
  );
  CREATE INDEX robots_by_org ON robots (org_id, id);

  -- The event log (episode.finalized, replica and prune events), fanned out to webhook queues.
  -- Rows are inserted under the 'events' advisory lock held to commit, so ids commit in order.
  CREATE TABLE events (
    id BIGSERIAL PRIMARY KEY,
    org_id TEXT NOT NULL,
    type TEXT NOT NULL,
    episode_id TEXT,
    payload TEXT NOT NULL,
    created_at BIGINT NOT NULL
  );
  CREATE INDEX events_by_org ON events (org_id, id);
`;
