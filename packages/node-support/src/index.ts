export * from './cli.js';
export * from './tcp.js';
