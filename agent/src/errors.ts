import type { CommandRefusal } from '@fleet/protocol';
import type { ControlErrorCode } from './control/protocol.js';
import { formatProblem, type ConfigProblem } from './config-errors.js';

/**
 * The agent's refusals and failures in one place, as the cloud's are in its error table: every
 * code the agent's own errors carry, with what it means, then one class a kind. A code the cloud
 * answered (an enrollment refused, a grant refused, a replica report's verdict) passes through as
 * the cloud's own word, so the classes that carry such codes keep `code: string`.
 */
export const AGENT_ERRORS = {
  // A command or control request refused (RefusalError, NotFoundError, ControlError): the command
  // handler and the control surface answer with the code and the message.
  invalid_state: 'the verb is not valid in the current state; nothing changed',
  unsupported: 'the runtime lacks the command',
  invalid_args: 'the arguments are wrong',
  failed: 'the agent tried and could not',
  interrupted: 'the agent stopped while running this command; whether it acted is unknown, it will not run it again',
  not_configured: 'the config maps no program or endpoint to this command (its `actions`)',
  action_timeout: 'the action did not answer within its timeout and was stopped',
  bad_request: 'a control request line that is not a request',
  not_found: 'asked for by id, and this robot does not have it',
  not_running: 'no agent answers on the control socket (the CLI exits 3)',
  // Enrollment (EnrollError); any other code is the one the cloud refused with.
  already_enrolled: 'the data directory holds credentials already; --force enrolls again (the CLI exits 2)',
  unreachable: 'the enrollment URL could not be reached',
  invalid_response: 'the enrollment answer is not JSON or not the expected shape',
  http_error: 'the enrollment answered an HTTP error with no error document',
  // One upload attempt (UploadError); the code goes into the replica's one-line error.
  grant_invalid: 'the grant does not fit the manifest or names an unusable URL',
  insecure_url: 'a plain-http upload URL without --allow-http-uploads',
  network: 'the connection to the storage failed',
  file_changed: 'the file no longer matches its manifest or changed while sent',
  file_unreadable: 'the file could not be read to hash it',
  file_missing: 'the file is missing from the episode directory',
  url_expired: 'the storage answered 403 AccessDenied: the signed URL ran out',
  upload_failed: 'the storage answered 5xx',
  upload_rejected: 'the storage answered 4xx',
  aborted: 'the attempt was cancelled or the agent is stopping',
  stopping: 'the uploader stopped while waiting for a grant',
  receipt_missing: 'the storage answered no ETag',
  receipt_mismatch: 'the receipt does not prove the bytes sent',
  complete_failed: 'completing the multipart upload answered an error document',
  incomplete: 'a file of the replica is not complete at the destination',
  grant_timeout: 'no answer to the grant request in time',
  link_down: 'the MQTT link was down or dropped while waiting for a grant',
} as const satisfies Record<string, string>;

export type AgentErrorCode = keyof typeof AGENT_ERRORS;

// The table covers every code the protocol and the control surface define.
const coversRefusals: CommandRefusal | ControlErrorCode extends AgentErrorCode ? true : never = true;
void coversRefusals;

/**
 * A refusal with one of the protocol's codes (the table's first part; `interrupted` is the
 * command handler's own); the command handler and the control surface answer with its code and
 * message.
 */
export class RefusalError extends Error {
  override readonly name: string = 'RefusalError';
  constructor(
    readonly code: CommandRefusal,
    message: string,
  ) {
    super(message);
  }
}

/** An episode verb in a state where it is not valid. Nothing changed. */
export class IllegalTransitionError extends RefusalError {
  override readonly name = 'IllegalTransitionError';
  constructor(
    readonly event: string,
    readonly state: string,
    readonly allowedFrom: readonly string[],
  ) {
    super('invalid_state', `cannot ${event} while ${state}${allowedFrom.length ? ` (only while ${allowedFrom.join(' or ')})` : ''}`);
  }
}

/** Something asked for by id that this robot does not have (control surface: `not_found`). */
export class NotFoundError extends Error {
  override readonly name = 'NotFoundError';
  readonly code = 'not_found';
}

/** A refusal or failure answered by the agent's control socket; `code` as in {@link ControlErrorCode}. */
export class ControlError extends Error {
  override readonly name = 'ControlError';
  constructor(
    readonly code: ControlErrorCode | 'not_running',
    message: string,
  ) {
    super(message);
  }
}

/** Enrollment refused or impossible; `code` is the API's error code when it gave one. */
export class EnrollError extends Error {
  override readonly name = 'EnrollError';
  constructor(
    message: string,
    readonly code: string,
    readonly status?: number,
  ) {
    super(message);
  }
}

/** Why an upload attempt failed; `code` goes into the replica's one-line error. */
export class UploadError extends Error {
  override readonly name = 'UploadError';
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/** The robot is not enrolled: `fleet-agent start` never enrolls by itself (the CLI exits 2). */
export class NotEnrolledError extends Error {
  override readonly name = 'NotEnrolledError';
}

/** The stored credentials are unreadable or incomplete; enrolling again with --force replaces them. */
export class CredentialsError extends Error {
  override readonly name = 'CredentialsError';
}

/** A config file's problems, every one with its file, line and key (the CLI exits 2). */
export class ConfigFileError extends Error {
  override readonly name = 'ConfigFileError';
  constructor(readonly problems: readonly ConfigProblem[]) {
    super(problems.map(formatProblem).join('\n'));
  }
}

/** A file could not be hashed: shorter than its manifest says, or the hashing worker failed. */
export class FileHashError extends Error {
  override readonly name = 'FileHashError';
}

/** A replica asked to move where its state does not allow: a bug in the uploader, never a silent no-op. */
export class IllegalReplicaTransitionError<S extends string = string> extends Error {
  override readonly name = 'IllegalReplicaTransitionError';
  constructor(
    readonly from: S,
    readonly to: S,
    allowed: readonly S[],
  ) {
    super(`a replica cannot move from ${from} to ${to} (only to ${allowed.join(' or ') || 'nothing'})`);
  }
}
