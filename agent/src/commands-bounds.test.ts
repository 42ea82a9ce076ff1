import { afterEach, expect, it } from 'vitest';
import type { Agent } from './daemon.js';
import { removeTempDirs, startTestAgent } from './test-support.js';

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
