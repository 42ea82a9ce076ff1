import { z } from 'zod';

/** API key scopes (spec: Authentication 2). `admin` implies every other scope (decisions.md). */
export const SCOPES = ['robots:read', 'robots:command', 'data:read', 'data:write', 'fleet:read', 'admin'] as const;
export type Scope = (typeof SCOPES)[number];
export const ScopeSchema = z.enum(SCOPES);

/** Feature flags that gate endpoints (spec: Entitlements). */
export const FEATURES = ['api.access', 'api.robot_commands', 'data.metadata'] as const;
export type Feature = (typeof FEATURES)[number];
export const FeatureSchema = z.enum(FEATURES);

/** True when a key holding `held` may call an endpoint that requires `required`. */
export function scopeSatisfies(held: readonly Scope[], required: Scope): boolean {
  return held.includes('admin') || held.includes(required);
}
