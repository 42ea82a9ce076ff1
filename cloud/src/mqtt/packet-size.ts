/**
 * The largest MQTT packet (fixed header included) a broker of the fleet accepts: mosquitto's
 * `max_packet_size` in the generated configuration and the embedded broker's cap. Robots' largest
 * messages are outbox reports, well below it.
 */
export const MAX_MQTT_PACKET_BYTES = 4 * 1024 * 1024;

/**
 * The largest first packet of a connection on the embedded broker. That packet must be the
 * CONNECT (client id, credentials, will), which is small; a client that has not logged in yet
 * cannot make the broker hold more than this, however many connections it opens.
 */
export const MAX_MQTT_CONNECT_BYTES = 64 * 1024;

/**
 * Follows the MQTT framing of one connection's bytes (a type byte, a variable-length
 * "remaining length", then that many bytes) without buffering any of them, and says when a
 * packet's declared size is over the cap: from its first bytes, before its payload has arrived.
 * The parser that builds the packets is not involved (mqtt-packet has no size limit and would
 * buffer the whole packet before handing it on).
 */
export class PacketSizeGuard {
  private inHeader = true;
  private packets = 0;
  private length = 0;
  private multiplier = 1;
  private lengthBytes = 0;
  /** Bytes of the current packet's body still to come. */
  private left = 0;

  constructor(private readonly limits: { maxBytes: number; maxFirstPacketBytes?: number }) {}

  /** The declared size of the first packet in `chunk` over its cap, or null when all are within it. */
  feed(chunk: Buffer): number | null {
    let i = 0;
    while (i < chunk.length) {
      if (this.left > 0) {
        const n = Math.min(this.left, chunk.length - i);
        this.left -= n;
        i += n;
        continue;
      }
      if (this.inHeader) {
        // The packet type byte; its remaining length follows.
        this.inHeader = false;
        this.length = 0;
        this.multiplier = 1;
        this.lengthBytes = 0;
        i++;
        continue;
      }
      const byte = chunk[i++]!;
      this.length += (byte & 0x7f) * this.multiplier;
      this.multiplier *= 128;
      this.lengthBytes++;
      // Checked on every length byte: what is known so far is a lower bound of the size.
      const size = 1 + this.lengthBytes + this.length;
      const cap = this.packets === 0 && this.limits.maxFirstPacketBytes !== undefined ? this.limits.maxFirstPacketBytes : this.limits.maxBytes;
      if (size > cap) return size;
      // A fifth length byte is malformed: the parser refuses it itself.
      if (byte & 0x80 && this.lengthBytes < 4) continue;
      this.packets++;
      this.inHeader = true;
      this.left = this.length;
    }
    return null;
  }
}
