import type { EpisodeSegment, SubtaskStep } from '../rules/episode-facts.js';

/**
 * The episode's subtask timeline from the steps the operator took while recording. Each step
 * with a subtask opens a segment that lasts until the next step or the end; a step that clears
 * the subtask leaves a gap; a step repeating the current subtask continues its segment; a step
 * superseded at the same instant leaves no zero-length segment. Offsets are seconds from
 * `startedAt` (decisions.md, Episodes), at millisecond resolution.
 */
export function segmentsFromSteps(steps: readonly SubtaskStep[], startedAt: number, endedAt: number): EpisodeSegment[] {
  const clamp = (t: number) => Math.min(Math.max(t, startedAt), endedAt);
  const spans: { subtask_id: string | null; subtask_name: string | null; start: number; end: number }[] = [];
  let open: (typeof spans)[number] | undefined;
  for (const step of [...steps].sort((a, b) => a.at - b.at)) {
    const at = clamp(step.at);
    if (open && open.subtask_id === step.subtask_id && open.subtask_name === step.subtask_name) continue;
    if (open) {
      open.end = at;
      spans.push(open);
      open = undefined;
    }
    if (step.subtask_id !== null || step.subtask_name !== null) {
      open = { subtask_id: step.subtask_id, subtask_name: step.subtask_name, start: at, end: endedAt };
    }
  }
  if (open) spans.push(open);
  return spans
    .filter((s) => s.end > s.start)
    .map((s, i) => ({
      segment_index: i,
      subtask_id: s.subtask_id,
      subtask_name: s.subtask_name,
      start_offset_s: (s.start - startedAt) / 1000,
      end_offset_s: (s.end - startedAt) / 1000,
    }));
}
