/** The command line or the local set-up is wrong; nothing was sent. Exit code 2. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}

/** A command ran and failed in its own terms (a code and a sentence). Exit code 1 unless said. */
export class CommandFailed extends Error {
  constructor(
    readonly code: string,
    message: string,
    readonly exitCode = 1,
  ) {
    super(message);
    this.name = 'CommandFailed';
  }
}
