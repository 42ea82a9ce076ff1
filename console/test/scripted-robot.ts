/**
 * A robot the test scripts instead of an agent: enrolled with a one-use token through the API,
 * connected to the cloud's broker with the credentials it got, publishing outbox messages and
 * waiting for each acknowledgment. The console tests use it to index episodes they describe
 * exactly (times, annotations, manifests) without recording them.
 */
import mqtt, { type MqttClient } from 'mqtt';
import type { FleetClient } from '@fleet/client';
import { topics } from '@fleet/protocol';
import { waitFor } from '../../test/support/wait.js';

export interface ScriptedRobot {
  readonly robotId: string;
  readonly client: MqttClient;
  /** Publishes one outbox message and resolves with the cloud's acknowledgment of it. */
  outbox(kind: string, msgId: string, body: unknown): Promise<{ ok: boolean }>;
  close(): Promise<void>;
}

export async function enrollScriptedRobot(
  api: FleetClient,
  mqttUrl: string,
  opts: {
    name: string;
    /** Topics of its own beside the outbox acknowledgments (each message of them goes to `onMessage`). */
    subscribe?: (robotId: string) => string[];
    onMessage?: (topic: string, payload: Buffer) => void;
  },
): Promise<ScriptedRobot> {
  const token = await api.enrollmentTokens.create({ name_prefix: opts.name, max_uses: 1 });
  const enrolled = await api.robots.enroll({ token: token.token, name: opts.name });
  const client = await mqtt.connectAsync(mqttUrl, {
    protocolVersion: 4,
    clientId: enrolled.mqtt.client_id,
    username: enrolled.mqtt.username,
    password: enrolled.mqtt.password,
    reconnectPeriod: 0,
    connectTimeout: 15_000,
  });
  const ackTopic = topics.outboxAck(enrolled.robot_id);
  const acks = new Map<string, { ok: boolean }>();
  client.on('message', (topic, payload) => {
    if (topic !== ackTopic) {
      opts.onMessage?.(topic, payload);
      return;
    }
    const a = JSON.parse(payload.toString()) as { msg_id: string; ok: boolean };
    acks.set(a.msg_id, a);
  });
  await client.subscribeAsync([ackTopic, ...(opts.subscribe?.(enrolled.robot_id) ?? [])], { qos: 1 });
  const robotId = enrolled.robot_id;
  return {
    robotId,
    client,
    async outbox(kind, msgId, body) {
      await client.publishAsync(topics.outbox(robotId), JSON.stringify({ msg_id: msgId, kind, body }), { qos: 1 });
      return waitFor(() => acks.get(msgId), { timeoutMs: 30_000, description: `the acknowledgment of ${msgId}` });
    },
    close: () => client.endAsync(true),
  };
}
