import { RefusalError } from './errors.js';

/** The robot commands that are not episode verbs (spec: Robot commands). */
export const ACTION_COMMANDS = ['go_home', 'go_to_start', 'start_autonomous', 'stop_autonomous', 'stack.start', 'stack.stop', 'stack.status'] as const;
export type ActionCommand = (typeof ACTION_COMMANDS)[number];

export function isActionCommand(command: string): command is ActionCommand {
  return (ACTION_COMMANDS as readonly string[]).includes(command);
}

/** Actions that only read the robot's state: running one twice changes nothing. */
const READ_ONLY_ACTIONS: ReadonlySet<ActionCommand> = new Set(['stack.status']);

export function isReadOnlyAction(command: ActionCommand): boolean {
  return READ_ONLY_ACTIONS.has(command);
}

/**
 * What the robot does for the non-episode commands. A real robot plugs in its motion and
 * software stack here. Each method resolves with the command-specific result fields, or throws
 * a {@link RefusalError} (`invalid_state` when the robot cannot do it now, `failed` when it
 * tried and could not).
 */
export interface RobotActions {
  goHome(): Promise<Record<string, unknown>>;
  goToStart(): Promise<Record<string, unknown>>;
  startAutonomous(): Promise<Record<string, unknown>>;
  stopAutonomous(): Promise<Record<string, unknown>>;
  stackStart(): Promise<Record<string, unknown>>;
  stackStop(): Promise<Record<string, unknown>>;
  stackStatus(): Promise<Record<string, unknown>>;
}

/** Runs `command` on `actions`. */
export function runAction(actions: RobotActions, command: ActionCommand): Promise<Record<string, unknown>> {
  switch (command) {
    case 'go_home':
      return actions.goHome();
    case 'go_to_start':
      return actions.goToStart();
    case 'start_autonomous':
      return actions.startAutonomous();
    case 'stop_autonomous':
      return actions.stopAutonomous();
    case 'stack.start':
      return actions.stackStart();
    case 'stack.stop':
      return actions.stackStop();
    case 'stack.status':
      return actions.stackStatus();
  }
}

export type SimulatedPose = 'home' | 'start' | 'unknown';

export interface SimulatedRobotState {
  pose: SimulatedPose;
  autonomous: boolean;
  stack: 'running' | 'stopped';
}

/**
 * A robot that only keeps state: the software stack runs or not, autonomy is on or off, the arm
 * is at home, at the start pose, or unknown. Motion and autonomy need the stack running; moving
 * while autonomous is refused (stop autonomy first); the stack cannot stop under autonomy.
 * Starts with the stack running, autonomy off, pose unknown.
 */
export class SimulatedRobotActions implements RobotActions {
  private s: SimulatedRobotState;

  constructor(initial: Partial<SimulatedRobotState> = {}) {
    this.s = { pose: 'unknown', autonomous: false, stack: 'running', ...initial };
  }

  get state(): Readonly<SimulatedRobotState> {
    return { ...this.s };
  }

  async goHome(): Promise<Record<string, unknown>> {
    this.requireMovable('go home');
    this.s.pose = 'home';
    return { pose: this.s.pose };
  }

  async goToStart(): Promise<Record<string, unknown>> {
    this.requireMovable('go to the start pose');
    this.s.pose = 'start';
    return { pose: this.s.pose };
  }

  async startAutonomous(): Promise<Record<string, unknown>> {
    if (this.s.stack !== 'running') throw new RefusalError('invalid_state', 'cannot start autonomous mode while the stack is stopped');
    if (this.s.autonomous) throw new RefusalError('invalid_state', 'autonomous mode is already on');
    this.s.autonomous = true;
    return { autonomous: true };
  }

  async stopAutonomous(): Promise<Record<string, unknown>> {
    if (!this.s.autonomous) throw new RefusalError('invalid_state', 'autonomous mode is not on');
    this.s.autonomous = false;
    return { autonomous: false };
  }

  async stackStart(): Promise<Record<string, unknown>> {
    if (this.s.stack === 'running') throw new RefusalError('invalid_state', 'the stack is already running');
    this.s.stack = 'running';
    return { stack: this.s.stack };
  }

  async stackStop(): Promise<Record<string, unknown>> {
    if (this.s.stack === 'stopped') throw new RefusalError('invalid_state', 'the stack is already stopped');
    if (this.s.autonomous) throw new RefusalError('invalid_state', 'cannot stop the stack while autonomous mode is on');
    this.s.stack = 'stopped';
    return { stack: this.s.stack };
  }

  async stackStatus(): Promise<Record<string, unknown>> {
    return { stack: this.s.stack, autonomous: this.s.autonomous, pose: this.s.pose };
  }

  private requireMovable(what: string): void {
    if (this.s.stack !== 'running') throw new RefusalError('invalid_state', `cannot ${what} while the stack is stopped`);
    if (this.s.autonomous) throw new RefusalError('invalid_state', `cannot ${what} while autonomous mode is on`);
  }
}
