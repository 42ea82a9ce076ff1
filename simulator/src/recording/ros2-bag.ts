import { rename, writeFile, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { McapWriter } from '@mcap/core';
import { parse as parseMessageDefinition } from '@foxglove/rosmsg';
import { MessageWriter } from '@foxglove/rosmsg2-serialization';
import zstd from '@foxglove/wasm-zstd';
import { stringify } from 'yaml';
import { ROS2_MESSAGE_DEFINITIONS, ROS2_TYPE_HASHES } from './ros2-signals.js';

/**
 * A rosbag2 bag as `ros2 bag record --storage mcap` leaves it: a directory holding
 * `<name>_0.mcap` and `metadata.yaml`. The MCAP has the `ros2` profile, one `ros2msg` schema per
 * type (its full definition), `cdr` channels carrying rosbag2's `offered_qos_profiles` and
 * `topic_type_hash`, zstd chunks (rosbag2's MCAP default), and at the end the `rosbag2` metadata
 * record with the bag's serialized metadata, as rosbag2_storage_mcap writes it.
 *
 * metadata.yaml is format version 9 (ROS 2 Jazzy): QoS profiles as a YAML list rather than a
 * string, type description hashes, `ros_distro`. It is written last, through a temporary file,
 * so a bag with a metadata.yaml is a complete one; a crash leaves the MCAP alone, which ROS 2
 * tools re-index (`ros2 bag reindex`).
 */

/** The bag directory inside the episode directory, and the stem of its file names. */
export const BAG_DIR = 'bag';
export const BAG_FILE = `${BAG_DIR}_0.mcap`;
export const METADATA_FILE = 'metadata.yaml';
export const ROSBAG2_METADATA_VERSION = 9;
export const ROS_DISTRO = 'jazzy';

/** rosbag2's "infinite" duration (a QoS deadline, lifespan or lease that is not set). */
const INFINITE = { sec: 9223372036, nsec: 854775807 };

/**
 * The QoS a publisher of these topics offers, as rosbag2 records it: reliable and volatile, with
 * history `unknown` (discovery does not carry it). One profile per publisher.
 */
export const OFFERED_QOS_PROFILES = [
  {
    history: 'unknown',
    depth: 0,
    reliability: 'reliable',
    durability: 'volatile',
    deadline: INFINITE,
    lifespan: INFINITE,
    liveliness: 'automatic',
    liveliness_lease_duration: INFINITE,
    avoid_ros_namespace_conventions: false,
  },
] as const;

/** zstd level of the chunks: rosbag2's MCAP writer defaults to a fast level too. */
const ZSTD_LEVEL = 1;

export interface BagTopic {
  name: string;
  type: string;
}

interface Channel {
  id: number;
  topic: BagTopic;
  writer: MessageWriter;
  count: number;
}

/** Loaded once per process: the wasm module compiles asynchronously. */
let zstdReady: Promise<boolean> | undefined;

export class Rosbag2Writer {
  private readonly mcap: McapWriter;
  private position = 0n;
  private readonly channels = new Map<string, Channel>();
  private startNs: bigint | undefined;
  private endNs = 0n;
  private messages = 0;

  /** `fh` is the open `<dir>/bag_0.mcap`; `dir` is the bag directory metadata.yaml goes to. */
  constructor(
    private readonly dir: string,
    private readonly fh: FileHandle,
    chunkSize: number,
  ) {
    // Streams to the file: the writer hands over each finished chunk, so at most one chunk is in memory.
    this.mcap = new McapWriter({
      writable: {
        write: async (buf: Uint8Array) => {
          await this.fh.write(buf);
          this.position += BigInt(buf.byteLength);
        },
        position: () => this.position,
      },
      chunkSize,
      compressChunk: (data) => ({ compression: 'zstd', compressedData: zstd.compress(data, ZSTD_LEVEL) }),
    });
  }

  get bytes(): number {
    return Number(this.position);
  }

  get messageCount(): number {
    return this.messages;
  }

  async begin(topics: readonly BagTopic[], library: string): Promise<void> {
    await (zstdReady ??= zstd.isLoaded);
    await this.mcap.start({ profile: 'ros2', library });
    const schemas = new Map<string, number>();
    for (const topic of topics) {
      const definition = ROS2_MESSAGE_DEFINITIONS[topic.type];
      const hash = ROS2_TYPE_HASHES[topic.type];
      if (definition === undefined || hash === undefined) throw new Error(`no ROS 2 definition for ${topic.type}`);
      let schemaId = schemas.get(topic.type);
      if (schemaId === undefined) {
        schemaId = await this.mcap.registerSchema({ name: topic.type, encoding: 'ros2msg', data: new TextEncoder().encode(definition) });
        schemas.set(topic.type, schemaId);
      }
      const id = await this.mcap.registerChannel({
        topic: topic.name,
        messageEncoding: 'cdr',
        schemaId,
        // On the channel the profiles are a YAML string (rosbag2_storage_mcap's serialization).
        metadata: new Map([
          ['offered_qos_profiles', yaml(OFFERED_QOS_PROFILES).trimEnd()],
          ['topic_type_hash', hash],
        ]),
      });
      this.channels.set(topic.name, { id, topic, writer: new MessageWriter(parseMessageDefinition(definition, { ros2: true })), count: 0 });
    }
  }

  /** Serializes `message` to CDR and writes it at `ms` (log and publish time, as rosbag2 stamps them). */
  async write(topic: string, sequence: number, ms: number, message: unknown): Promise<number> {
    const channel = this.channels.get(topic);
    if (!channel) throw new Error(`topic ${topic} was not registered`);
    const data = channel.writer.writeMessage(message);
    const t = BigInt(ms) * 1_000_000n;
    await this.mcap.addMessage({ channelId: channel.id, sequence, logTime: t, publishTime: t, data });
    channel.count += 1;
    this.messages += 1;
    this.startNs = this.startNs === undefined || t < this.startNs ? t : this.startNs;
    if (t > this.endNs) this.endNs = t;
    return data.byteLength;
  }

  /** What metadata.yaml holds (`rosbag2_bagfile_information`). */
  information(): Record<string, unknown> {
    const start = this.startNs ?? 0n;
    const duration = this.startNs === undefined ? 0n : this.endNs - start;
    return {
      version: ROSBAG2_METADATA_VERSION,
      storage_identifier: 'mcap',
      duration: { nanoseconds: duration },
      starting_time: { nanoseconds_since_epoch: start },
      message_count: this.messages,
      topics_with_message_count: [...this.channels.values()].map((c) => ({
        topic_metadata: {
          name: c.topic.name,
          type: c.topic.type,
          serialization_format: 'cdr',
          offered_qos_profiles: OFFERED_QOS_PROFILES,
          type_description_hash: ROS2_TYPE_HASHES[c.topic.type],
        },
        message_count: c.count,
      })),
      compression_format: '',
      compression_mode: '',
      relative_file_paths: [BAG_FILE],
      files: [{ path: BAG_FILE, starting_time: { nanoseconds_since_epoch: start }, duration: { nanoseconds: duration }, message_count: this.messages }],
      custom_data: null,
      ros_distro: ROS_DISTRO,
    };
  }

  /** Writes the `rosbag2` metadata record, the MCAP summary and footer, then metadata.yaml. */
  async end(): Promise<void> {
    const information = this.information();
    await this.mcap.addMetadata({ name: 'rosbag2', metadata: new Map([['serialized_metadata', yaml(information)]]) });
    await this.mcap.end();
    await this.fh.sync();
    const tmp = join(this.dir, `${METADATA_FILE}.tmp`);
    await writeFile(tmp, yaml({ rosbag2_bagfile_information: information }), { mode: 0o644 });
    await rename(tmp, join(this.dir, METADATA_FILE));
  }
}

/** YAML as yaml-cpp writes it for rosbag2: no anchors for repeated values; nanoseconds (bigint) as plain integers. */
function yaml(value: unknown): string {
  return stringify(value, { aliasDuplicateObjects: false });
}
