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
 * What an action is given: the command, the API body that came with it (`{}` when none), and
 * which robot and command id it is for. A configured program reads exactly this as JSON on stdin
 * and an endpoint as the body of its POST (configured-actions.ts).
 */
export interface ActionRequest {
  command: ActionCommand;
  args: Record<string, unknown>;
  robot_id: string;
  cmd_id: string;
}

/**
 * What the robot does for the non-episode commands: the agent's config maps each one to a
 * program or a robot-local HTTP endpoint (configured-actions.ts), or to the in-agent
 * {@link SimulatedRobotActions}. `run` resolves with the command-specific result fields, or
 * throws a {@link RefusalError}: the robot's decline (`invalid_state` when it cannot do it now,
 * `invalid_args`, `failed` when it tried and could not, `not_configured`, `action_timeout`).
 * Anything else it throws is answered `failed` with its message.
 */
export interface RobotActions {
  run(request: ActionRequest): Promise<Record<string, unknown>>;
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

  /** One method per command, so that a test robot can override one of them. */
  run(request: ActionRequest): Promise<Record<string, unknown>> {
    switch (request.command) {
      case 'go_home':
        return this.goHome(request);
      case 'go_to_start':
        return this.goToStart(request);
      case 'start_autonomous':
        return this.startAutonomous(request);
      case 'stop_autonomous':
        return this.stopAutonomous(request);
      case 'stack.start':
        return this.stackStart(request);
      case 'stack.stop':
        return this.stackStop(request);
      case 'stack.status':
        return this.stackStatus(request);
    }
  }

  get state(): Readonly<SimulatedRobotState> {
    return { ...this.s };
  }

  async goHome(_request?: ActionRequest): Promise<Record<string, unknown>> {
    this.requireMovable('go home');
    this.s.pose = 'home';
    return { pose: this.s.pose };
  }

  async goToStart(_request?: ActionRequest): Promise<Record<string, unknown>> {
    this.requireMovable('go to the start pose');
    this.s.pose = 'start';
    return { pose: this.s.pose };
  }

  async startAutonomous(_request?: ActionRequest): Promise<Record<string, unknown>> {
    if (this.s.stack !== 'running') throw new RefusalError('invalid_state', 'cannot start autonomous mode while the stack is stopped');
    if (this.s.autonomous) throw new RefusalError('invalid_state', 'autonomous mode is already on');
    this.s.autonomous = true;
    return { autonomous: true };
  }

  async stopAutonomous(_request?: ActionRequest): Promise<Record<string, unknown>> {
    if (!this.s.autonomous) throw new RefusalError('invalid_state', 'autonomous mode is not on');
    this.s.autonomous = false;
    return { autonomous: false };
  }

  async stackStart(_request?: ActionRequest): Promise<Record<string, unknown>> {
    if (this.s.stack === 'running') throw new RefusalError('invalid_state', 'the stack is already running');
    this.s.stack = 'running';
    return { stack: this.s.stack };
  }

  async stackStop(_request?: ActionRequest): Promise<Record<string, unknown>> {
    if (this.s.stack === 'stopped') throw new RefusalError('invalid_state', 'the stack is already stopped');
    if (this.s.autonomous) throw new RefusalError('invalid_state', 'cannot stop the stack while autonomous mode is on');
    this.s.stack = 'stopped';
    return { stack: this.s.stack };
  }

  async stackStatus(_request?: ActionRequest): Promise<Record<string, unknown>> {
    return { stack: this.s.stack, autonomous: this.s.autonomous, pose: this.s.pose };
  }

  private requireMovable(what: string): void {
    if (this.s.stack !== 'running') throw new RefusalError('invalid_state', `cannot ${what} while the stack is stopped`);
    if (this.s.autonomous) throw new RefusalError('invalid_state', `cannot ${what} while autonomous mode is on`);
  }
}
