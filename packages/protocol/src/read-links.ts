import { z } from 'zod';
import { READ_LINKS_MAX_FILES } from './values.js';
import { ManifestFileSchema } from './episodes.js';

/**
 * Read links: short-lived GET URLs for an episode's recorded files, issued by the customer's own
 * grant provider so that a browser (the console's player) or a tool reads the bytes straight from
 * the customer's bucket. The cloud asks the provider with a signed request, as it asks for upload
 * grants, checks the answer strictly and relays it; it never fetches the URLs, never stores them.
 */

/** `X-Service-Event` of a read request (beside `grant.request`). */
export const READ_EVENT = 'read.request';

/** The longest a read link may live, and the lifetime the cloud asks for. */
export const READ_LINK_MAX_TTL_S = 3600;
export const READ_LINK_TTL_S = 900;
export { READ_LINKS_MAX_FILES } from './values.js';

const Url = z.string().min(1).max(8192);

/** What the cloud POSTs to the destination's URL for read links, signed with its `dsec_` secret. */
export const ReadRequestEnvelopeSchema = z.strictObject({
  episode_id: z.string(),
  org_id: z.string(),
  request: z.strictObject({
    destination_id: z.string(),
    episode: z.strictObject({ robot_id: z.string(), recording_session_id: z.string(), episode_seq: z.number().int() }),
    /** The replica's object key, as the provider answered it in the grant (null when it gave none). */
    object_key: z.string().min(1).max(1024).nullable(),
    /** The files wanted, with the manifest's size and digest. */
    files: z
      .array(z.strictObject({ path: ManifestFileSchema.shape.path, size_bytes: z.number().int().nonnegative(), sha256: z.string() }))
      .min(1)
      .max(READ_LINKS_MAX_FILES),
    /** How long the links should live; a provider may answer shorter. */
    expires_in_s: z.number().int().min(1).max(READ_LINK_MAX_TTL_S),
  }),
});
export type ReadRequestEnvelope = z.infer<typeof ReadRequestEnvelopeSchema>;

/** A provider's answer: a link per requested file, or a refusal in words. */
export const ReadAnswerSchema = z.union([
  z
    .object({
      files: z
        .array(z.strictObject({ path: ManifestFileSchema.shape.path, url: Url, expires_at: z.iso.datetime({ offset: true }) }))
        .min(1)
        .max(READ_LINKS_MAX_FILES),
    })
    .loose(),
  z.object({ refused: z.strictObject({ message: z.string().max(1024) }) }).loose(),
]);
export type ReadAnswer = z.infer<typeof ReadAnswerSchema>;

/** `POST /v1/episodes/{id}/read-links`: which replica and which files (every manifest file by default). */
export const ReadLinksRequestSchema = z
  .strictObject({
    destination_id: z.string().min(1).max(128).optional(),
    files: z.array(ManifestFileSchema.shape.path).min(1).max(READ_LINKS_MAX_FILES).optional(),
  })
  .meta({ id: 'ReadLinksRequest' });
export type ReadLinksRequest = z.infer<typeof ReadLinksRequestSchema>;

export const ReadLinkSchema = z
  .object({
    path: z.string(),
    url: z.string(),
    expires_at: z.string(),
    destination_id: z.string(),
    size_bytes: z.number().int(),
    sha256: z.string(),
  })
  .meta({ id: 'ReadLink' });
export type ReadLink = z.infer<typeof ReadLinkSchema>;

export const ReadLinksSchema = z
  .object({ episode_id: z.string(), destination_id: z.string(), files: z.array(ReadLinkSchema) })
  .meta({ id: 'ReadLinks' });
export type ReadLinks = z.infer<typeof ReadLinksSchema>;
