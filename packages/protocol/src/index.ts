export * from './scopes.js';
export * from './errors.js';
export * from './api-keys.js';
export * from './time.js';
export * from './robot.js';
export * from './episodes.js';
export * from './tcp.js';
export * from './datasets.js';
