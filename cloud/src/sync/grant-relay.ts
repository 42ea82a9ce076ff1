import type { FastifyBaseLogger } from 'fastify';
import {
  GRANT_EVENT,
  type Clock,
  type DeferralMessage,
  type DeferralReason,
  type GrantMessage,
  type GrantRequestEnvelope,
  type SyncRequest,
} from '@fleet/protocol';
import { readJsonAnswer, type EgressClient } from '../egress/client.js';
import type { CloudMetrics } from '../metrics.js';
import type { SecretBox } from '../secret-box.js';
import type { EpisodeRow, EpisodeStore } from '../store/index.js';
import type { DestinationRow, SyncStore } from '../store/shared/sync-types.js';
import { checkGrantAnswer, type CheckedAnswer } from './grant-answer.js';
import { PROVIDER_MAX_BYTES, PROVIDER_TIMEOUT_MS, postToProvider } from './provider-post.js';

export { PROVIDER_MAX_BYTES, PROVIDER_TIMEOUT_MS };

/**
 * A forward's claim on (episode, destination) lasts the provider timeout plus this margin: long
 * enough to cover one forward, short enough that the claim of a replica that died runs out soon.
 */
export const FORWARD_CLAIM_MARGIN_MS = 5_000;
/** How long a robot waits before asking again when the provider gave no `retry_after`. */
export const DEFAULT_RETRY_AFTER_S = 60;

/** The failure values of `POST /v1/destinations/{id}/check` (spec, Destinations). */
export type CheckFailure = 'unreachable' | 'timeout' | 'http_error' | 'invalid_json' | 'schema_invalid' | 'destination_mismatch';

export interface ForwardResult {
  answer: CheckedAnswer;
  /** The provider's HTTP status, when it answered. */
  httpStatus: number | null;
  latencyMs: number;
  /** Set when the forward failed (a provider deferral is not a failure). */
  failure: CheckFailure | null;
}

const FAILURE_OF_REASON: Partial<Record<DeferralReason, CheckFailure>> = {
  unreachable: 'unreachable',
  timeout: 'timeout',
  http_error: 'http_error',
  too_large: 'invalid_json',
  invalid_json: 'invalid_json',
  schema_invalid: 'schema_invalid',
  grant_reused: 'schema_invalid',
  expired: 'schema_invalid',
  destination_mismatch: 'destination_mismatch',
};

/** The check's `failure` for an answer (null for a grant or the provider's own deferral). */
export function failureOf(answer: CheckedAnswer): CheckFailure | null {
  return answer.kind === 'deferral' ? (FAILURE_OF_REASON[answer.reason] ?? null) : null;
}

/**
 * A grant whose `grant_id` the destination already used: rejected and treated as a deferral
 * (spec, grant response), by the relay and by the destination check alike.
 */
export function grantReused(): CheckedAnswer {
  return { kind: 'deferral', reason: 'grant_reused', message: 'the grant provider reused a grant_id', retryAfterS: null };
}

export interface GrantRelayOptions {
  /** The store's sync part and episode lookups (`store.sync`, `store.episodes` in production). */
  store: { sync: SyncStore; episodes: Pick<EpisodeStore, 'get'> };
  egress: EgressClient;
  secrets: SecretBox;
  clock: Clock;
  logger: FastifyBaseLogger;
  timeoutMs?: number;
  /** Sent to the robot with a deferral that came without the provider's own `retry_after`. */
  retryAfterS?: number;
  /** Counts forwards and deferrals by destination. */
  metrics?: Pick<CloudMetrics, 'grantForward' | 'grantDeferral'>;
}

/**
 * The grant relay: a robot asks for a grant per (episode, destination) over MQTT; the relay
 * checks that the episode is the robot's and routed to that live destination, POSTs the signed
 * envelope to the destination's grant provider through the egress client, checks the answer
 * strictly and hands the robot either the grant or a deferral with its reason. Every forward is
 * recorded for destination health; a grant marks the replica `granted`. The bytes never come
 * here: the robot uploads straight to the URLs of the grant.
 */
export class GrantRelay {
  constructor(private readonly opts: GrantRelayOptions) {}

  /** POSTs `envelope` to `destination` and checks the answer; never throws for the provider's faults. */
  async forward(destination: DestinationRow, envelope: GrantRequestEnvelope): Promise<ForwardResult> {
    const { reply, latencyMs } = await postToProvider(this.opts, destination, GRANT_EVENT, envelope, 'grant provider');
    let httpStatus: number | null = null;
    let answer: CheckedAnswer;
    switch (reply.kind) {
      case 'answered': {
        httpStatus = reply.status;
        if (reply.status < 200 || reply.status >= 300) {
          answer = deferral('http_error', `the grant provider answered HTTP ${reply.status}`);
        } else {
          const json = readJsonAnswer(reply);
          answer = json.ok ? checkGrantAnswer(json.value, envelope, this.opts.clock.now()) : deferral('invalid_json', `the answer is ${json.message}`);
        }
        break;
      }
      case 'too_large':
        httpStatus = reply.status;
        answer = deferral('too_large', reply.message);
        break;
      case 'timeout':
        answer = deferral('timeout', reply.message);
        break;
      case 'unreachable':
        answer = deferral('unreachable', reply.message);
        break;
    }
    return { answer, httpStatus, latencyMs, failure: failureOf(answer) };
  }

  /** Answers a robot's `grant.request`: a grant, or a deferral with its reason. */
  async handle(robotId: string, req: Extract<SyncRequest, { type: 'grant.request' }>): Promise<GrantMessage | DeferralMessage> {
    const { store, clock, logger } = this.opts;
    const base = { req_id: req.req_id, episode_id: req.episode_id, destination_id: req.destination_id };
    const fallback = this.opts.retryAfterS ?? DEFAULT_RETRY_AFTER_S;
    // Before the route is found the destination id is only the robot's word: not a label then.
    const refuse = (reason: DeferralReason, message: string, retryAfterS = fallback): DeferralMessage => {
      this.opts.metrics?.grantDeferral(reason === 'not_assigned' ? null : req.destination_id, reason);
      return { type: 'deferral', ...base, reason, message: message.slice(0, 1024), retry_after_s: retryAfterS };
    };
    if (req.pressure) await store.sync.notePressure(robotId, req.pressure, clock.now());
    const route = await store.sync.assignment(robotId, req.episode_id, req.destination_id);
    if (!route) return refuse('not_assigned', 'this episode is not assigned to that destination for this robot', 3600);
    const destination = await store.sync.getDestination(route.orgId, req.destination_id);
    if (!destination || destination.revokedAt !== null) return refuse('revoked', 'the destination was revoked', 3600);
    const episode = await store.episodes.get(route.orgId, req.episode_id);
    if (!episode || episode.robotId !== robotId) return refuse('unknown_episode', 'the episode is not indexed yet', 30);

    // One forward per (episode, destination) at a time, across replicas: a robot that asks again
    // while its first request is still with the provider (here or on another replica) waits
    // for that one instead of getting a second grant.
    const leaseMs = (this.opts.timeoutMs ?? PROVIDER_TIMEOUT_MS) + FORWARD_CLAIM_MARGIN_MS;
    const claim = await store.sync.claimForward(route.orgId, episode.seq, destination.id, clock.now(), leaseMs);
    if (claim.kind === 'held') {
      const waitS = Math.max(1, Math.ceil((claim.until - clock.now()) / 1000));
      return refuse('deferred', 'a grant for this episode and destination is being requested already', waitS);
    }
    try {
      return await this.forwardClaimed(robotId, episode, destination, route.orgId, req, refuse, fallback);
    } finally {
      await store.sync.releaseForward(route.orgId, episode.seq, destination.id, claim.token).catch((err: unknown) => {
        // The lease runs out on its own; until then a repeat request is deferred.
        logger.warn({ err, episode_id: episode.id, destination_id: destination.id }, 'could not release the grant forward claim');
      });
    }
  }

  /** The forward itself, under the claim on (episode, destination). */
  private async forwardClaimed(
    robotId: string,
    episode: EpisodeRow,
    destination: DestinationRow,
    orgId: string,
    req: Extract<SyncRequest, { type: 'grant.request' }>,
    refuse: (reason: DeferralReason, message: string, retryAfterS?: number) => DeferralMessage,
    fallback: number,
  ): Promise<GrantMessage | DeferralMessage> {
    const { store, clock, logger } = this.opts;
    const base = { req_id: req.req_id, episode_id: req.episode_id, destination_id: req.destination_id };
    const envelope: GrantRequestEnvelope = {
      episode_id: episode.id,
      org_id: orgId,
      request: {
        destination_id: destination.id,
        episode: { robot_id: robotId, recording_session_id: episode.report.recording_session_id, episode_seq: episode.report.episode_seq },
        manifest: episode.manifest,
        ...(req.resume ? { resume: req.resume } : {}),
        ...(req.pressure ? { pressure: req.pressure } : {}),
      },
    };
    const result = await this.forward(destination, envelope);
    let answer = result.answer;
    if (answer.kind === 'grant' && !(await store.sync.claimGrantId(destination.id, answer.grantId, clock.now()))) {
      answer = grantReused();
    }
    const now = clock.now();
    if (answer.kind === 'deferral') {
      await store.sync.recordForward(orgId, destination.id, now, { kind: 'deferred', reason: `${answer.reason}: ${answer.message}`.slice(0, 512) });
      this.opts.metrics?.grantForward(destination.id, 'deferred');
      logger.info({ robot_id: robotId, episode_id: episode.id, destination_id: destination.id, reason: answer.reason }, 'grant deferred');
      return refuse(answer.reason, answer.message, answer.retryAfterS ?? fallback);
    }
    await store.sync.recordForward(orgId, destination.id, now, { kind: 'granted', grantId: answer.grantId });
    this.opts.metrics?.grantForward(destination.id, 'granted');
    const objectKey = answer.destination.object_key ?? null;
    await store.sync.markGranted(orgId, episode.seq, destination.id, answer.grantId, objectKey, now);
    return {
      type: 'grant',
      ...base,
      grant_id: answer.grantId,
      expires_at: answer.expiresAt,
      protocol: answer.destination.protocol,
      ...(objectKey !== null ? { object_key: objectKey } : {}),
      retention: destination.retention,
      files: answer.destination.files,
    };
  }
}

function deferral(reason: DeferralReason, message: string): CheckedAnswer {
  return { kind: 'deferral', reason, message: message.slice(0, 300), retryAfterS: null };
}
