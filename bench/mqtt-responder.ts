/**
 * The raw responder of bench/commands.ts: a plain mqtt.js client in its own process (as the
 * agent is in the simulator's) that answers every command on `bench/raw/+/cmd` at once on the
 * matching `…/cmd/reply`, QoS 1 both ways like the robot link, with a reply shaped like a robot's.
 * (Its own topic root: on `fleet/v1/robots/+/cmd` it would also answer the real robots' commands.)
 * No parsing beyond the cmd_id, no storage: the floor a request/response can reach.
 * Usage: mqtt-responder.ts <mqtt-url> [--nodelay]; prints `{"ready":true}` once subscribed.
 * `--nodelay` sets TCP_NODELAY on its socket (mqtt.js does not by default).
 */
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import type * as MqttModule from 'mqtt';

const fromCloud = createRequire(new URL('../cloud/package.json', import.meta.url));
const mqtt = ((await import(pathToFileURL(fromCloud.resolve('mqtt')).href)) as { default: typeof MqttModule }).default;

const url = process.argv[2];
if (!url) throw new Error('usage: mqtt-responder.ts <mqtt-url> [--nodelay]');
const client = await mqtt.connectAsync(url, { protocolVersion: 4, clientId: `raw_responder_${process.pid}`, clean: true, reconnectPeriod: 0 });
if (process.argv.includes('--nodelay')) (client.stream as { setNoDelay?: (on: boolean) => void }).setNoDelay?.(true);
client.on('message', (topic, payload) => {
  const robotId = topic.split('/')[2] ?? '';
  const { cmd_id, command } = JSON.parse(payload.toString('utf8')) as { cmd_id: string; command: string };
  const reply = { cmd_id, ok: true, result: { stack: 'running', autonomous: false, pose: 'unknown', cmd_id, command, robot_id: robotId, ok: true } };
  client.publish(`${topic}/reply`, JSON.stringify(reply), { qos: 1 });
});
await client.subscribeAsync('bench/raw/+/cmd', { qos: 1 });
process.stdout.write(`${JSON.stringify({ ready: true })}\n`);

const stop = () => {
  client.end(false, {}, () => process.exit(0));
};
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
