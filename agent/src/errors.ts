import type { CommandRefusal } from '@fleet/protocol';

/**
 * A refusal with one of the protocol's codes (`invalid_state`, `unsupported`, `invalid_args`,
 * `failed`; `interrupted` is the command handler's own); the command handler and the control
 * surface answer with its code and message.
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
