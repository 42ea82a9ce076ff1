import {
  GrantAnswerSchema,
  isMultipartFile,
  type DeferralReason,
  type GrantDestination,
  type GrantRequestEnvelope,
} from '@fleet/protocol';
import { httpUrl } from './provider-post.js';

/** A provider's answer after every check: a usable grant, or why it is treated as a deferral. */
export type CheckedAnswer =
  | { kind: 'grant'; grantId: string; expiresAt: number; destination: GrantDestination }
  | { kind: 'deferral'; reason: DeferralReason; message: string; retryAfterS: number | null };

const MAX_MESSAGE = 300;

/** An answer that is not a grant: the provider's own deferral, or a refusal with its reason. */
function refuse(reason: DeferralReason, message: string): CheckedAnswer {
  return { kind: 'deferral', reason, message: message.slice(0, MAX_MESSAGE), retryAfterS: null };
}

const isUploadUrl = (u: string): boolean => httpUrl(u) !== null;

/**
 * Checks a provider's parsed JSON answer against the request it answers, strictly: the schema
 * (a grant or a deferral), exactly one destination echoing the requested id, every manifest
 * file granted at exactly its path and no other, complete protocol fields for each file (a PUT
 * URL, or a multipart set whose part URLs cover the file), and an expiry in the future. Whether
 * the `grant_id` is new is for the caller (it needs the store). Anything else is a deferral with
 * its reason; nothing unchecked reaches a robot.
 */
export function checkGrantAnswer(json: unknown, envelope: GrantRequestEnvelope, now: number): CheckedAnswer {
  const parsed = GrantAnswerSchema.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    return refuse('schema_invalid', `the answer is neither a grant nor a deferral (${issue ? `${issue.path.join('.') || 'answer'}: ${issue.message}` : 'invalid'})`);
  }
  const answer = parsed.data;
  if (answer.grant_id === null) {
    return { kind: 'deferral', reason: 'deferred', message: 'the grant provider deferred', retryAfterS: answer.retry_after };
  }
  const destination = answer.destinations[0]!;
  const wanted = envelope.request.destination_id;
  if (destination.destination_id !== wanted) {
    return refuse('destination_mismatch', `the grant is for destination ${destination.destination_id.slice(0, 64)}, not ${wanted}`);
  }
  const expiresAt = Date.parse(answer.expires_at);
  if (!(expiresAt > now)) return refuse('expired', `the grant expired at ${answer.expires_at}`);

  const manifest = new Map(envelope.request.manifest.files.map((f) => [f.path, f]));
  const seen = new Set<string>();
  for (const file of destination.files) {
    const m = manifest.get(file.path);
    if (!m) return refuse('schema_invalid', `the grant has a file that is not in the manifest: ${file.path.slice(0, 128)}`);
    if (seen.has(file.path)) return refuse('schema_invalid', `the grant lists ${file.path.slice(0, 128)} twice`);
    seen.add(file.path);
    if (isMultipartFile(file)) {
      if (destination.protocol !== 's3-multipart') return refuse('schema_invalid', `${file.path.slice(0, 128)}: a multipart set under protocol ${destination.protocol}`);
      const parts = Math.max(1, Math.ceil(m.size_bytes / file.part_size));
      if (file.part_urls.length !== parts) {
        return refuse('schema_invalid', `${file.path.slice(0, 128)}: ${file.part_urls.length} part URLs for ${parts} parts of ${file.part_size} bytes (${m.size_bytes} bytes)`);
      }
      if (![...file.part_urls, file.complete_url].every(isUploadUrl)) return refuse('schema_invalid', `${file.path.slice(0, 128)}: a URL that is not http(s)`);
    } else {
      // Under s3-multipart a PUT URL is for a file smaller than one part; the provider decides.
      if (!isUploadUrl(file.put_url)) return refuse('schema_invalid', `${file.path.slice(0, 128)}: put_url is not an http(s) URL`);
    }
  }
  const missing = [...manifest.keys()].filter((p) => !seen.has(p));
  if (missing.length > 0) return refuse('schema_invalid', `the grant omits ${missing.length} manifest file(s), e.g. ${missing[0]!.slice(0, 128)}`);
  return { kind: 'grant', grantId: answer.grant_id, expiresAt, destination };
}
