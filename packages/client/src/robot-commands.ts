/** The robot command routes, `POST /v1/robots/{id}/<action>`: each waits for the robot's answer. */
export type RobotCommandAction =
  | 'go-home'
  | 'go-to-start'
  | 'start-autonomous'
  | 'stop-autonomous'
  | 'stack/start'
  | 'stack/stop'
  | 'stack/status'
  | 'episodes/start'
  | 'episodes/finish'
  | 'episodes/fail'
  | 'episodes/discard';

export const ROBOT_COMMAND_ACTIONS: readonly RobotCommandAction[] = [
  'go-home', 'go-to-start', 'start-autonomous', 'stop-autonomous', 'stack/start', 'stack/stop', 'stack/status',
  'episodes/start', 'episodes/finish', 'episodes/fail', 'episodes/discard',
];

const COMMAND_PATH = new RegExp(`/v1/robots/[^/]+/(?:${ROBOT_COMMAND_ACTIONS.map((a) => a.replace('/', '\\/')).join('|')})$`);

/** Whether a request path is a robot command (the transport retries those by their own rule). */
export function isRobotCommandPath(path: string): boolean {
  return COMMAND_PATH.test(path);
}
