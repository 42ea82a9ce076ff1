import { accessSync, constants, statSync } from 'node:fs';
import { delimiter, join } from 'node:path';

/**
 * Finding the programs a config names (recorders, actions, an import's stop program) the way
 * `spawn` will, so that `fleet-agent config check` reports a missing one before the agent connects.
 */

/** Why `file` cannot be run as a program, or null when it can (an existing executable file). */
export function executableProblem(file: string): string | null {
  try {
    if (!statSync(file).isFile()) return `${file} is not a file`;
  } catch {
    return `${file} does not exist`;
  }
  try {
    accessSync(file, constants.X_OK);
  } catch {
    return `${file} is not executable`;
  }
  return null;
}

/** `program` as `spawn` finds it: itself when it holds a slash, else the first executable file of that name on `path`; undefined when there is none. */
export function resolveProgram(program: string, path: string): string | undefined {
  const candidates = program.includes('/') ? [program] : path.split(delimiter).filter((d) => d !== '').map((d) => join(d, program));
  return candidates.find((c) => executableProblem(c) === null);
}
