import { z } from 'zod';
import { humanText } from './text.js';
import { ScopeSchema } from './scopes.js';

export { API_KEY_PATTERN } from './values.js';

/** Timestamps on the wire are ISO 8601 strings in UTC. */
export const Timestamp = z.iso.datetime({ offset: true });

export const ApiKeySchema = z
  .object({
    id: z.string(),
    name: z.string(),
    scopes: z.array(ScopeSchema),
    created_by: z.string(),
    last_used_at: z.string().nullable(),
    expires_at: z.string().nullable(),
    revoked_at: z.string().nullable(),
    created_at: z.string(),
  })
  .meta({ id: 'ApiKey' });
export type ApiKey = z.infer<typeof ApiKeySchema>;

export const CreatedApiKeySchema = ApiKeySchema.extend({
  key: z.string().describe('The plaintext key. Returned exactly once; store it now.'),
}).meta({ id: 'CreatedApiKey' });
export type CreatedApiKey = z.infer<typeof CreatedApiKeySchema>;

export const CreateApiKeyBodySchema = z
  .strictObject({
    name: humanText(1, 128),
    scopes: z
      .array(ScopeSchema)
      .min(1)
      .refine((s) => new Set(s).size === s.length, { message: 'scopes must be unique' })
      // The refinement in the document's terms (a refinement is code no generator reads).
      .meta({ uniqueItems: true }),
    expires_at: Timestamp.optional(),
  })
  .meta({ id: 'CreateApiKeyRequest' });
export type CreateApiKeyBody = z.infer<typeof CreateApiKeyBodySchema>;

export const EntitlementsSchema = z
  .object({
    tier: z.string(),
    features: z.record(z.string(), z.boolean()),
    limits: z.record(z.string(), z.number()),
    key: z
      .object({
        id: z.string(),
        name: z.string(),
        scopes: z.array(z.string()),
        expires_at: z.string().nullable(),
      })
      .describe('The key that asked: what it may do (its scopes), so a client can show only the actions it can take'),
  })
  .meta({ id: 'Entitlements' });
export type Entitlements = z.infer<typeof EntitlementsSchema>;

export const UsageSchema = z
  .object({
    usage: z.array(z.object({ meter: z.string(), day: z.string(), count: z.number().int() })),
  })
  .meta({ id: 'Usage' });
export type Usage = z.infer<typeof UsageSchema>;
