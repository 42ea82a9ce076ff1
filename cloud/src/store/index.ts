export type * from './shared/types.js';
export { ATTEMPTS_KEPT_PER_SUBSCRIPTION, EPISODE_EQ_COLUMNS } from './shared/types.js';
export { openSqliteStore, SqliteStore, DATABASE_FILE, MissingDatabaseError } from './sqlite/store.js';
export { openStore, type StoreConfig } from './open.js';
export { openPgStore, PgStore, MissingPgSchemaError, redactDatabaseUrl } from './postgres/store.js';
export type * from './shared/sync-types.js';
export { ROBOT_SORTS, robotSortValue, type RobotListPosition, type RobotListQuery, type RobotSort } from './shared/robot-list-query.js';
export type { EpisodeLineRow } from './shared/episode-lines.js';
