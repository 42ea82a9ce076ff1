import { describe, expect, it } from 'vitest';
import { applyContextPatch, emptyOperatorContext } from './operator-context.js';

describe('operator context patches', () => {
  const set = applyContextPatch(emptyOperatorContext(), {
    task_id: 'task_fold_towel',
    task_name: 'Fold a towel',
    subtask_id: 'flatten',
    subtask_name: 'Flatten',
    operator_id: 'op_1',
    operator_name: 'Ada',
    session_name: 'morning',
  });

  it('a new id without a name drops the name of the old id: a name belongs to its id', () => {
    expect(applyContextPatch(set, { task_id: 'stack-blocks' })).toMatchObject({ task_id: 'stack-blocks', task_name: null, subtask_id: 'flatten', subtask_name: 'Flatten' });
    expect(applyContextPatch(set, { subtask_id: 'grasp' })).toMatchObject({ subtask_id: 'grasp', subtask_name: null, task_name: 'Fold a towel' });
    expect(applyContextPatch(set, { operator_id: 'bob' })).toMatchObject({ operator_id: 'bob', operator_name: null, session_name: 'morning' });
  });

  it('keeps the name when the id is set with one, set to the same id, or not touched', () => {
    expect(applyContextPatch(set, { task_id: 'stack-blocks', task_name: 'Stack blocks' })).toMatchObject({ task_id: 'stack-blocks', task_name: 'Stack blocks' });
    expect(applyContextPatch(set, { task_id: 'task_fold_towel' })).toMatchObject({ task_name: 'Fold a towel' });
    expect(applyContextPatch(set, { task_name: 'Fold the towel' })).toMatchObject({ task_id: 'task_fold_towel', task_name: 'Fold the towel' });
    expect(applyContextPatch(set, { session_name: 'evening' })).toEqual({ ...set, session_name: 'evening' });
    expect(applyContextPatch(set, { task_id: null })).toMatchObject({ task_id: null, task_name: null });
  });
});
