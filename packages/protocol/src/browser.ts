/**
 * `@fleet/protocol/browser`: the protocol without zod and without Node, for the console and the
 * typed client inside it. Lists, bounds and constants (values.ts, from which the schemas are
 * built), JSON bounds, the retry policy and time. The schemas stay in the main entry: a browser
 * bundle that imported them would carry zod for checks the cloud makes anyway.
 */
export * from './values.js';
export * from './json.js';
export * from './retry.js';
export * from './time.js';
