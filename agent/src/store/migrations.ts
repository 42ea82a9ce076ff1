/**
 * Numbered schema migrations of the agent's own SQLite file, applied in order at start, one
 * transaction each. Never edit a migration that has shipped: add the next number.
 */
export const MIGRATIONS: readonly { version: number; name: string; sql: string }[] = [
  {
    version: 1,
    name: 'recording, steps, episodes, command results, operator context, sessions',
    sql: `
      -- At most one recording at a time: the slot is always 1.
      CREATE TABLE recording (
        slot INTEGER PRIMARY KEY CHECK (slot = 1),
        state TEXT NOT NULL CHECK (state IN ('recording', 'finalizing')),
        episode_id TEXT NOT NULL UNIQUE,
        recording_session_id TEXT NOT NULL,
        session_name TEXT,
        episode_seq INTEGER NOT NULL,
        started_at INTEGER NOT NULL,
        alive_at INTEGER NOT NULL,
        ended_at INTEGER,
        outcome TEXT CHECK (outcome IN ('success', 'failure', 'discarded')),
        context TEXT NOT NULL,
        dir TEXT NOT NULL
      ) STRICT;
      CREATE TABLE recording_steps (
        episode_id TEXT NOT NULL,
        step_index INTEGER NOT NULL,
        at INTEGER NOT NULL,
        subtask_id TEXT,
        subtask_name TEXT,
        PRIMARY KEY (episode_id, step_index)
      ) STRICT, WITHOUT ROWID;
      CREATE TABLE episodes (
        id TEXT PRIMARY KEY,
        recording_session_id TEXT NOT NULL,
        episode_seq INTEGER NOT NULL,
        outcome TEXT NOT NULL CHECK (outcome IN ('success', 'failure', 'discarded')),
        facts TEXT NOT NULL,
        manifest TEXT NOT NULL,
        finalized_at INTEGER NOT NULL,
        interrupted INTEGER NOT NULL CHECK (interrupted IN (0, 1)),
        dir TEXT NOT NULL,
        UNIQUE (recording_session_id, episode_seq)
      ) STRICT;
      CREATE INDEX episodes_by_finalized ON episodes (finalized_at, id);
      CREATE TABLE command_results (
        cmd_id TEXT PRIMARY KEY,
        command TEXT NOT NULL,
        reply TEXT NOT NULL,
        received_at INTEGER NOT NULL
      ) STRICT;
      CREATE INDEX command_results_by_time ON command_results (received_at);
      -- An absent key is unset (null).
      CREATE TABLE operator_context (key TEXT PRIMARY KEY, value TEXT NOT NULL) STRICT, WITHOUT ROWID;
      CREATE TABLE recording_sessions (
        id TEXT PRIMARY KEY,
        name TEXT,
        next_seq INTEGER NOT NULL,
        created_at INTEGER NOT NULL
      ) STRICT;
      -- current_session_id: the session the next recording joins (absent: start a new one).
      CREATE TABLE agent_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) STRICT, WITHOUT ROWID;
    `,
  },
  {
    version: 2,
    name: 'durable outbox',
    sql: `
      -- Messages that must reach the cloud, kept until it acknowledges them at application level.
      -- seq is the creation order (AUTOINCREMENT: never reused, also after acked rows are pruned).
      CREATE TABLE outbox (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        msg_id TEXT NOT NULL UNIQUE,
        kind TEXT NOT NULL,
        body TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        last_sent_at INTEGER,
        state TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'acked', 'refused')),
        refusal_code TEXT,
        refusal_message TEXT,
        settled_at INTEGER
      ) STRICT;
      CREATE INDEX outbox_by_state ON outbox (state, seq);
      -- Episodes finalized before the outbox existed were never reported: report them now, in
      -- finalization order (the body is what toEpisodeReport() builds).
      INSERT INTO outbox (msg_id, kind, body, created_at)
        SELECT 'episode.report:' || id, 'episode.report',
               CASE WHEN interrupted = 1
                 THEN json_set(json_remove(facts, '$.robot_id'), '$.manifest', json(manifest), '$.interrupted', json('true'))
                 ELSE json_set(json_remove(facts, '$.robot_id'), '$.manifest', json(manifest))
               END,
               finalized_at
        FROM episodes ORDER BY finalized_at, rowid;
    `,
  },
  {
    version: 3,
    name: 'command intents: a command result row exists before the action runs',
    sql: `
      -- A non-episode action writes its row in state 'running' before it acts and replaces it
      -- with the reply ('answered') afterwards, so after a crash the agent knows it may have acted
      -- and never runs that cmd_id again. SQLite cannot relax NOT NULL in place: rebuild.
      CREATE TABLE command_results_v3 (
        cmd_id TEXT PRIMARY KEY,
        command TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('running', 'answered')),
        reply TEXT,
        received_at INTEGER NOT NULL,
        CHECK ((state = 'answered') = (reply IS NOT NULL))
      ) STRICT;
      INSERT INTO command_results_v3 (cmd_id, command, state, reply, received_at)
        SELECT cmd_id, command, 'answered', reply, received_at FROM command_results;
      DROP TABLE command_results;
      ALTER TABLE command_results_v3 RENAME TO command_results;
      CREATE INDEX command_results_by_time ON command_results (received_at);
    `,
  },
  {
    version: 4,
    name: 'cloud sync: replicas (assignments), per-file upload progress, multipart parts',
    sql: `
      -- One row per (episode, destination) the cloud assigned. state 'assigned' means no grant yet;
      -- the others are the replica states of the API. next_attempt_at NULL: nothing more to do
      -- (verified, synced with a note, or no files to send).
      CREATE TABLE replicas (
        episode_id TEXT NOT NULL,
        destination_id TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('assigned', 'granted', 'syncing', 'synced', 'verified')),
        grant_id TEXT,
        object_key TEXT,
        retention TEXT,
        attempts INTEGER NOT NULL DEFAULT 0,
        -- Failed transfer attempts since the last success: picks the step of the retry schedule.
        failures INTEGER NOT NULL DEFAULT 0,
        next_attempt_at INTEGER,
        last_error TEXT,
        note TEXT,
        -- Replica reports enqueued so far; numbers the next report's msg_id.
        reports INTEGER NOT NULL DEFAULT 0,
        assigned_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        PRIMARY KEY (episode_id, destination_id)
      ) STRICT;
      CREATE INDEX replicas_due ON replicas (next_attempt_at) WHERE next_attempt_at IS NOT NULL;
      -- Upload progress of one file of a replica, written as it happens: the multipart upload id
      -- as soon as a grant names it, and once the file is complete, what was sent and the store's
      -- receipt (JSON), so a restart neither re-sends finished work nor forgets a receipt.
      CREATE TABLE upload_files (
        episode_id TEXT NOT NULL,
        destination_id TEXT NOT NULL,
        path TEXT NOT NULL,
        upload_id TEXT,
        part_size INTEGER,
        complete INTEGER NOT NULL DEFAULT 0 CHECK (complete IN (0, 1)),
        bytes_sent INTEGER,
        sha256_sent TEXT,
        md5_sent TEXT,
        receipt TEXT,
        updated_at INTEGER NOT NULL,
        PRIMARY KEY (episode_id, destination_id, path),
        FOREIGN KEY (episode_id, destination_id) REFERENCES replicas (episode_id, destination_id) ON DELETE CASCADE
      ) STRICT;
      -- A multipart part the store accepted, with its ETag and the MD5 and SHA-256 of the bytes sent.
      CREATE TABLE upload_parts (
        episode_id TEXT NOT NULL,
        destination_id TEXT NOT NULL,
        path TEXT NOT NULL,
        upload_id TEXT NOT NULL,
        part_number INTEGER NOT NULL,
        size INTEGER NOT NULL,
        etag TEXT NOT NULL,
        md5 TEXT NOT NULL,
        sha256 TEXT NOT NULL,
        done_at INTEGER NOT NULL,
        PRIMARY KEY (episode_id, destination_id, path, part_number),
        FOREIGN KEY (episode_id, destination_id, path) REFERENCES upload_files (episode_id, destination_id, path) ON DELETE CASCADE
      ) STRICT;
    `,
  },
  {
    version: 5,
    name: 'retention: when each replica verified, the prune due time per episode, pruned and missing-files marks',
    sql: `
      -- Robot clock (ms) when the replica became verified; the last one of an episode starts its
      -- retention delay.
      ALTER TABLE replicas ADD COLUMN verified_at INTEGER;
      -- The stored pruning timer: set once every replica of the episode is verified and all their
      -- destinations say until_all_verified_plus_72h (the last verified_at + 72 h); NULL otherwise.
      -- Kept in the same transaction as the replica changes it depends on, so it survives restarts.
      ALTER TABLE episodes ADD COLUMN prune_due_at INTEGER;
      -- When retention deleted the episode's data files (the rows stay).
      ALTER TABLE episodes ADD COLUMN pruned_at INTEGER;
      -- When the agent first noticed files gone before a verified sync and reported it (once).
      ALTER TABLE episodes ADD COLUMN local_missing_at INTEGER;
      CREATE INDEX episodes_prune_due ON episodes (prune_due_at) WHERE prune_due_at IS NOT NULL AND pruned_at IS NULL;
    `,
  },
  {
    version: 6,
    name: "upload parts: the part's MD5 only when the store's ETag can be compared with it, no per-part SHA-256",
    sql: `
      -- A part's MD5 is computed only when the store's ETag is an MD5 to compare it with (NULL
      -- otherwise), and the part's own SHA-256 is no longer computed: the file's SHA-256 of the
      -- bytes sent is what verification checks. Hashing every byte two or three times capped the
      -- upload rate well below what the link and the store can take.
      CREATE TABLE upload_parts_v6 (
        episode_id TEXT NOT NULL,
        destination_id TEXT NOT NULL,
        path TEXT NOT NULL,
        upload_id TEXT NOT NULL,
        part_number INTEGER NOT NULL,
        size INTEGER NOT NULL,
        etag TEXT NOT NULL,
        md5 TEXT,
        done_at INTEGER NOT NULL,
        PRIMARY KEY (episode_id, destination_id, path, part_number),
        FOREIGN KEY (episode_id, destination_id, path) REFERENCES upload_files (episode_id, destination_id, path) ON DELETE CASCADE
      ) STRICT;
      INSERT INTO upload_parts_v6 (episode_id, destination_id, path, upload_id, part_number, size, etag, md5, done_at)
        SELECT episode_id, destination_id, path, upload_id, part_number, size, etag, md5, done_at FROM upload_parts;
      DROP TABLE upload_parts;
      ALTER TABLE upload_parts_v6 RENAME TO upload_parts;
    `,
  },
  {
    version: 7,
    name: 'imports: the folder recording each imported episode was made from',
    sql: `
      -- Written in the same transaction as the episode's recording row and before the source is
      -- moved out of the import folder: after a crash at any point the agent knows which episode a
      -- recording still in the folder belongs to, and never makes a second one of it. A
      -- byte-identical copy dropped later is told by its episode's manifest (size, then digests).
      CREATE TABLE imports (
        episode_id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN ('file', 'directory')),
        ino INTEGER NOT NULL,
        size_at_begin INTEGER NOT NULL,
        mtime_ms INTEGER NOT NULL,
        created_at INTEGER NOT NULL
      ) STRICT;
      CREATE INDEX imports_by_source ON imports (name, ino);
    `,
  },
];
