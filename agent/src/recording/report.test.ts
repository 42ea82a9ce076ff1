import { EpisodeReportSchema } from '@fleet/protocol';
import { afterEach, describe, expect, it } from 'vitest';
import { openTestMachine, removeTempDirs, type TestMachine } from '../test-support.js';
import { toEpisodeReport } from './report.js';

const open: TestMachine[] = [];
afterEach(async () => {
  for (const t of open.splice(0)) await t.close();
  await removeTempDirs();
});

describe('episode report', () => {
  it('every kind of finished episode matches the protocol report the cloud ingests', async () => {
    const first = await openTestMachine();
    await first.machine.setContext({ task_id: 't', subtask_id: 's1', subtask_name: 'One', eval_id: 'e', session_name: 'n' });
    for (const verb of ['finish', 'fail', 'discard'] as const) {
      await first.machine.start();
      first.scheduler.advance(700);
      await first.machine.setContext({ subtask_id: 's2', subtask_name: 'Two' });
      first.scheduler.advance(300);
      await first.machine.apply(verb);
      await first.machine.whenSettled();
    }
    await first.machine.start();
    first.scheduler.advance(5000);
    await first.recorder.settled();
    // kill -9, then the next start finalizes it as interrupted.
    const second = await openTestMachine({ dataDir: first.dataDir, clock: first.clock, robotId: first.robotId });
    open.push(second, first);
    const episodes = await second.store.episodes.list();
    expect(episodes.map((e) => [e.outcome, e.interrupted])).toEqual([
      ['success', false],
      ['failure', false],
      ['discarded', false],
      ['failure', true],
    ]);
    for (const e of episodes) {
      const report = EpisodeReportSchema.parse(toEpisodeReport(e));
      expect(report).not.toHaveProperty('robot_id');
      expect(report.manifest).toEqual(e.manifest);
      expect(report.interrupted ?? false).toBe(e.interrupted);
    }
    expect(toEpisodeReport(episodes[0]!).segments.map((s) => s.subtask_id)).toEqual(['s1', 's2']);
  });
});
