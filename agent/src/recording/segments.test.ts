import { describe, expect, it } from 'vitest';
import { segmentsFromSteps } from './segments.js';

const T0 = 1_000_000;
const step = (ms: number, id: string | null, name: string | null = id && id.toUpperCase()) => ({ at: T0 + ms, subtask_id: id, subtask_name: name });

describe('segmentsFromSteps', () => {
  it('has no segments without steps', () => {
    expect(segmentsFromSteps([], T0, T0 + 5000)).toEqual([]);
  });

  it('opens a segment per subtask, each ending at the next step or the end', () => {
    expect(segmentsFromSteps([step(0, 'a'), step(1500, 'b')], T0, T0 + 4000)).toEqual([
      { segment_index: 0, subtask_id: 'a', subtask_name: 'A', start_offset_s: 0, end_offset_s: 1.5 },
      { segment_index: 1, subtask_id: 'b', subtask_name: 'B', start_offset_s: 1.5, end_offset_s: 4 },
    ]);
  });

  it('merges repeats, leaves gaps for cleared subtasks, drops zero-length ones, and sorts by time', () => {
    const steps = [step(3000, 'c'), step(0, 'a'), step(500, 'a'), step(1000, null), step(2000, 'b'), step(2000, 'x')];
    expect(segmentsFromSteps(steps, T0, T0 + 3500)).toEqual([
      { segment_index: 0, subtask_id: 'a', subtask_name: 'A', start_offset_s: 0, end_offset_s: 1 },
      { segment_index: 1, subtask_id: 'x', subtask_name: 'X', start_offset_s: 2, end_offset_s: 3 },
      { segment_index: 2, subtask_id: 'c', subtask_name: 'C', start_offset_s: 3, end_offset_s: 3.5 },
    ]);
  });

  it('clamps steps outside the recording to its bounds', () => {
    expect(segmentsFromSteps([step(-500, 'a'), step(9000, 'b')], T0, T0 + 2000)).toEqual([
      { segment_index: 0, subtask_id: 'a', subtask_name: 'A', start_offset_s: 0, end_offset_s: 2 },
    ]);
  });

  it('a subtask with a name but no id is still a segment', () => {
    expect(segmentsFromSteps([step(0, null, 'Wipe')], T0, T0 + 1000)).toEqual([
      { segment_index: 0, subtask_id: null, subtask_name: 'Wipe', start_offset_s: 0, end_offset_s: 1 },
    ]);
  });
});
