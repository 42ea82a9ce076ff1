import { pbkdf2Sync } from 'node:crypto';
import { describe, expect, test } from 'vitest';
import { topics } from '@fleet/protocol';
import { BROKER_LOG_TOPIC, CLOUD_ROLE, dynsecPassword, initialDynsecConfig, mosquittoConfFragment } from './dynsec-config.js';
import { DynsecError, DynsecRobotAccounts, robotAcls, robotRole, type DynsecCommand } from './dynsec.js';

/** A control that records the commands and answers each with the next scripted error (undefined: ok). */
function fakeControl(answers: (string | undefined)[][] = []) {
  const sent: DynsecCommand[][] = [];
  return {
    sent,
    run(commands: readonly DynsecCommand[]) {
      sent.push([...commands]);
      return Promise.resolve(answers.shift() ?? commands.map(() => undefined));
    },
  };
}

describe('the initial dynamic security file', () => {
  test("stores the cloud's password the way mosquitto 2.0 checks it (PBKDF2-SHA512, 64 bytes)", () => {
    const p = dynsecPassword('s3cret-s3cret-s3cret');
    expect(Buffer.from(p.salt, 'base64')).toHaveLength(12);
    expect(pbkdf2Sync('s3cret-s3cret-s3cret', Buffer.from(p.salt, 'base64'), p.iterations, 64, 'sha512').toString('base64')).toBe(p.password);
  });

  test('denies by default; only the cloud account exists, with the cloud role', () => {
    const c = initialDynsecConfig({ username: 'fleet-cloud', password: 'x'.repeat(32) });
    expect(c.defaultACLAccess).toEqual({ publishClientSend: false, publishClientReceive: false, subscribe: false, unsubscribe: true });
    expect(c.clients.map((x) => [x.username, x.roles])).toEqual([['fleet-cloud', [{ rolename: CLOUD_ROLE }]]]);
    expect(JSON.stringify(c)).not.toContain('x'.repeat(32));
    const subscribe = c.roles[0]!.acls.filter((a) => a.acltype === 'subscribePattern').map((a) => a.topic);
    // Shared subscriptions are checked against the whole $share/… filter by mosquitto 2.0.
    expect(subscribe).toEqual(expect.arrayContaining(['fleet/#', '$share/+/fleet/#', '$CONTROL/dynamic-security/#']));
  });

  test('the conf fragment turns anonymous access off and loads the plugin with the file', () => {
    const conf = mosquittoConfFragment({ dynsecFile: '/etc/mosquitto/fleet/dynamic-security.json', pluginPath: '/p.so' });
    expect(conf).toContain('allow_anonymous false');
    expect(conf).toContain('plugin /p.so');
    expect(conf).toContain('plugin_opt_config_file /etc/mosquitto/fleet/dynamic-security.json');
  });

  test("robot presence: the broker publishes its log and the cloud role may read the notice lines", () => {
    expect(mosquittoConfFragment({ dynsecFile: 'd.json', pluginPath: '/p.so' })).toContain('\nlog_dest topic\n');
    const acls = initialDynsecConfig({ username: 'fleet-cloud', password: 'x'.repeat(32) }).roles[0]!.acls.filter((a) => a.topic === BROKER_LOG_TOPIC);
    expect(acls.map((a) => a.acltype).sort()).toEqual(['publishClientReceive', 'subscribeLiteral']);
  });
});

describe('a robot account on mosquitto', () => {
  test('its ACL is the embedded broker rule: publish its own four topics, subscribe and receive its own three, literally', () => {
    const acls = robotAcls('rbt_a');
    const of = (type: string) => acls.filter((a) => a.acltype === type && a.allow).map((a) => a.topic).sort();
    expect(of('publishClientSend')).toEqual([topics.commandReply('rbt_a'), topics.outbox('rbt_a'), topics.status('rbt_a'), topics.syncRequest('rbt_a')].sort());
    expect(of('subscribeLiteral')).toEqual([topics.command('rbt_a'), topics.outboxAck('rbt_a'), topics.sync('rbt_a')].sort());
    expect(of('publishClientReceive')).toEqual(of('subscribeLiteral'));
    expect(acls.some((a) => a.acltype === 'subscribePattern' || a.topic.includes('+') || a.topic.includes('#'))).toBe(false);
  });

  test('enrollment creates its role, then a client whose client id and username are the robot id', async () => {
    const control = fakeControl();
    await new DynsecRobotAccounts(control).enrolled('rbt_a', 'rsec_1');
    expect(control.sent).toEqual([
      [
        expect.objectContaining({ command: 'createRole', rolename: robotRole('rbt_a') }),
        { command: 'createClient', username: 'rbt_a', clientid: 'rbt_a', password: 'rsec_1', roles: [{ rolename: robotRole('rbt_a'), priority: 0 }] },
      ],
    ]);
  });

  test('an enrollment sent again (its answer lost) sets the password of the client it created', async () => {
    const control = fakeControl([['Role already exists', 'Client already exists']]);
    await new DynsecRobotAccounts(control).enrolled('rbt_a', 'rsec_1');
    expect(control.sent[1]).toEqual([{ command: 'setClientPassword', username: 'rbt_a', password: 'rsec_1' }]);
  });

  test('a refusal is a DynsecError naming the command', async () => {
    const control = fakeControl([[undefined, 'Role not found']]);
    const err = await new DynsecRobotAccounts(control).enrolled('rbt_a', 'rsec_1').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(DynsecError);
    expect(err).toMatchObject({ command: 'createClient', reason: 'Role not found' });
  });

  test('rotation sets the new password; de-enrollment disables the client, and a client it never had is no error', async () => {
    const control = fakeControl([[undefined], ['Client not found']]);
    const accounts = new DynsecRobotAccounts(control);
    await accounts.rotated('rbt_a', 'rsec_2');
    await accounts.revoked('rbt_a');
    expect(control.sent).toEqual([[{ command: 'setClientPassword', username: 'rbt_a', password: 'rsec_2' }], [{ command: 'disableClient', username: 'rbt_a' }]]);
  });
});
