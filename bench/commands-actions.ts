/**
 * The configured-actions rows of `npm run bench -- commands`: `POST /v1/robots/{id}/stack/status`
 * answered by a program the agent's config maps to it (a tiny sh script, so each command costs a
 * fork and exec of /bin/sh, the JSON on its stdin and stdout, and its exit), against the same
 * command answered in-process by the simulated robot. Both robots are real `fleet-agent start`
 * processes on one cloud (embedded broker), measured in the same run; only what answers differs.
 */
import { chmod, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { makeTempDir, type CloudProcess } from '../test/support/cloud.js';
import { startAgentProcess } from '../test/support/robots.js';
import type { LoopFigures } from './lib/closed-loop.js';

/** measureV1 of bench/commands.ts: [1 in flight, N in flight] against the robots given. */
type MeasureV1 = (label: string, cloud: CloudProcess, robots: readonly string[]) => Promise<LoopFigures[]>;

export interface ActionsFigures {
  inProcess: LoopFigures[];
  program: LoopFigures[];
}

export async function measureConfiguredActions(cloud: CloudProcess, measure: MeasureV1, log: (msg: string) => void): Promise<ActionsFigures> {
  await using dir = await makeTempDir('fa-bench-act-');
  const program = join(dir.path, 'stack-status');
  // Reads its request (a builtin, no extra exec) and answers what the simulated robot would.
  await writeFile(program, `#!/bin/sh\nread -r request || true\nprintf '{"stack": "running", "autonomous": false, "pose": "unknown"}'\n`);
  await chmod(program, 0o755);
  const config = join(dir.path, 'agent.yaml');
  await writeFile(config, `actions:\n  stack.status:\n    program: [${program}]\n`);
  await using simulated = await startAgentProcess(cloud, { simulate: true, logLevel: 'warn' });
  await using configured = await startAgentProcess(cloud, { simulate: false, logLevel: 'warn', args: ['--config', config] });
  log('configured actions: measuring stack.status answered in-process (simulated robot)');
  const inProcess = await measure('/v1 stack/status, in-process (simulated robot)', cloud, [simulated.robotId]);
  log('configured actions: measuring stack.status answered by a configured sh program');
  const byProgram = await measure('/v1 stack/status, configured sh program', cloud, [configured.robotId]);
  return { inProcess, program: byProgram };
}
