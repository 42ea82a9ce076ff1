// `fleet-cloud openapi` and `fleet-cloud broker-config`: files an operator generates once.
import { writeFileSync } from 'node:fs';
import type { Command } from 'commander';
import { systemClock, systemScheduler } from '@fleet/protocol';
import { parseCloudConfig } from '../config.js';
import { DEBIAN_DYNSEC_PLUGIN, writeBrokerConfig } from '../mqtt/dynsec-config.js';
import { fail, printJson } from './common.js';

export function registerTools(program: Command): void {
  program
    .command('openapi')
    .description('Print (or write) the OpenAPI 3.1 document the code generates.')
    .option('--out <file>', 'write to this file instead of stdout')
    .action(async (opts: { out?: string }) => {
      // Loaded here: building the app pulls in fastify and every route, which no other command needs.
      const [{ buildApp }, { offlineAppParts }, { openStore }, { SecretBox }] = await Promise.all([import('../app.js'), import('../server.js'), import('../store/index.js'), import('../secret-box.js')]);
      const time = { clock: systemClock, scheduler: systemScheduler };
      const config = parseCloudConfig({});
      const store = await openStore({ dataDir: ':memory:', ...time });
      const made = offlineAppParts(config, { ...time, store, secrets: SecretBox.random(), shutdownScheduler: systemScheduler });
      const app = await buildApp(config, made.parts);
      const text = `${JSON.stringify(app.app.swagger(), null, 2)}\n`;
      await app.close();
      await made.close();
      await store.close();
      if (opts.out) writeFileSync(opts.out, text);
      else process.stdout.write(text);
    });

  program
    .command('broker-config')
    .description(
      'Write what mosquitto 2 needs to serve several cloud replicas: a mosquitto.conf fragment, the dynamic security plugin file (robot accounts are added to it by the cloud) and the cloud\'s broker account (0600, for serve --mqtt-account-file). Refuses to overwrite.',
    )
    .requiredOption('--out <dir>', 'directory for fleet-cloud.conf, dynamic-security.json and cloud-mqtt-account.json')
    .option('--username <name>', 'the cloud replicas\' broker account', 'fleet-cloud')
    .option('--plugin <path>', 'mosquitto_dynamic_security.so', DEBIAN_DYNSEC_PLUGIN)
    .option('--dynsec-file <path>', 'where mosquitto keeps the plugin file (default: in --out)')
    .action((opts: { out: string; username: string; plugin: string; dynsecFile?: string }) => {
      try {
        const files = writeBrokerConfig({ outDir: opts.out, username: opts.username, pluginPath: opts.plugin, ...(opts.dynsecFile ? { dynsecPath: opts.dynsecFile } : {}) });
        printJson({ conf: files.conf, dynsec: files.dynsec, account: files.account });
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'EEXIST') fail(`${(err as NodeJS.ErrnoException).path ?? 'a file'} exists: the broker's robot accounts live there; choose another --out`);
        throw err;
      }
    });
}
