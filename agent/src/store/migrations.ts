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
];
