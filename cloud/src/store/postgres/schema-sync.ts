/**
 * Cloud sync: destinations, routing rules, routes (one per episode), replicas, grant forwards,
 * grant ids and robot pressure, with the SQLite columns (migrations 3 and 6). Created after the
 * episodes schema: replicas reference episodes(seq).
 */
export const SYNC_SCHEMA = `
  CREATE TABLE replicas (
    episode_seq BIGINT NOT NULL REFERENCES episodes(seq),
    destination_id TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('granted', 'syncing', 'synced', 'verified')),
    grant_id TEXT NOT NULL,
    error TEXT,
    object_key TEXT,
    updated_at BIGINT NOT NULL,
    -- Robot clock (ms) of the last report applied; NULL when the cloud wrote the row.
    reported_at BIGINT,
    PRIMARY KEY (episode_seq, destination_id)
  );
  CREATE INDEX replicas_by_destination ON replicas (destination_id, state, episode_seq);
  CREATE TABLE destinations (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL REFERENCES orgs(id),
    type TEXT NOT NULL CHECK (type IN ('external')),
    url TEXT NOT NULL,
    secret_sealed TEXT NOT NULL,
    retention TEXT NOT NULL CHECK (retention IN ('keep', 'until_all_verified_plus_72h')),
    created_at BIGINT NOT NULL,
    revoked_at BIGINT,
    last_forward_at BIGINT
  );
  CREATE INDEX destinations_by_org ON destinations (org_id, created_at, id);
  CREATE TABLE routing_rules (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL REFERENCES orgs(id),
    destination_id TEXT NOT NULL REFERENCES destinations(id),
    match TEXT NOT NULL,
    position INTEGER NOT NULL,
    created_at BIGINT NOT NULL
  );
  CREATE INDEX routing_rules_by_org ON routing_rules (org_id, position);
  -- At most one route per episode: replicas routing at once agree through the primary key.
  CREATE TABLE routes (
    episode_seq BIGINT PRIMARY KEY,
    destination_id TEXT NOT NULL,
    org_id TEXT NOT NULL,
    robot_id TEXT NOT NULL,
    decided_at BIGINT NOT NULL
  );
  CREATE INDEX routes_by_robot ON routes (robot_id, episode_seq);
  CREATE INDEX routes_by_destination ON routes (destination_id, episode_seq);
  CREATE TABLE grant_forwards (
    id BIGSERIAL PRIMARY KEY,
    org_id TEXT NOT NULL,
    destination_id TEXT NOT NULL,
    at BIGINT NOT NULL,
    outcome TEXT NOT NULL CHECK (outcome IN ('granted', 'deferred')),
    grant_id TEXT,
    reason TEXT
  );
  CREATE INDEX grant_forwards_by_destination ON grant_forwards (destination_id, at);
  CREATE TABLE grant_ids (
    destination_id TEXT NOT NULL,
    grant_id TEXT NOT NULL,
    claimed_at BIGINT NOT NULL,
    PRIMARY KEY (destination_id, grant_id)
  );
  CREATE TABLE robot_pressure (
    robot_id TEXT PRIMARY KEY,
    free_bytes BIGINT NOT NULL,
    backlog_bytes BIGINT NOT NULL,
    hours_to_full DOUBLE PRECISION,
    reported_at BIGINT NOT NULL
  );
`;

/**
 * PostgreSQL migration 2 (SQLite 13): the claim on forwarding a grant request for (episode,
 * destination), held by one relay at a time for a lease; deleted when the forward ends.
 */
export const GRANT_FORWARD_CLAIMS_SCHEMA = `
  CREATE TABLE grant_forward_claims (
    episode_seq BIGINT NOT NULL,
    destination_id TEXT NOT NULL,
    org_id TEXT NOT NULL,
    claim_token TEXT NOT NULL,
    claimed_until BIGINT NOT NULL,
    PRIMARY KEY (episode_seq, destination_id)
  );
`;
