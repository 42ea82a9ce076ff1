import { useEffect, useRef, useState } from 'preact/hooks';
import type { CreateRoutingRuleRequest, Destination, RoutingRule } from '@fleet/client';
import { needs } from '../session.js';
import { useConsole } from '../ui/context.js';
import { useAction, type Async } from '../ui/hooks.js';
import { Field, Pill, ScopedButton } from '../ui/components.js';
import { ConfirmAction, CreateForm, ResourceList, ResourceTable, fieldIssue, useCreateFlow, useDestructive, type Column } from '../ui/resource-page.js';
import { Ago, MATCH_FIELDS, Section } from './admin-shared.js';
import { OUTCOMES } from '../ui/episodes-filter.js';
import { destinationLabel } from './sync-destinations.js';

const COLUMNS: readonly Column[] = [['#', 'num'], 'Matches', 'Destination', ['Created', 'hide-narrow']];

/**
 * Routing rules in order: the first matching rule decides where an episode syncs. Reordered with
 * the up/down buttons (or by dragging a row); each move is one `PUT /v1/routing-rules/order`
 * with every rule, and the answer is the new order.
 */
export function RoutingRules({ admin, list, destinations }: { admin: boolean; list: Async<RoutingRule[] | null>; destinations: Destination[] | undefined }) {
  const { session } = useConsole();
  const [local, setLocal] = useState<RoutingRule[] | null>(null);
  const [said, setSaid] = useState('');
  const flow = useCreateFlow(() => {
    setSaid('Rule added at the end.');
    list.reload();
  });
  const [dragged, setDragged] = useState<string | null>(null);
  const focusAfter = useRef<{ id: string; dir: 'up' | 'down' } | null>(null);
  const order = useAction((ids: string[]) => session.client.routingRules.setOrder(ids));
  const remove = useDestructive(
    (r: RoutingRule) => session.client.routingRules.delete(r.id),
    () => {
      setSaid('Rule deleted.');
      list.reload();
    },
  );
  useEffect(() => setLocal(null), [list.data]);
  const rules = local ?? list.data ?? [];

  // Keyboard users keep their place: after a move, focus follows the moved rule's button.
  useEffect(() => {
    const f = focusAfter.current;
    if (!f) return;
    focusAfter.current = null;
    const row = document.querySelector(`[data-rule-id="${CSS.escape(f.id)}"]`);
    const btn = row?.querySelector<HTMLButtonElement>(`button.move-${f.dir}:not(:disabled)`) ?? row?.querySelector<HTMLButtonElement>('button.move-up:not(:disabled), button.move-down:not(:disabled)');
    btn?.focus();
  });

  if (!admin) return null;

  const move = async (ids: string[], movedId: string, dir: 'up' | 'down') => {
    // One reorder at a time: the next one is computed from this one's answer.
    if (order.busy) return;
    const before = rules;
    const byId = new Map(rules.map((r) => [r.id, r] as const));
    setLocal(ids.map((id, i) => ({ ...byId.get(id)!, position: i + 1 })));
    focusAfter.current = { id: movedId, dir };
    const answer = await order.run(ids);
    if (answer) {
      setLocal(answer.routing_rules);
      const pos = answer.routing_rules.findIndex((r) => r.id === movedId) + 1;
      setSaid(`Rule moved to position ${pos} of ${answer.routing_rules.length}.`);
    } else {
      setLocal(before);
      list.reload();
    }
  };
  const step = (i: number, delta: -1 | 1) => {
    const ids = rules.map((r) => r.id);
    const j = i + delta;
    if (j < 0 || j >= ids.length) return;
    [ids[i], ids[j]] = [ids[j]!, ids[i]!];
    void move(ids, rules[i]!.id, delta < 0 ? 'up' : 'down');
  };
  const dropOn = (targetId: string) => {
    const from = rules.findIndex((r) => r.id === dragged);
    const to = rules.findIndex((r) => r.id === targetId);
    setDragged(null);
    if (from < 0 || to < 0 || from === to) return;
    const ids = rules.map((r) => r.id);
    const [id] = ids.splice(from, 1);
    ids.splice(to, 0, id!);
    void move(ids, id!, to < from ? 'up' : 'down');
  };

  const dests = new Map((destinations ?? []).map((d) => [d.id, d] as const));
  const live = (destinations ?? []).filter((d) => !d.revoked_at);
  return (
    <Section
      title="Routing rules"
      id="rules-title"
      actions={
        flow.adding ? null : (
          <ScopedButton allowed={admin} why={needs('admin')} class="primary" onClick={flow.start} disabled={live.length === 0} title={live.length === 0 ? 'Add a destination first' : undefined}>
            Add a rule
          </ScopedButton>
        )
      }
    >
      <p class="muted small">
        For each episode the first matching rule, in this order, decides its destination. Once any rule exists only rules decide: an episode no rule matches stays on
        the robot (a rule added later picks up that backlog).
      </p>
      {list.data && rules.length === 0 ? <p class="empty">{noRulesWords(live)}</p> : null}
      {flow.adding ? (
        <CreateRule destinations={live} onCancel={flow.cancel} onCreated={() => flow.created()} />
      ) : null}
      <ResourceList
        list={list}
        count={rules.length}
        what="routing rules"
        polled
        errors={[
          [order.error, 'Reordering the rules'],
          [remove.error, 'Deleting the rule'],
        ]}
        notices={
          <p class="sr-only" role="status" aria-live="polite">
            {said}
          </p>
        }
      >
        <ResourceTable name="rules" columns={COLUMNS} actions="Order and actions">
          {rules.map((r, i) => {
            const d = dests.get(r.destination_id);
            return (
              <tr
                key={r.id}
                data-rule-id={r.id}
                draggable={!order.busy}
                class={`${dragged === r.id ? 'dragging' : ''}`}
                onDragStart={(e) => {
                  setDragged(r.id);
                  e.dataTransfer?.setData('text/plain', r.id);
                  if (e.dataTransfer) e.dataTransfer.effectAllowed = 'move';
                }}
                onDragEnd={() => setDragged(null)}
                onDragOver={(e) => {
                  if (dragged) e.preventDefault();
                }}
                onDrop={(e) => {
                  e.preventDefault();
                  dropOn(r.id);
                }}
              >
                <td class="num">
                  <span class="drag-handle" aria-hidden="true" title="Drag to reorder">
                    ⋮⋮
                  </span>{' '}
                  {i + 1}
                </td>
                <td>
                  <MatchWords match={r.match} />
                </td>
                <td>
                  {d ? <span title={d.url}>{destinationLabel(d)}</span> : <span class="mono small">{r.destination_id}</span>}
                  {d?.revoked_at ? (
                    <>
                      {' '}
                      <Pill tone="warn">revoked: matches nothing</Pill>
                    </>
                  ) : null}
                </td>
                <td class="hide-narrow">
                  <Ago iso={r.created_at} />
                </td>
                <td class="actions">
                  <div class="row nowrap">
                    <button type="button" class="move-up icon" onClick={() => step(i, -1)} disabled={i === 0} aria-label={`Move rule ${i + 1} up`}>
                      ↑
                    </button>
                    <button
                      type="button"
                      class="move-down icon"
                      onClick={() => step(i, 1)}
                      disabled={i === rules.length - 1}
                      aria-label={`Move rule ${i + 1} down`}
                    >
                      ↓
                    </button>
                    <button type="button" class="danger-outline" onClick={() => remove.ask(r)} aria-label={`Delete rule ${i + 1}`}>
                      Delete
                    </button>
                  </div>
                </td>
              </tr>
            );
          })}
        </ResourceTable>
      </ResourceList>
      <ConfirmAction action={remove} title="Delete this routing rule?" confirmLabel="Delete rule" danger>
        {(r) => (
          <>
            <p>Episodes it matched are routed by the remaining rules from now on; replicas already verified stay where they are.</p>
            <MatchWords match={r.match} />
          </>
        )}
      </ConfirmAction>
    </Section>
  );
}

function noRulesWords(live: Destination[]): string {
  if (live.length === 0) return 'No rules and no live destination: nothing syncs.';
  if (live.length === 1) return `No rules: with one live destination, every episode goes to ${destinationLabel(live[0]!)}.`;
  return `No rules and ${live.length} live destinations: nothing is routed until you add rules.`;
}

const LABELS: Record<string, string> = Object.fromEntries([...MATCH_FIELDS.map((f) => [f.field, f.label] as const), ['outcome', 'Outcome'], ['has_autonomous', 'Autonomous']]);

/** A rule's match in words: "Task id is a or b, and Outcome is success"; `{}` is every episode. */
export function MatchWords({ match }: { match: Record<string, string[]> }) {
  const entries = Object.entries(match);
  if (entries.length === 0) return <span class="muted">every episode</span>;
  return (
    <ul class="match-list">
      {entries.map(([k, vs]) => (
        <li key={k}>
          <span class="muted">{LABELS[k] ?? k}</span> is{' '}
          {vs.map((v, i) => (
            <span key={i}>
              {i > 0 ? <span class="muted"> or </span> : null}
              <code class="match-value">{v}</code>
            </span>
          ))}
        </li>
      ))}
    </ul>
  );
}

function CreateRule({ destinations, onCreated, onCancel }: { destinations: Destination[]; onCreated: () => void; onCancel: () => void }) {
  const { session } = useConsole();
  const [destinationId, setDestinationId] = useState(destinations[0]?.id ?? '');
  const [texts, setTexts] = useState<Record<string, string>>({});
  const [outcomes, setOutcomes] = useState<Set<string>>(new Set());
  const [autonomous, setAutonomous] = useState('');
  const create = useAction(() => session.client.routingRules.create(build()));
  const build = (): CreateRoutingRuleRequest => {
    const match: Record<string, string | string[]> = {};
    for (const f of MATCH_FIELDS) {
      const values = (texts[f.field] ?? '')
        .split(',')
        .map((v) => v.trim())
        .filter((v) => v !== '');
      if (values.length > 0) match[f.field] = values.length === 1 ? values[0]! : values;
    }
    if (outcomes.size > 0) match.outcome = [...outcomes];
    if (autonomous) match.has_autonomous = autonomous;
    return { destination_id: destinationId, match };
  };
  return (
    <CreateForm
      title="New routing rule"
      heading="New rule"
      inSection
      create={create}
      onCreated={() => onCreated()}
      onCancel={onCancel}
      failed="Adding the rule"
      submitLabel="Add rule at the end"
      busyLabel="Adding…"
      ready={destinationId !== ''}
    >
      <p class="muted small">Every filled field must match; a field with several values (separated by commas) matches any of them. Leave all empty to match every episode.</p>
      <Field label="Send matching episodes to" id="rule-destination" error={fieldIssue(create.error, '/destination_id')}>
        <select id="rule-destination" value={destinationId} onChange={(e) => setDestinationId(e.currentTarget.value)} required>
          {destinations.map((d) => (
            <option key={d.id} value={d.id}>
              {destinationLabel(d)} ({d.id})
            </option>
          ))}
        </select>
      </Field>
      <div class="match-grid">
        {MATCH_FIELDS.map((f) => {
          const id = `rule-${f.field}`;
          return (
            <Field key={f.field} label={f.label} id={id} error={fieldIssue(create.error, `/match/${f.field}`)}>
              <input
                id={id}
                value={texts[f.field] ?? ''}
                placeholder={f.hint || 'any'}
                autoComplete="off"
                spellcheck={false}
                onInput={(e) => setTexts({ ...texts, [f.field]: e.currentTarget.value })}
              />
            </Field>
          );
        })}
        <Field label="Control mode" id="rule-has_autonomous" error={fieldIssue(create.error, '/match/has_autonomous')}>
          <select id="rule-has_autonomous" value={autonomous} onChange={(e) => setAutonomous(e.currentTarget.value)}>
            <option value="">any</option>
            <option value="true">with autonomy</option>
            <option value="false">without autonomy</option>
          </select>
        </Field>
      </div>
      <fieldset class="checks">
        <legend>Outcome (none checked: any)</legend>
        {OUTCOMES.map((o) => (
          <label key={o} class="check">
            <input
              type="checkbox"
              checked={outcomes.has(o)}
              onChange={(e) => {
                const next = new Set(outcomes);
                if (e.currentTarget.checked) next.add(o);
                else next.delete(o);
                setOutcomes(next);
              }}
            />{' '}
            {o}
          </label>
        ))}
      </fieldset>
    </CreateForm>
  );
}
