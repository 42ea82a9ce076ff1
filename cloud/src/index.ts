export { buildApp, type AppParts, type CloudApp } from './app.js';
export { offlineAppParts, startCloud, type OfflineAppParts, type RunningCloud, type StartCloudOptions } from './server.js';
export { parseCloudConfig, type CloudConfig, type CloudConfigInput } from './config.js';
export { openSqliteStore, openStore, type Store } from './store/index.js';
