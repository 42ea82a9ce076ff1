import type { InspectedTopic, RecordingInspection } from '@fleet/lerobot';
import { formatRecord, formatTable, printable } from './output.js';

/** `fleet datasets inspect-recording` as a person reads it: the recording, a table of topics, notes, the proposed mapping. */

export function bytesText(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = n;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return u === 0 ? `${n} B` : `${v.toFixed(1)} ${units[u]}`;
}

function contentOf(t: InspectedTopic): string {
  if (t.error !== null) return `error ${t.error.code}`;
  if (t.image !== null) {
    const size = t.image.width !== undefined && t.image.height !== undefined ? ` ${t.image.width}x${t.image.height}` : '';
    const what = t.image.kind === 'compressed' ? (t.image.format ?? t.image.encoding) : t.image.encoding;
    return `${what}${size}${t.image.supported ? '' : ' (not read)'}`;
  }
  return t.fields.map((f) => (f.type === 'number' ? f.path : `${f.path}[${f.length}]`)).join(' ');
}

function stampOf(t: InspectedTopic): string {
  if (t.stamp === null) return t.first_ns === null ? '-' : 'log time only';
  const ms = t.stamp_offset_ms;
  return `${t.stamp}${ms === null ? '' : ` ${ms >= 0 ? '+' : ''}${ms} ms`}`;
}

export function inspectionText(r: RecordingInspection, mappingOut?: string): string {
  const rec = r.recording;
  const lines: string[] = [];
  lines.push(
    formatRecord({
      recording: `${printable(rec.path)} (${rec.format}, ${rec.files.length} file${rec.files.length === 1 ? '' : 's'})`,
      size: bytesText(rec.size_bytes),
      start: rec.start,
      end: rec.end,
      duration: rec.duration_s === null ? null : `${rec.duration_s.toFixed(3)} s`,
      messages: rec.message_count,
      compression: rec.compression.join(', ') || null,
    }).trimEnd(),
  );
  if (rec.files.length > 1 || rec.files.some((f) => f.error !== undefined)) {
    for (const f of rec.files) {
      lines.push(`  ${printable(f.path)}  ${bytesText(f.size_bytes)}${f.error ? `  ${f.error.code}` : `  ${f.message_count ?? 0} messages, ${f.chunks ?? 0} chunks (${(f.compression ?? []).join(', ')})`}`);
    }
  }
  lines.push('');
  lines.push(
    formatTable(
      r.topics,
      [
        { header: 'topic', value: (t) => printable(t.topic) },
        { header: 'type', value: (t) => printable(t.type) || '-' },
        { header: 'encoding', value: (t) => `${printable(t.message_encoding)}/${printable(t.schema_encoding) || '-'}` },
        { header: 'count', value: (t) => t.message_count },
        { header: 'rate', value: (t) => (t.rate_hz === null ? '-' : `${t.rate_hz} Hz`) },
        { header: 'stamp', value: stampOf },
        { header: 'mapped as', value: (t) => t.mapped_as },
        { header: 'content', value: contentOf },
      ],
      80,
    ).trimEnd(),
  );
  const notes: string[] = [];
  for (const t of r.topics) {
    for (const f of t.fields) if (f.values !== undefined) notes.push(`${printable(t.topic)} ${f.path}: ${f.values.map(printable).join(', ')}`);
    if (t.error !== null) notes.push(`${printable(t.topic)}: ${t.error.code}: ${printable(t.error.message)}`);
    if (t.note !== null) notes.push(`${printable(t.topic)}: ${printable(t.note)}`);
  }
  for (const n of rec.notes) notes.push(printable(n));
  if (notes.length > 0) lines.push('', ...notes);
  lines.push('');
  if (r.mapping === null) lines.push('no topic maps to a LeRobot feature: nothing to propose');
  else {
    lines.push(mappingOut !== undefined ? `proposed mapping (written to ${printable(mappingOut)}):` : 'proposed mapping (--mapping-out FILE writes it; edit it and pass it to export-lerobot --mapping FILE):');
    lines.push(JSON.stringify(r.mapping, null, 2));
  }
  return `${lines.join('\n')}\n`;
}
