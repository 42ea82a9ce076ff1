export type * from './types.js';
export { openSqliteStore, SqliteStore, DATABASE_FILE } from './sqlite.js';
