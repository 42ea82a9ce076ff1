export type * from './types.js';
export { ATTEMPTS_KEPT_PER_SUBSCRIPTION, EPISODE_EQ_COLUMNS } from './types.js';
export { openSqliteStore, SqliteStore, DATABASE_FILE, MissingDatabaseError } from './sqlite.js';
export { openStore, type StoreConfig } from './open.js';
export { openPgStore, PgStore, MissingPgSchemaError, redactDatabaseUrl } from './pg/store.js';
export type * from './sync-types.js';
export { ROBOT_SORTS, robotSortValue, type RobotListPosition, type RobotListQuery, type RobotSort } from './robot-list-query.js';
export { isEpisodeLineSource, isMemberLineSource, type EpisodeLineBatch, type EpisodeLineRow, type EpisodeLineSource } from './line-source.js';
