import { z } from 'zod';
import { FEATURES, SCOPES } from './values.js';

export { FEATURES, SCOPES } from './values.js';

export type Scope = (typeof SCOPES)[number];
export const ScopeSchema = z.enum(SCOPES);

export type Feature = (typeof FEATURES)[number];
export const FeatureSchema = z.enum(FEATURES);

/** True when a key holding `held` may call an endpoint that requires `required`. */
export function scopeSatisfies(held: readonly Scope[], required: Scope): boolean {
  return held.includes('admin') || held.includes(required);
}
