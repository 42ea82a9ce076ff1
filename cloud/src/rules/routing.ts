import type { RoutingMatchField } from '@fleet/protocol';
import type { DestinationRow, RoutingFacts, RoutingRuleRow } from '../store/shared/sync-types.js';

/**
 * Where an episode syncs, decided from its facts alone (spec, Routing rules):
 * 1. the first matching rule, in the configured order, wins;
 * 2. no rules and exactly one live destination: everything routes to it;
 * 3. once any rule exists only rules decide; an episode matching none stays local;
 * 4. several destinations and no rules: nothing routes.
 * A rule pointing at a revoked destination never matches (the next rule may); discarded episodes
 * have no files and never route. Returns the destination id, or null for "stays local".
 */
export function decideRoute(
  facts: RoutingFacts,
  rules: readonly Pick<RoutingRuleRow, 'destinationId' | 'match' | 'position'>[],
  destinations: readonly Pick<DestinationRow, 'id' | 'revokedAt'>[],
): string | null {
  if (facts.outcome === 'discarded') return null;
  const live = new Set(destinations.filter((d) => d.revokedAt === null).map((d) => d.id));
  if (rules.length === 0) return live.size === 1 ? [...live][0]! : null;
  const ordered = [...rules].sort((a, b) => a.position - b.position);
  for (const rule of ordered) {
    if (live.has(rule.destinationId) && matches(rule.match, facts)) return rule.destinationId;
  }
  return null;
}

/** Every field the rule names must match; a field matches when the fact's string form is one of its values. */
export function matches(match: Readonly<Record<string, readonly string[]>>, facts: RoutingFacts): boolean {
  for (const [field, values] of Object.entries(match)) {
    const fact = factString(facts, field as RoutingMatchField);
    if (fact === null || !values.includes(fact)) return false;
  }
  return true;
}

/** A fact as rules compare it: numbers and booleans in their usual string form; null matches nothing. */
function factString(facts: RoutingFacts, field: RoutingMatchField): string | null {
  switch (field) {
    case 'episode_seq':
      return String(facts.episode_seq);
    case 'has_autonomous':
      return facts.has_autonomous ? 'true' : 'false';
    case 'robot_id':
    case 'task_id':
    case 'recording_session_id':
    case 'episode_id':
    case 'outcome':
    case 'robot_platform':
      return facts[field];
    default:
      // A field the protocol does not know (an old row, a newer writer): the rule cannot match.
      return null;
  }
}

/**
 * A new order of the routing rules is accepted only as a permutation of the rules there are:
 * each of them named exactly once, nothing else.
 */
export function sameRuleSet(current: readonly string[], wanted: readonly string[]): boolean {
  const set = new Set(wanted);
  return set.size === wanted.length && set.size === current.length && current.every((id) => set.has(id));
}
