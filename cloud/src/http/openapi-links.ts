import type { RouteShorthandOptions } from 'fastify';

/**
 * OpenAPI links, declared on the route that produces an id (`links` in the route options, which
 * @fastify/swagger writes into the response): "the `id` of this 201 body is the `{id}` of
 * getDataset, snapshotDataset, …". Clients read them as documentation; a stateful fuzzer
 * (schemathesis) follows them to chain create → get → delete with real ids instead of guessing.
 */
export type RouteLinks = NonNullable<RouteShorthandOptions['links']>;
type LinkMap = NonNullable<RouteLinks[string]>;

/** A runtime expression into the response body (a JSON Pointer, `/id` or `/datasets/0/id`). */
export function fromBody(pointer: string): string {
  return `$response.body#${pointer}`;
}

/**
 * One link per target operation, each filling its path parameters from `parameters` (runtime
 * expressions), and optionally part of its body (merged into what the caller sends).
 */
export function linksTo(targets: readonly string[], parameters: Record<string, string>, description: string, requestBody?: Record<string, string>): LinkMap {
  return Object.fromEntries(
    targets.map((operationId) => [
      operationId.charAt(0).toUpperCase() + operationId.slice(1),
      { operationId, parameters, description, ...(requestBody ? { requestBody } : {}) },
    ]),
  );
}
