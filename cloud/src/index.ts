export { buildApp, type AppDeps, type CloudApp } from './app.js';
export { startCloud, type RunningCloud } from './server.js';
export { parseCloudConfig, type CloudConfig, type CloudConfigInput } from './config.js';
export { openSqliteStore, openStore, type Store } from './store/index.js';
