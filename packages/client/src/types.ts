import type { components, paths } from './schema.js';

/** The document's schemas (responses and request bodies), by name. */
export type Schemas = components['schemas'];

export type ApiKey = Schemas['ApiKey'];
export type CreatedApiKey = Schemas['CreatedApiKey'];
export type CreateApiKeyRequest = Schemas['CreateApiKeyRequestInput'];
export type Entitlements = Schemas['Entitlements'];
export type Usage = Schemas['Usage'];
export type CreateEnrollmentTokenRequest = Schemas['CreateEnrollmentTokenRequestInput'];
export type EnrollmentToken = Schemas['EnrollmentToken'];
export type EnrollRequest = Schemas['EnrollRequestInput'];
export type EnrollResponse = Schemas['EnrollResponse'];
export type Robot = Schemas['Robot'];
export type RobotCommandResult = Schemas['RobotCommandResult'];
export type Segment = Schemas['Segment'];
export type Episode = Schemas['Episode'];
export type EpisodeWithLocations = Schemas['EpisodeWithLocations'];
export type PatchAnnotationsRequest = Schemas['PatchAnnotationsRequestInput'];
export type PatchOutcomeRequest = Schemas['PatchOutcomeRequestInput'];
export type OutcomeChange = Schemas['OutcomeChange'];
export type ReadLinksRequest = Schemas['ReadLinksRequestInput'];
export type ReadLinks = Schemas['ReadLinks'];
export type ReadLink = Schemas['ReadLink'];
export type Dataset = Schemas['Dataset'];
export type CreateDatasetRequest = Schemas['CreateDatasetRequestInput'];
export type DatasetSnapshot = Schemas['DatasetSnapshot'];
export type ManifestHeader = Schemas['ManifestHeader'];
export type Webhook = Schemas['Webhook'];
export type CreatedWebhook = Schemas['CreatedWebhook'];
export type CreateWebhookRequest = Schemas['CreateWebhookRequestInput'];
export type DeadLetter = Schemas['DeadLetter'];
export type WebhookPayload = Schemas['WebhookPayload'];
export type Destination = Schemas['Destination'];
export type CreatedDestination = Schemas['CreatedDestination'];
export type CreateDestinationRequest = Schemas['CreateDestinationRequestInput'];
export type DestinationCheck = Schemas['DestinationCheck'];
export type RoutingRule = Schemas['RoutingRule'];
export type CreateRoutingRuleRequest = Schemas['CreateRoutingRuleRequestInput'];
export type SyncHealthRow = Schemas['SyncHealthRow'];

type Query<P extends keyof paths> = paths[P] extends { get: { parameters: { query?: infer Q } } } ? NonNullable<Q> : never;

/**
 * Equality on a top-level recorded metadata or annotation value (its string form), and whether a
 * top-level key is present at all (`'has_annotation.qa_status': false`: not yet reviewed; a key
 * deleted with null is absent).
 */
export type CustomFilters = { [key: `metadata.${string}` | `annotation.${string}`]: string } & {
  [key: `has_metadata.${string}` | `has_annotation.${string}`]: boolean | 'true' | 'false';
};

/** Every filter of the episode list and export (`cursor` and `limit` are page options). */
export type EpisodeFilters = Omit<Query<'/v1/episodes'>, 'cursor' | 'limit'> & CustomFilters;

/** One manifest line: the header (first page only), then one per member. */
export type ManifestLine = { kind: 'header'; header: ManifestHeader } | { kind: 'member'; episode: EpisodeWithLocations };

/** `${METHOD} ${path}` of every operation in the document. */
export type OperationKey = {
  [P in keyof paths]: {
    [M in 'get' | 'put' | 'post' | 'delete' | 'patch']: paths[P][M] extends undefined ? never : `${Uppercase<M>} ${P & string}`;
  }['get' | 'put' | 'post' | 'delete' | 'patch'];
}[keyof paths];
