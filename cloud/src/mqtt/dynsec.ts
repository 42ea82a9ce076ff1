import { randomBytes } from 'node:crypto';
import mqtt, { type MqttClient } from 'mqtt';
import type { FastifyBaseLogger } from 'fastify';
import { z } from 'zod';
import { topics, type Scheduler, type TimerHandle } from '@fleet/protocol';

const CONTROL_TOPIC = '$CONTROL/dynamic-security/v1';
const RESPONSE_TOPIC = '$CONTROL/dynamic-security/v1/response';

/** One command of mosquitto's dynamic security API (`command` plus its own fields). */
export type DynsecCommand = { command: string } & Record<string, unknown>;

const ResponsesSchema = z.object({
  responses: z.array(z.object({ command: z.string(), error: z.string().optional(), correlationData: z.string().optional() }).loose()),
});

/** The plugin refused a command (its own message, e.g. "Client already exists"). */
export class DynsecError extends Error {
  constructor(
    readonly command: string,
    readonly reason: string,
  ) {
    super(`mosquitto dynamic security refused ${command}: ${reason}`);
    this.name = 'DynsecError';
  }
}

interface Waiting {
  resolve: (error: string | undefined) => void;
  timer: TimerHandle;
}

/**
 * A client of mosquitto's dynamic security plugin over `$CONTROL/dynamic-security/v1`. Every
 * replica sees every response on the shared response topic, so each command carries a
 * `correlationData` of this process and the answers of other replicas are ignored.
 */
export class DynsecControl {
  private client: MqttClient | null = null;
  private readonly waiting = new Map<string, Waiting>();
  private readonly prefix = randomBytes(6).toString('hex');
  private seq = 0;
  private readonly scheduler: Scheduler;

  constructor(
    private readonly opts: { url: string; username: string; password: string; logger: FastifyBaseLogger; timeoutMs: number; scheduler: Scheduler },
  ) {
    this.scheduler = opts.scheduler;
  }

  async start(): Promise<void> {
    const client = await mqtt.connectAsync(this.opts.url, {
      protocolVersion: 4,
      clientId: `cloud_dynsec_${randomBytes(8).toString('hex')}`,
      clean: true,
      reconnectPeriod: 1000,
      username: this.opts.username,
      password: this.opts.password,
    });
    this.client = client;
    client.on('message', (_topic, payload) => this.onResponse(payload));
    client.on('error', (err) => this.opts.logger.warn({ err }, 'mqtt dynamic security client error'));
    // mqtt.js subscribes again after a reconnect (its `resubscribe` default).
    await client.subscribeAsync(RESPONSE_TOPIC, { qos: 1 });
  }

  get connected(): boolean {
    return this.client?.connected ?? false;
  }

  async stop(): Promise<void> {
    for (const [, w] of this.waiting) {
      this.scheduler.clearTimeout(w.timer);
      w.resolve('the cloud is shutting down');
    }
    this.waiting.clear();
    await this.client?.endAsync();
    this.client = null;
  }

  /**
   * Sends the commands in one message (the plugin runs them in order) and resolves with each
   * one's error, `undefined` where it succeeded; rejects when the broker does not answer in time.
   */
  async run(commands: readonly DynsecCommand[]): Promise<(string | undefined)[]> {
    const client = this.client;
    if (!client?.connected) throw new Error('no connection to the MQTT broker');
    const answers = commands.map((c) => {
      const id = `${this.prefix}-${++this.seq}`;
      const answer = new Promise<string | undefined>((resolve, reject) => {
        const timer = this.scheduler.setTimeout(() => {
          this.waiting.delete(id);
          reject(new Error(`mosquitto did not answer ${c.command} within ${this.opts.timeoutMs} ms`));
        }, this.opts.timeoutMs);
        this.waiting.set(id, { resolve, timer });
      });
      return { id, answer };
    });
    const message = { commands: commands.map((c, i) => ({ ...c, correlationData: answers[i]!.id })) };
    try {
      await client.publishAsync(CONTROL_TOPIC, JSON.stringify(message), { qos: 1 });
    } catch (err) {
      for (const a of answers) {
        const w = this.waiting.get(a.id);
        if (w) this.scheduler.clearTimeout(w.timer);
        this.waiting.delete(a.id);
      }
      throw err;
    }
    return Promise.all(answers.map((a) => a.answer));
  }

  private onResponse(payload: Buffer): void {
    let parsed;
    try {
      parsed = ResponsesSchema.safeParse(JSON.parse(payload.toString('utf8')));
    } catch {
      return;
    }
    if (!parsed.success) return;
    for (const r of parsed.data.responses) {
      const w = r.correlationData === undefined ? undefined : this.waiting.get(r.correlationData);
      if (!w) continue;
      this.scheduler.clearTimeout(w.timer);
      this.waiting.delete(r.correlationData!);
      w.resolve(r.error);
    }
  }
}

/** The role that holds one robot's ACL. */
export const robotRole = (robotId: string) => `robot-${robotId}`;

/**
 * One robot's ACL, the same rule as the embedded broker's (`robots/broker-auth.ts`): publish only
 * its own status, command replies, outbox and sync requests; subscribe to (and receive) only its
 * own commands, outbox acknowledgments and sync messages. Literal subscriptions: a robot cannot
 * widen them with wildcards.
 */
export function robotAcls(robotId: string) {
  const publish = [topics.status(robotId), topics.commandReply(robotId), topics.outbox(robotId), topics.syncRequest(robotId)];
  const receive = [topics.command(robotId), topics.outboxAck(robotId), topics.sync(robotId)];
  return [
    ...publish.map((topic) => ({ acltype: 'publishClientSend', topic, priority: 0, allow: true })),
    ...receive.map((topic) => ({ acltype: 'subscribeLiteral', topic, priority: 0, allow: true })),
    ...receive.map((topic) => ({ acltype: 'publishClientReceive', topic, priority: 0, allow: true })),
  ];
}

/**
 * Robot accounts on mosquitto: one dynamic security client per robot (username = client id =
 * robot id, so no other client id can use it) with a role of its own holding its ACL.
 */
export class DynsecRobotAccounts {
  constructor(private readonly control: Pick<DynsecControl, 'run'>) {}

  /** A new robot: its role, then its client with the secret it was just given. */
  async enrolled(robotId: string, password: string): Promise<void> {
    const [role, client] = await this.control.run([
      { command: 'createRole', rolename: robotRole(robotId), textdescription: `robot ${robotId}: its own topics only`, acls: robotAcls(robotId) },
      { command: 'createClient', username: robotId, clientid: robotId, password, roles: [{ rolename: robotRole(robotId), priority: 0 }] },
    ]);
    // A retry after a lost answer finds its own role and client again.
    if (role !== undefined && role !== 'Role already exists') throw new DynsecError('createRole', role);
    if (client === 'Client already exists') {
      await this.rotated(robotId, password);
      return;
    }
    if (client !== undefined) throw new DynsecError('createClient', client);
  }

  /** Only this secret works from now on; the plugin closes the robot's live connection. */
  async rotated(robotId: string, password: string): Promise<void> {
    const [err] = await this.control.run([{ command: 'setClientPassword', username: robotId, password }]);
    if (err !== undefined) throw new DynsecError('setClientPassword', err);
  }

  /** De-enrolled: the client is disabled, which also closes its live connection. */
  async revoked(robotId: string): Promise<void> {
    const [err] = await this.control.run([{ command: 'disableClient', username: robotId }]);
    // A robot enrolled before the broker was provisioned has no client to disable: nothing can log in as it.
    if (err !== undefined && err !== 'Client not found') throw new DynsecError('disableClient', err);
  }
}
