/**
 * A process's parts, started in order and closed in reverse: each `add` starts one part and
 * keeps what closes it. When a start fails, `close()` undoes the parts already started, newest
 * first, so a failed start leaves nothing running. The cloud's server and the agent's daemon are
 * each one such list, so a new part (the grant relay, the uploader) is one line in it.
 */
export class Lifecycle {
  private readonly closers: { name: string; close: () => Promise<void> }[] = [];
  private closing: Promise<void> | null = null;

  constructor(private readonly onCloseError: (name: string, err: unknown) => void = () => undefined) {}

  /** Starts a part; `start` returns what closes it (or nothing, when there is nothing to close). */
  async add<T>(name: string, start: () => Promise<{ value: T; close: () => Promise<void> }>): Promise<T> {
    if (this.closing) throw new Error(`cannot start ${name}: shutting down`);
    const { value, close } = await start();
    this.closers.push({ name, close });
    return value;
  }

  /** The names of the parts started so far, in start order. */
  get started(): string[] {
    return this.closers.map((c) => c.name);
  }

  /** Closes every started part, newest first; one failing close does not stop the others. */
  close(): Promise<void> {
    this.closing ??= (async () => {
      for (const { name, close } of this.closers.splice(0).reverse()) {
        try {
          await close();
        } catch (err) {
          this.onCloseError(name, err);
        }
      }
    })();
    return this.closing;
  }
}
