/**
 * What a test set-up has started, to be stopped in reverse order of start: also when a later
 * start fails, so the cleanup finds everything that did start. Each part is disposed even if an
 * earlier one fails to; one failure is rethrown as it is, several as an AggregateError.
 */
export interface Parts {
  /** Keeps `part` to dispose of later; returns it. */
  own<T extends AsyncDisposable>(part: T): T;
  /** Disposes of every part kept, newest first; the list is empty afterwards. */
  dispose(): Promise<void>;
}

export function startedParts(what: string): Parts {
  const started: AsyncDisposable[] = [];
  return {
    own(part) {
      started.push(part);
      return part;
    },
    async dispose() {
      const errors: unknown[] = [];
      for (const part of started.splice(0).reverse()) {
        try {
          await part[Symbol.asyncDispose]();
        } catch (err) {
          errors.push(err);
        }
      }
      if (errors.length === 1) throw errors[0];
      if (errors.length > 1) throw new AggregateError(errors, `stopping ${what} failed`);
    },
  };
}
