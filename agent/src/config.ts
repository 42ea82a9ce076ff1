import { z } from 'zod';
import { BrokerUrlListSchema } from '@fleet/protocol';
import { ActionsSectionSchema } from './configured-actions.js';
import { RecorderConfigSchema, type RecorderKind } from './recording/recorder-config.js';
import { AGENT_RUNTIME_VERSION, LEGACY_RUNTIME_VERSION } from './version.js';

export { AGENT_RUNTIME_VERSION, LEGACY_RUNTIME_VERSION };


const ms = (min: number) => z.coerce.number().int().min(min);

/**
 * Everything the agent can be told, with its default. The CLI merges flags and FLEET_AGENT_*
 * variables and parses them here once; nothing below the entry point reads process.env.
 */
export const AgentConfigSchema = z
  .strictObject({
    /** Credentials, the agent's SQLite file, episode directories and the control socket. */
    dataDir: z.string().min(1),
    /**
     * Behave like a runtime that predates native episode commands: no `episodes.v1` capability,
     * and episodes start/finish/discard from the cloud answer `unsupported` (fail still works;
     * the local control surface keeps every verb, as the headset did on those runtimes).
     */
    legacyRuntime: z.boolean().default(false),
    /** Announced in the robot status; defaults to this build's version (or the legacy one). */
    runtimeVersion: z.string().min(1).max(64).optional(),
    /** Announced in the robot status; by default the one given at enrollment, else `unknown`. */
    platform: z.string().min(1).max(128).optional(),
    /** Rate at which the synthetic recorder writes (64 KiB/s by default). */
    bytesPerSecond: z.coerce.number().int().min(1).max(1024 * 1024 * 1024).default(64 * 1024),
    /** How often the synthetic recorder writes a message. */
    chunkIntervalMs: ms(1).max(60_000).default(100),
    /**
     * Least time spent in `finalizing`, counted from the verb (capture stops at the verb), standing
     * for a real recorder's flush; 0 in production, set by tests and the simulator to observe it.
     */
    finalizingDelayMs: ms(0).max(600_000).default(0),
    /** Wait after a failed finalization step (e.g. a full disk) before trying it again. */
    finalizeRetryMs: ms(10).default(5_000),
    /** First reconnect delay of the MQTT link; doubles per failed attempt up to the max. */
    reconnectMinMs: ms(10).default(500),
    reconnectMaxMs: ms(10).default(30_000),
    /** MQTT keepalive; the broker fires the last will after 1.5 times this without traffic. */
    keepaliveSeconds: z.coerce.number().int().min(1).max(65_535).default(30),
    /** An outbox message the cloud has not acknowledged this long after it was sent is sent again. */
    outboxAckTimeoutMs: ms(100).max(24 * 60 * 60 * 1000).default(30_000),
    /** Most outbox messages sent and not yet acknowledged at a time (a backlog drains at this window). */
    outboxMaxInFlight: z.coerce.number().int().min(1).max(1000).default(32),
    /** Upload assigned episodes to their destinations (on by default; off: the robot only reports). */
    sync: z.boolean().default(true),
    /** Replicas (episode, destination) uploading at once. */
    syncConcurrency: z.coerce.number().int().min(1).max(64).default(2),
    /** Multipart parts on the wire at once per file; memory is about this times the part size. */
    syncPartParallel: z.coerce.number().int().min(1).max(32).default(3),
    /** A grant request unanswered this long is retried with backoff. */
    syncGrantTimeoutMs: ms(100).max(10 * 60_000).default(30_000),
    /** While connected, ask for the complete assignment list again this long after each answer. */
    syncAssignmentsRefreshMs: ms(1000).max(24 * 60 * 60_000).default(5 * 60_000),
    /** Waits after the 1st, 2nd, … failed upload attempt; the last one repeats (10 s, 1 min, 5 min, 15 min, 1 h). */
    syncRetryScheduleMs: z.array(ms(1)).min(1).max(32).default([10_000, 60_000, 300_000, 900_000, 3_600_000]),
    /** Retry and deferral waits are spread by ± this fraction. */
    syncJitter: z.coerce.number().min(0).max(1).default(0.2),
    /** An upload request with no answer headers, or no body progress, this long fails. */
    uploadTimeoutMs: ms(1000).max(3_600_000).default(120_000),
    /** A PEM file of CAs trusted for upload URLs besides the system's and NODE_EXTRA_CA_CERTS (storage on premises). */
    uploadCaFile: z.string().min(1).optional(),
    /** The file NODE_EXTRA_CA_CERTS names, handed over by the CLI (kept when uploadCaFile rebuilds the trust list). */
    extraCaCertsFile: z.string().min(1).optional(),
    /** Allow plain http:// upload URLs (tests, a lab); refused by default. */
    allowHttpUploads: z.boolean().default(false),
    /** Bytes per second all of the agent's uploads together may send (`--upload-limit`); unlimited when absent. */
    uploadLimit: z.coerce.number().int().min(1024).max(100 * 1024 ** 3).optional(),
    /** A repeated `cmd_id` within this window is answered from storage (the API's 24 h). */
    commandResultWindowMs: ms(1000).default(24 * 60 * 60 * 1000),
    /** Broker address overriding those stored at enrollment; a comma-separated list for a cluster's nodes, tried in order. */
    mqttUrl: BrokerUrlListSchema.optional(),
    /** The local control socket; `<dataDir>/agent.sock` by default. */
    socketPath: z.string().min(1).optional(),
    logLevel: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
    /** What writes episode files (`recorder.kind`: command, import, synthetic); absent: nothing is recorded. */
    recorder: RecorderConfigSchema.optional(),
    /** What answers each robot command: a program, a shell command or a robot-local endpoint, or `simulated`. */
    actions: ActionsSectionSchema.shape.actions,
    /** Timeout of an action without its own `timeout_ms`; keep it under the cloud's command wait (10 s by default). */
    actionTimeoutMs: ActionsSectionSchema.shape.action_timeout_ms,
    /** Most bytes read from an action program's stdout or an endpoint's body. */
    actionOutputMaxBytes: ActionsSectionSchema.shape.action_output_max_bytes,
  })
  .refine((c) => c.reconnectMinMs <= c.reconnectMaxMs, { message: 'reconnectMinMs must not exceed reconnectMaxMs', path: ['reconnectMinMs'] });

export type AgentConfig = Readonly<z.output<typeof AgentConfigSchema>>;
export type AgentConfigInput = z.input<typeof AgentConfigSchema>;

/** Parses once and freezes; throws a ZodError naming the offending fields. */
export function parseAgentConfig(input: AgentConfigInput): AgentConfig {
  return Object.freeze(AgentConfigSchema.parse(input));
}

/** The recorder kind the config chose (`none` when it chose none). */
export function recorderKindOf(config: AgentConfig): RecorderKind {
  return config.recorder?.kind ?? 'none';
}

/** The runtime version the agent announces under `config`. */
export function runtimeVersionOf(config: AgentConfig): string {
  return config.runtimeVersion ?? (config.legacyRuntime ? LEGACY_RUNTIME_VERSION : AGENT_RUNTIME_VERSION);
}
