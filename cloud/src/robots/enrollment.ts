import { DAY, iso, type Clock, type EnrollBody, type EnrollmentTokenInfo, type EnrollResponse } from '@fleet/protocol';
import { brokerUrlsForRobot, topics } from '@fleet/protocol';
import { entitlementsOf } from '../entitlements.js';
import { ApiError, validationError } from '../errors.js';
import { hashSecret, newId, newSecret } from '../ids.js';
import type { EnrollmentTokenRow, OrgRow, Store } from '../store/index.js';

export const DEFAULT_TOKEN_TTL_MS = DAY;

export async function createEnrollmentToken(
  store: Store,
  clock: Clock,
  args: { org: OrgRow; createdBy: string; namePrefix?: string; maxUses?: number; expiresAt?: string },
) {
  const now = clock.now();
  const expiresAt = args.expiresAt === undefined ? now + DEFAULT_TOKEN_TTL_MS : Date.parse(args.expiresAt);
  if (expiresAt <= now) {
    throw validationError('body', '/expires_at', 'expires_at must be in the future', 'in_past');
  }
  const token = newSecret('ret');
  const row = {
    id: newId('ret'),
    orgId: args.org.id,
    tokenHash: hashSecret(token),
    tokenPrefix: tokenPrefixOf(token),
    namePrefix: args.namePrefix ?? null,
    maxUses: args.maxUses ?? 1,
    expiresAt,
    createdBy: args.createdBy,
    createdAt: now,
  };
  await store.robots.createEnrollmentToken(row);
  return {
    id: row.id,
    token,
    name_prefix: row.namePrefix,
    max_uses: row.maxUses,
    uses: 0,
    expires_at: iso(row.expiresAt),
    created_at: iso(row.createdAt),
  };
}

/** Characters of a token a list shows: `ret_` and 8 of its 256 random bits' worth, not enough to guess the rest. */
const SHOWN_TOKEN_CHARS = 12;

export function tokenPrefixOf(token: string): string {
  return token.slice(0, SHOWN_TOKEN_CHARS);
}

/** A token as `GET /v1/robots/enrollment-tokens` lists it: never its secret. */
export function toEnrollmentTokenInfo(t: EnrollmentTokenRow): EnrollmentTokenInfo {
  return {
    id: t.id,
    token_prefix: t.tokenPrefix ?? 'ret_',
    name_prefix: t.namePrefix,
    max_uses: t.maxUses,
    uses: t.uses,
    expires_at: iso(t.expiresAt),
    created_at: iso(t.createdAt),
    revoked_at: t.revokedAt === null ? null : iso(t.revokedAt),
  };
}

const REFUSALS = {
  token_invalid: 'unknown enrollment token',
  token_expired: 'enrollment token expired',
  token_used_up: 'enrollment token has no uses left',
  token_revoked: 'enrollment token revoked',
} as const;

/**
 * Exchanges an enrollment token for a robot identity and its MQTT credentials (shown once; the
 * password is stored hashed). The robot's name is the one it asks for, else `<prefix>-<n>`.
 */
export async function enrollRobot(store: Store, clock: Clock, body: EnrollBody, mqttUrls: readonly string[]): Promise<EnrollResponse> {
  const password = newSecret('rsec');
  const outcome = await store.robots.enroll({
    tokenHash: hashSecret(body.token),
    now: clock.now(),
    robotLimit: async (orgId) => {
      const org = await store.orgs.get(orgId);
      return org ? entitlementsOf(org).limits.robots : undefined;
    },
    build: (token, ordinal) => ({
      id: newId('rbt'),
      name: body.name ?? `${token.namePrefix ?? 'robot'}-${ordinal}`,
      platform: body.platform ?? null,
      runtimeVersion: body.runtime_version ?? null,
      capabilities: [],
      mqttPasswordHash: hashSecret(password),
      connected: false,
      recordingState: null,
      lastSeenAt: null,
      createdAt: clock.now(),
    }),
  });
  switch (outcome.kind) {
    case 'enrolled': {
      const urls = brokerUrlsForRobot(outcome.robot.id, mqttUrls);
      return {
        robot_id: outcome.robot.id,
        name: outcome.robot.name,
        mqtt: {
          url: urls[0] ?? '',
          urls,
          client_id: outcome.robot.id,
          username: outcome.robot.id,
          password,
          topic_prefix: topics.prefix(outcome.robot.id),
        },
      };
    }
    case 'robot_limit':
      throw new ApiError('conflict', `the organization already has its limit of ${outcome.limit} robots`, { limit: 'robots', value: outcome.limit });
    default:
      throw new ApiError('unauthenticated', REFUSALS[outcome.kind]);
  }
}
