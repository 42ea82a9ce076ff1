import { describe, expect, it } from 'vitest';
import { SimulatedRobotActions, type ActionCommand, type RobotActions } from './actions.js';

const runAction = (a: RobotActions, command: ActionCommand) => a.run({ command, args: {}, robot_id: 'rbt_aaaaaaaaaaaaaaaaaaaaaaaaaa', cmd_id: 'cmd_1' });

describe('SimulatedRobotActions', () => {
  it('starts with the stack running, autonomy off, pose unknown; stack.status reports it', async () => {
    const a = new SimulatedRobotActions();
    expect(await runAction(a, 'stack.status')).toEqual({ stack: 'running', autonomous: false, pose: 'unknown' });
  });

  it('moves, toggles autonomy and the stack, and stack.status follows', async () => {
    const a = new SimulatedRobotActions();
    expect(await runAction(a, 'go_home')).toEqual({ pose: 'home' });
    expect(await runAction(a, 'go_to_start')).toEqual({ pose: 'start' });
    await runAction(a, 'start_autonomous');
    expect(await runAction(a, 'stack.status')).toEqual({ stack: 'running', autonomous: true, pose: 'start' });
    await runAction(a, 'stop_autonomous');
    await runAction(a, 'stack.stop');
    expect(await runAction(a, 'stack.status')).toEqual({ stack: 'stopped', autonomous: false, pose: 'start' });
    await runAction(a, 'stack.start');
    expect(a.state.stack).toBe('running');
  });

  it('refuses with invalid_state and keeps its state', async () => {
    const stopped = new SimulatedRobotActions({ stack: 'stopped' });
    for (const cmd of ['start_autonomous', 'go_home', 'go_to_start', 'stack.stop', 'stop_autonomous'] as const) {
      await expect(runAction(stopped, cmd)).rejects.toMatchObject({ code: 'invalid_state' });
    }
    expect(stopped.state).toEqual({ stack: 'stopped', autonomous: false, pose: 'unknown' });
    const auto = new SimulatedRobotActions({ autonomous: true });
    for (const cmd of ['start_autonomous', 'go_home', 'stack.stop', 'stack.start'] as const) {
      await expect(runAction(auto, cmd)).rejects.toMatchObject({ code: 'invalid_state' });
    }
    expect(auto.state).toEqual({ stack: 'running', autonomous: true, pose: 'unknown' });
  });
});
