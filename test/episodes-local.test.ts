import { open } from 'node:fs/promises';
import { McapIndexedReader, type IReadable } from '@mcap/core';
import zstd from '@foxglove/wasm-zstd';
import { describe, expect, test } from 'vitest';
import { startCloud } from './support/cloud.js';
import { agentControl, waitIdle } from './support/episodes.js';
import { runAgentCli, startFleet } from './support/robots.js';
import { waitFor } from './support/wait.js';

interface EpisodeJson {
  id: string;
  state: string;
  outcome: string | null;
  dir: string;
  files: { path: string; abs_path: string; size_bytes: number | null; sha256: string | null }[];
  total_bytes: number;
  sync: unknown[];
}

async function listJson(dataDir: string, extra: readonly string[] = []): Promise<EpisodeJson[]> {
  return (await agentControl(dataDir, ['episodes', 'list', '--json', ...extra])).episodes as EpisodeJson[];
}

/** Reads the summary and every message of an MCAP file through `@mcap/core`'s indexed reader. */
async function readIndexed(path: string) {
  const fh = await open(path, 'r');
  try {
    const size = BigInt((await fh.stat()).size);
    const readable: IReadable = {
      size: async () => size,
      read: async (offset, length) => {
        const buf = Buffer.alloc(Number(length));
        await fh.read(buf, 0, buf.length, Number(offset));
        return buf;
      },
    };
    await zstd.isLoaded;
    // The simulator records ROS 2 bags, whose chunks are zstd.
    const reader = await McapIndexedReader.Initialize({ readable, decompressHandlers: { zstd: (data, n) => zstd.decompress(data, Number(n)) } });
    const topics = new Map([...reader.channelsById.values()].map((c) => [c.id, { topic: c.topic, schema: reader.schemasById.get(c.schemaId)! }]));
    const counts = new Map<string, number>();
    for await (const m of reader.readMessages()) {
      const { topic } = topics.get(m.channelId)!;
      counts.set(topic, (counts.get(topic) ?? 0) + 1);
    }
    return { reader, topics: [...topics.values()], counts };
  } finally {
    await fh.close();
  }
}

describe('fleet-agent episodes list|show against a running simulated robot', () => {
  test('shows where an episode is recorded and its files; the simulator MCAP opens with the indexed reader; usage errors exit 2 on one line', async () => {
    await using cloud = await startCloud();
    await using fleet = await startFleet(cloud, { count: 1, args: ['--bytes-per-second', '65536'] });
    const dir = fleet.robotDir(0);

    // While recording, the episode is on top with its growing file.
    const started = String((await agentControl(dir, ['episode', 'start'])).episode_id);
    const recording = await waitFor(
      async () => {
        const [top] = await listJson(dir);
        return top?.id === started && (top.files[0]?.size_bytes ?? 0) > 32 * 1024 ? top : undefined;
      },
      { timeoutMs: 30_000, description: 'the recording file to pass 32 KiB' },
    );
    expect(recording).toMatchObject({ state: 'recording', outcome: null, dir: `${dir}/episodes/${started}` });
    await agentControl(dir, ['episode', 'finish']);
    await waitIdle(dir);

    const [ep] = await listJson(dir, ['--limit', '1']);
    expect(ep).toMatchObject({ id: started, state: 'finalized', outcome: 'success', dir: `${dir}/episodes/${started}` });
    // A rosbag2 directory: its MCAP and metadata.yaml.
    expect(ep!.files.map((f) => f.path)).toEqual(['bag/bag_0.mcap', 'bag/metadata.yaml']);
    const file = ep!.files[0]!;
    expect(file).toMatchObject({ path: 'bag/bag_0.mcap', abs_path: `${dir}/episodes/${started}/bag/bag_0.mcap` });
    expect(ep!.files.reduce((n, f) => n + f.size_bytes!, 0)).toBe(ep!.total_bytes);

    const mcap = await readIndexed(file.abs_path);
    expect(mcap.reader.header.profile).toBe('ros2');
    expect(mcap.topics.map((t) => [t.topic, t.schema.name, t.schema.encoding]).sort()).toEqual([
      ['/camera/front/image_raw', 'sensor_msgs/msg/Image', 'ros2msg'],
      ['/camera/front/image_raw/compressed', 'sensor_msgs/msg/CompressedImage', 'ros2msg'],
      ['/joint_commands', 'sensor_msgs/msg/JointState', 'ros2msg'],
      ['/joint_states', 'sensor_msgs/msg/JointState', 'ros2msg'],
    ]);
    expect(mcap.reader.chunkIndexes.length).toBeGreaterThan(0);
    expect(mcap.counts.get('/joint_states')).toBeGreaterThan(0);
    expect(mcap.counts.get('/camera/front/image_raw/compressed')).toBeGreaterThan(0);
    // A commanded action with every joint state.
    expect(mcap.counts.get('/joint_commands')).toBe(mcap.counts.get('/joint_states'));
    expect(Number(mcap.reader.statistics!.messageCount)).toBe([...mcap.counts.values()].reduce((a, b) => a + b, 0));

    // For people: the directory, the file with its size and checksum, the sync state.
    const shown = await runAgentCli(['episodes', 'show', started, '--data-dir', dir]);
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout).toContain(`${started}  finalized, success`);
    expect(shown.stdout).toContain(`  dir        ${dir}/episodes/${started}`);
    expect(shown.stdout).toContain(`  file       bag/bag_0.mcap  `);
    expect(shown.stdout).toContain(`sha256 ${file.sha256}`);
    expect(shown.stdout).toContain('  sync       no destination assigned');
    const json = await agentControl(dir, ['episodes', 'show', started, '--json']);
    expect(json.episode).toEqual(ep);

    // Usage errors: exit 2, one line on stderr, nothing on stdout.
    for (const args of [
      ['episodes', 'show', 'not-an-id', '--data-dir', dir],
      ['episodes', 'show', '--data-dir', dir],
      ['episodes', 'list', '--limit', '0', '--data-dir', dir],
      ['episodes', 'list', '--bogus', '--data-dir', dir],
      ['episodes', 'list'],
    ]) {
      const r = await runAgentCli(args);
      expect(r.code, `${args.join(' ')}: ${r.stderr}`).toBe(2);
      expect(r.stdout).toBe('');
      expect(r.stderr.trim().split('\n'), r.stderr).toHaveLength(1);
      expect(r.stderr).toMatch(/^fleet-agent: /);
    }
    // An id this robot does not have is a refusal (1), not a usage error.
    const missing = await runAgentCli(['episodes', 'show', 'ep_2222222222aaaaaaaaaaaaaaaa', '--data-dir', dir]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain('not_found');
  });
});
