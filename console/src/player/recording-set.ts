import type { DecodedMessage, McapRecording, ReadOptions, RecordingChannel } from '@fleet/recordings';

/**
 * The MCAP files of one episode as one recording: rosbag2 splits a long bag into several files
 * (`bag_0.mcap`, `bag_1.mcap`, …), and a player wants one time line. Messages of several files
 * are merged by log time (forward or reverse), each file read by its own index; a file whose
 * time range is outside the asked bounds is not read at all.
 */
export class RecordingSet {
  readonly channels: readonly (RecordingChannel & { file: number })[];
  readonly startNs: bigint;
  readonly endNs: bigint;
  /** A file was cut short (no summary): it plays up to its last complete chunk. */
  readonly truncated: boolean;

  constructor(readonly files: readonly McapRecording[]) {
    this.channels = files.flatMap((f, file) => f.channels.map((c) => ({ ...c, file })));
    const starts = files.map((f) => f.startNs).filter((t): t is bigint => t !== undefined);
    const ends = files.map((f) => f.endNs).filter((t): t is bigint => t !== undefined);
    this.startNs = starts.length > 0 ? starts.reduce((a, b) => (b < a ? b : a)) : 0n;
    this.endNs = ends.length > 0 ? ends.reduce((a, b) => (b > a ? b : a)) : this.startNs;
    this.truncated = files.some((f) => f.truncated);
  }

  /** The schema of a topic (the first file that has it). */
  channel(topic: string): RecordingChannel | undefined {
    return this.channels.find((c) => c.topic === topic);
  }

  /** Messages of `topics` in log-time order (newest first with `reverse`), across files. */
  async *messages(topics: readonly string[], opts: ReadOptions = {}): AsyncGenerator<DecodedMessage, void, void> {
    const wanted = this.files.filter((f) => {
      if (!f.channels.some((c) => topics.includes(c.topic))) return false;
      if (opts.startNs !== undefined && f.endNs !== undefined && f.endNs < opts.startNs) return false;
      if (opts.endNs !== undefined && f.startNs !== undefined && f.startNs > opts.endNs) return false;
      return true;
    });
    if (wanted.length === 1) {
      yield* wanted[0]!.messages(topics, opts);
      return;
    }
    yield* mergeByTime(
      wanted.map((f) => f.messages(topics, opts)),
      opts.reverse === true,
    );
  }

  /** The first message of `topics` from `opts` on (the newest one up to `endNs` with `reverse`). */
  async first(topics: readonly string[], opts: ReadOptions = {}): Promise<DecodedMessage | undefined> {
    const it = this.messages(topics, opts);
    try {
      const r = await it.next();
      return r.done === true ? undefined : r.value;
    } finally {
      await it.return();
    }
  }

  async close(): Promise<void> {
    await Promise.all(this.files.map((f) => f.close().catch(() => undefined)));
  }
}

/** A k-way merge of iterators each already in time order; only one pending message per iterator is held. */
async function* mergeByTime(its: AsyncGenerator<DecodedMessage, void, void>[], reverse: boolean): AsyncGenerator<DecodedMessage, void, void> {
  const heads: (DecodedMessage | undefined)[] = await Promise.all(its.map(async (it) => ((await it.next()) as IteratorResult<DecodedMessage>).value as DecodedMessage | undefined));
  const before = (a: DecodedMessage, b: DecodedMessage) => (reverse ? a.logTimeNs > b.logTimeNs : a.logTimeNs < b.logTimeNs);
  try {
    for (;;) {
      let best = -1;
      for (let i = 0; i < heads.length; i++) {
        const h = heads[i];
        if (h !== undefined && (best < 0 || before(h, heads[best]!))) best = i;
      }
      if (best < 0) return;
      yield heads[best]!;
      const r = await its[best]!.next();
      heads[best] = r.done === true ? undefined : r.value;
    }
  } finally {
    await Promise.all(its.map((it) => it.return()));
  }
}
