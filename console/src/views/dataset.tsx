import { useEffect, useRef, useState } from 'preact/hooks';
import { useConsole, useLiveEvent } from '../ui/context.js';
import { useAction, useAsync } from '../ui/hooks.js';
import { Confirm, ErrorNotice, Facts, KvTable, Link, Loading, PageHeader, ScopedButton } from '../ui/components.js';
import { formatBytes, formatTime, plural } from '../ui/format.js';
import { can, needs } from '../session.js';
import { queryFromFilter } from '../ui/episodes-filter.js';
import { downloadManifest, type ManifestProgress, type SaveMode } from '../ui/datasets-manifest.js';
import { datasetState } from './datasets.js';

/** How long live events are gathered before the count is asked again (a busy fleet finalizes many episodes a second). */
const COUNT_DEBOUNCE_MS = 1500;

/**
 * `/console/datasets/<id>`: the dataset, its count (for a live dataset, the episodes a snapshot
 * taken now would pin, asked again as `episode.finalized` events arrive), the snapshot (with a
 * confirmation: it is permanent) and the manifest saved to a file page by page.
 */
export function DatasetView({ id }: { id: string }) {
  const { session } = useConsole();
  const ds = useAsync((signal) => session.client.datasets.get(id, { signal }), [id]);
  const snap = useAction(() => session.client.datasets.snapshot(id));
  // Pinned from the moment the snapshot answers (the dataset is read again after it).
  const live = ds.data ? ds.data.snapshot_at === null && !snap.result : false;
  const count = useAsync((signal) => (live ? session.client.datasets.count(id, { signal }) : Promise.resolve(null)), [id, live]);

  // Refresh the live count when episodes arrive (and when sync moves, if the filter is about it).
  const timer = useRef<ReturnType<typeof setTimeout> | null>(null);
  useEffect(() => () => void (timer.current && clearTimeout(timer.current)), []);
  const syncFiltered = ds.data ? 'sync_state' in ds.data.filter : false;
  useLiveEvent(['episode.finalized', 'episode.synced', 'episode.verified'], (ev) => {
    if (!live || (ev.type !== 'episode.finalized' && !syncFiltered) || ev.data.test === true) return;
    if (timer.current) return;
    timer.current = setTimeout(() => {
      timer.current = null;
      count.reload();
    }, COUNT_DEBOUNCE_MS);
  });

  const mayWrite = can(session, 'data:write');
  const [confirming, setConfirming] = useState(false);

  if (!ds.data) {
    return (
      <section>
        <PageHeader title="Dataset" />
        {ds.error ? <ErrorNotice error={ds.error} action="Loading the dataset" /> : <Loading label="Loading the dataset" />}
        <p>
          <Link to="/datasets">Back to datasets</Link>
        </p>
      </section>
    );
  }
  // Until the dataset is read again, the snapshot's answer says what it pinned.
  const d = snap.result ? { ...ds.data, snapshot_at: snap.result.snapshot_at, episode_count: snap.result.episode_count } : ds.data;
  const filterEntries = Object.entries(d.filter);
  const liveCount = count.data ? `${count.data.capped ? 'more than ' : ''}${count.data.episode_count.toLocaleString()}` : null;

  return (
    <section class="dataset-page">
      <PageHeader title={d.name}>
        <Link to={`/episodes?${queryFromFilter(d.filter).toString()}`} class="button">
          Episodes matching the filter
        </Link>
        {live ? (
          <ScopedButton allowed={mayWrite} why={needs('data:write')} class="primary" onClick={() => (snap.clear(), setConfirming(true))} disabled={snap.busy}>
            Snapshot…
          </ScopedButton>
        ) : null}
      </PageHeader>
      {d.description ? <p>{d.description}</p> : null}
      <ErrorNotice error={snap.error} action="The snapshot" />
      {snap.result ? (
        <div class="notice info" role="status">
          Snapshot taken: {plural(snap.result.episode_count, 'episode')} pinned at {formatTime(snap.result.snapshot_at)}.
        </div>
      ) : null}

      <div class="grid-2">
        <section class="panel" aria-labelledby="ds-facts">
          <h2 id="ds-facts">Dataset</h2>
          <Facts
            items={[
              ['Id', <code>{d.id}</code>],
              ['State', datasetState(d)],
              [
                live ? 'Episodes matching now' : 'Episodes pinned',
                live ? (
                  <span class="live-count" aria-live="polite">
                    {liveCount ?? (count.error ? '–' : '…')}
                  </span>
                ) : (
                  (d.episode_count ?? 0).toLocaleString()
                ),
              ],
              ['Snapshot taken', d.snapshot_at ? <time dateTime={d.snapshot_at}>{formatTime(d.snapshot_at)}</time> : 'not yet'],
              ['Created', <time dateTime={d.created_at}>{formatTime(d.created_at)}</time>],
              ['Created by key', <code>{d.created_by}</code>],
            ]}
          />
          {live ? <p class="muted small">Counted as a snapshot would pin them now: evaluation episodes left out unless the filter names an evaluation, discarded ones unless it names an outcome. The count follows new episodes as they arrive.</p> : null}
          {count.error ? <ErrorNotice error={count.error} action="Counting the episodes" /> : null}
        </section>

        <section class="panel" aria-labelledby="ds-filter">
          <h2 id="ds-filter">Filter</h2>
          {filterEntries.length === 0 ? (
            <p class="muted small">No filter: every episode.</p>
          ) : (
            <KvTable caption="The dataset's filter" valueClass="value" rows={filterEntries.map(([k, v]) => ({ key: k, name: <code>{k}</code>, value: v }))} />
          )}
        </section>
      </div>

      <ManifestPanel id={d.id} name={d.name} snapshotted={!live} count={d.episode_count} />

      <Confirm
        open={confirming}
        title={`Snapshot “${d.name}”?`}
        confirmLabel="Snapshot now"
        onCancel={() => setConfirming(false)}
        onConfirm={() => {
          setConfirming(false);
          void snap.run().then((r) => {
            if (r) ds.reload();
          });
        }}
      >
        <p>
          The members are pinned for good{liveCount !== null ? ` (about ${liveCount} ${count.data?.episode_count === 1 ? 'episode matches' : 'episodes match'} now)` : ''}: episodes that arrive later never join, and a snapshot cannot be undone or taken again. The manifest becomes available.
        </p>
      </Confirm>
    </section>
  );
}

function ManifestPanel({ id, name, snapshotted, count }: { id: string; name: string; snapshotted: boolean; count: number | null }) {
  const { session } = useConsole();
  const [progress, setProgress] = useState<ManifestProgress | null>(null);
  const [done, setDone] = useState<{ mode: SaveMode; progress: ManifestProgress } | null>(null);
  const [error, setError] = useState<unknown>(undefined);
  const [running, setRunning] = useState<AbortController | null>(null);
  useEffect(() => () => running?.abort(), [running]);

  const start = async () => {
    const ac = new AbortController();
    setRunning(ac);
    setError(undefined);
    setDone(null);
    setProgress(null);
    try {
      const r = await downloadManifest(session.client, id, name, { signal: ac.signal, onProgress: setProgress });
      if (r) setDone(r);
    } catch (err) {
      if (!ac.signal.aborted) setError(err);
    } finally {
      setRunning(null);
    }
  };

  return (
    <section class="panel" aria-labelledby="ds-manifest">
      <h2 id="ds-manifest">Manifest</h2>
      {snapshotted ? (
        <p class="muted small">
          One NDJSON line for the snapshot (its header), then one per member ({plural(count ?? 0, 'episode')}) with its files and where they are stored. Saved page by page; nothing recorded is downloaded.
        </p>
      ) : (
        <p class="muted small">A live dataset has no manifest: snapshot it first.</p>
      )}
      <div class="row">
        <button type="button" class="primary" disabled={!snapshotted || running !== null} onClick={() => void start()} title={snapshotted ? undefined : 'Snapshot the dataset first'}>
          {running ? 'Saving…' : 'Download manifest'}
        </button>
        {running ? (
          <button type="button" onClick={() => running.abort()}>
            Cancel
          </button>
        ) : null}
        <span class="muted small manifest-progress" role="status" aria-live="polite">
          {progress && running ? `${plural(progress.lines, 'line')} written (${formatBytes(progress.bytes)}, ${plural(progress.pages, 'page')})` : ''}
          {done ? `Saved ${plural(done.progress.lines, 'line')} (${formatBytes(done.progress.bytes)}) ${done.mode === 'file-system-access' ? 'to the file you chose' : 'as a download'}.` : ''}
        </span>
      </div>
      <ErrorNotice error={error} action="Downloading the manifest" />
    </section>
  );
}
