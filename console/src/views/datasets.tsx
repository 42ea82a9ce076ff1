import { useState } from 'preact/hooks';
import type { Dataset } from '@fleet/client';
import { useConsole } from '../ui/context.js';
import { useAction, useAsync } from '../ui/hooks.js';
import { ErrorNotice, Field, Link, Loading, PageHeader, Pill, ScopedButton } from '../ui/components.js';
import { formatTime, plural } from '../ui/format.js';
import { navigate } from '../router.js';
import { can, needs } from '../session.js';
import { describeFilter, issueAt, issuesOf, issueText } from '../ui/episodes-filter.js';

export function datasetState(d: Pick<Dataset, 'snapshot_at'>) {
  return d.snapshot_at ? <Pill tone="info">snapshot</Pill> : <Pill tone="ok">live</Pill>;
}

/**
 * `/console/datasets`: the organization's datasets, a page at a time (keyset; "Previous" goes back
 * through the cursors that led here), and a form to create one from a filter written as JSON (the
 * episodes page makes one from its filter in one step).
 */
export function DatasetsView(_props: object) {
  const { session } = useConsole();
  const [cursor, setCursor] = useState<string | null>(null);
  const [stack, setStack] = useState<(string | null)[]>([]);
  const list = useAsync((signal) => session.client.datasets.list({ ...(cursor ? { cursor } : {}), limit: 25, signal }), [cursor]);
  const mayWrite = can(session, 'data:write');
  const [showCreate, setShowCreate] = useState(false);

  return (
    <section class="datasets-page">
      <PageHeader title="Datasets">
        <ScopedButton allowed={mayWrite} why={needs('data:write')} class="primary" onClick={() => setShowCreate(!showCreate)} aria-expanded={showCreate}>
          New dataset
        </ScopedButton>
      </PageHeader>
      <p class="muted">
        A dataset is a named episode filter. While live, its members follow the filter; a snapshot pins them for good and makes the manifest a training pipeline reads. To make one from what you see, filter the <Link to="/episodes">episodes</Link> and choose "Create dataset from this filter".
      </p>
      {showCreate && mayWrite ? <CreateDataset onCancel={() => setShowCreate(false)} /> : null}

      {list.error ? <ErrorNotice error={list.error} action="Listing datasets" /> : null}
      {list.loading && !list.data ? <Loading label="Loading datasets" /> : null}
      {list.data ? (
        list.data.datasets.length === 0 ? (
          <p class="notice empty">{cursor ? 'No more datasets.' : 'No dataset yet.'}</p>
        ) : (
          <div class="table-wrap">
            <table class="datasets-table">
              <caption class="sr-only">Datasets</caption>
              <thead>
                <tr>
                  <th scope="col">Name</th>
                  <th scope="col">State</th>
                  <th scope="col">Filter</th>
                  <th scope="col" class="num">
                    Episodes
                  </th>
                  <th scope="col" class="hide-narrow">
                    Created
                  </th>
                </tr>
              </thead>
              <tbody>
                {list.data.datasets.map((d) => (
                  <tr key={d.id} data-dataset={d.id}>
                    <td>
                      <Link to={`/datasets/${encodeURIComponent(d.id)}`}>{d.name}</Link>
                      <div class="muted small">
                        <code>{d.id}</code>
                      </div>
                    </td>
                    <td>{datasetState(d)}</td>
                    <td class="filter">
                      <span class="mono small">{describeFilter(d.filter)}</span>
                    </td>
                    <td class="num">{d.episode_count === null ? <span class="muted small">follows the filter</span> : d.episode_count.toLocaleString()}</td>
                    <td class="hide-narrow">
                      <time dateTime={d.created_at}>{formatTime(d.created_at)}</time>
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        )
      ) : null}
      <nav class="pager" aria-label="Pages">
        <button
          type="button"
          disabled={stack.length === 0}
          onClick={() => {
            setCursor(stack[stack.length - 1] ?? null);
            setStack(stack.slice(0, -1));
          }}
        >
          Previous
        </button>
        <span class="muted small" aria-live="polite">
          {list.data ? `Page ${stack.length + 1} · ${plural(list.data.datasets.length, 'dataset')}` : ''}
        </span>
        <button
          type="button"
          disabled={!list.data?.cursor || list.loading}
          onClick={() => {
            if (!list.data?.cursor) return;
            setStack([...stack, cursor]);
            setCursor(list.data.cursor);
          }}
        >
          Next
        </button>
      </nav>
    </section>
  );
}

function CreateDataset({ onCancel }: { onCancel: () => void }) {
  const { session } = useConsole();
  const [name, setName] = useState('');
  const [description, setDescription] = useState('');
  const [filterText, setFilterText] = useState('{\n  "outcome": "success"\n}');
  const [parseError, setParseError] = useState<string | undefined>(undefined);
  // The filter is the user's JSON: the API checks its keys and values and answers with the
  // issues shown under the field, so it goes as typed here without a second check.
  const create = useAction((filter: Record<string, unknown>) =>
    session.client.datasets.create({
      name: name.trim(),
      ...(description.trim() ? { description: description.trim() } : {}),
      filter: filter as Parameters<typeof session.client.datasets.create>[0]['filter'],
    }),
  );
  const nameErr = issueAt(create.error, 'name');
  const descErr = issueAt(create.error, 'description');
  const filterIssues = issuesOf(create.error).filter((i) => i.path[0] === 'filter');
  const filterErr = parseError ?? (filterIssues.length > 0 ? filterIssues.map((i) => `${i.path.slice(1).join('.') || 'filter'}: ${issueText(i)}`).join('; ') : undefined);
  return (
    <form
      class="panel create-dataset"
      aria-label="New dataset"
      onSubmit={(e) => {
        e.preventDefault();
        let filter: unknown;
        try {
          filter = JSON.parse(filterText);
        } catch {
          setParseError('not valid JSON');
          return;
        }
        if (typeof filter !== 'object' || filter === null || Array.isArray(filter)) {
          setParseError('must be a JSON object of filter keys, e.g. {"task_id": "pick"}');
          return;
        }
        setParseError(undefined);
        void create.run(filter as Record<string, unknown>).then((ds) => {
          if (ds) navigate(`/datasets/${encodeURIComponent(ds.id)}`);
        });
      }}
    >
      <h2>New dataset</h2>
      <Field label="Name" id="ds-name" error={nameErr}>
        <input id="ds-name" value={name} onInput={(e) => setName(e.currentTarget.value)} required maxLength={128} autoComplete="off" aria-invalid={nameErr ? true : undefined} />
      </Field>
      <Field label="Description (optional)" id="ds-description" error={descErr}>
        <input id="ds-description" value={description} onInput={(e) => setDescription(e.currentTarget.value)} maxLength={4096} autoComplete="off" />
      </Field>
      <Field
        label="Filter (JSON)"
        id="ds-filter"
        error={filterErr}
        hint='The episode list filters: robot_id, task_id, subtask_id, operator_id, control_mode, policy_version_id, eval_id, outcome, from, to, sync_state, destination_id, "metadata.<key>", "annotation.<key>". {} takes every episode.'
      >
        <textarea id="ds-filter" value={filterText} onInput={(e) => (setFilterText(e.currentTarget.value), setParseError(undefined))} rows={5} spellcheck={false} aria-invalid={filterErr ? true : undefined} aria-describedby="ds-filter-hint" />
      </Field>
      {nameErr || descErr || filterErr ? null : <ErrorNotice error={create.error} action="Creating the dataset" />}
      <div class="row">
        <button type="submit" class="primary" disabled={create.busy}>
          {create.busy ? 'Creating…' : 'Create dataset'}
        </button>
        <button type="button" onClick={onCancel}>
          Cancel
        </button>
      </div>
    </form>
  );
}
