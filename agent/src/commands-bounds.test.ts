import { afterEach, expect, it } from 'vitest';
import { COMMAND_ARGS_LIMITS, MAX_COMMAND_MESSAGE_BYTES } from '@fleet/protocol';
import type { Agent } from './daemon.js';
import { commandPayload, removeTempDirs, startTestAgent } from './test-support.js';

const running: Agent[] = [];
afterEach(async () => {
  for (const a of running.splice(0)) await a.stop();
  await removeTempDirs();
});

it('drops a command nested beyond the JSON bounds without acting, and still runs the next one', async () => {
  const t = await startTestAgent();
  running.push(t.agent);
  const sentAt = t.clock.now();
  const deep = `{"cmd_id":"c-deep","command":"episodes.start","sent_at":${sentAt},"args":{"metadata":{"x":${'['.repeat(5000)}${']'.repeat(5000)}}}}`;
  expect(await t.agent.commands.handlePayload(deep)).toBeUndefined();
  expect(t.agent.machine.state).toBe('idle');
  expect(t.logs.messages()).toContain('dropped malformed command (beyond the JSON bounds)');
  const ok = await t.agent.commands.handlePayload(JSON.stringify({ cmd_id: 'c-ok', command: 'episodes.start', sent_at: sentAt }));
  expect(ok).toMatchObject({ ok: true });
  expect(t.agent.machine.state).toBe('recording');
});

/** `{metadata: {pad, deep}}` whose innermost array sits at `depth` (args being depth 1), `bytes` long as JSON. */
function argsAt(depth: number, bytes: number): Record<string, unknown> {
  let deep: unknown = [];
  for (let d = depth; d > 3; d--) deep = [deep];
  const args = { metadata: { pad: '', deep } };
  args.metadata.pad = 'x'.repeat(bytes - JSON.stringify(args).length);
  return args;
}

it('runs a command whose args sit exactly at the bound the API lets through (depth and size), under the longest cmd_id', async () => {
  const t = await startTestAgent();
  running.push(t.agent);
  // The longest envelope: 255 characters that JSON escapes to six bytes each.
  const cmdId = '\u0001'.repeat(255);
  const payload = commandPayload(t.clock, cmdId, 'episodes.start', argsAt(COMMAND_ARGS_LIMITS.maxDepth, COMMAND_ARGS_LIMITS.maxBytes));
  expect(Buffer.byteLength(payload)).toBeLessThanOrEqual(MAX_COMMAND_MESSAGE_BYTES);
  expect(await t.agent.commands.handlePayload(payload)).toMatchObject({ ok: true });
  expect(t.agent.machine.state).toBe('recording');
});

it('drops a command whose args are over the size bound, even though the whole message is small enough', async () => {
  const t = await startTestAgent();
  running.push(t.agent);
  const payload = commandPayload(t.clock, 'c-big', 'episodes.start', argsAt(4, COMMAND_ARGS_LIMITS.maxBytes + 1));
  expect(Buffer.byteLength(payload)).toBeLessThanOrEqual(MAX_COMMAND_MESSAGE_BYTES);
  expect(await t.agent.commands.handlePayload(payload)).toBeUndefined();
  expect(t.agent.machine.state).toBe('idle');
  expect(t.logs.messages()).toContain('dropped malformed command (arguments beyond the command bounds)');
});
