export * from './types.js';
export { openAgentStore, SqliteAgentStore, AGENT_DATABASE_FILE } from './sqlite.js';
