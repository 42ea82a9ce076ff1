import type { FastifyInstance } from 'fastify';
import { findJsonBoundsViolation, JSON_LIMITS } from '@fleet/protocol';
import { jsonPointer, validationError } from '../errors.js';

/**
 * The only request body the API takes: JSON, bounded in nesting depth, keys and array length
 * before anything else reads it (the Idempotency-Key fingerprint, validation, storage). A body
 * beyond the bounds is 400 `validation_failed` naming the bound; it is never stored, so a later
 * read can never trip over it.
 *
 * JSON.parse is iterative in V8, so parsing itself is safe on any nesting; everything after it
 * is not, hence the bounds come straight after the parse.
 *
 * An empty body with Content-Type: application/json is "no body", which many HTTP clients send
 * on POSTs that take none (robot commands, snapshot). Fastify's built-in text/plain parser is
 * removed: it would hand a string to the body schema, so a text body got 400 instead of 415.
 */
export function installJsonBodyParser(app: FastifyInstance): void {
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (_req, body, done) => {
    const text = body as string;
    if (text.trim() === '') {
      done(null, undefined);
      return;
    }
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch (err) {
      // V8's message quotes the input; ours gives the position only.
      const at = /position (\d+)/.exec((err as Error).message)?.[1];
      done(validationError('body', '', `the body is not valid JSON${at ? ` (at position ${at})` : ''}`, 'invalid_json'), undefined);
      return;
    }
    const violation = findJsonBoundsViolation(value);
    if (violation) {
      done(
        validationError('body', violation.path, `${violation.message} (at most ${violation.max})`, `json_${violation.limit}`, {
          limits: { max_depth: JSON_LIMITS.maxDepth, max_object_keys: JSON_LIMITS.maxObjectKeys, max_array_length: JSON_LIMITS.maxArrayLength },
        }),
        undefined,
      );
      return;
    }
    const forbidden = findPrototypeKey(value);
    if (forbidden !== null) {
      done(validationError('body', forbidden, 'the body must not contain __proto__ or constructor.prototype keys', 'forbidden_key'), undefined);
      return;
    }
    done(null, value);
  });
}

/**
 * Where `value` has a `__proto__` key, or a `constructor` object with a `prototype` key (what
 * secure-json-parse refuses): merged into another object later, either could change its
 * prototype. Runs after the bounds, so the (iterative) walk is short.
 */
function findPrototypeKey(value: unknown): string | null {
  const stack: { node: unknown; path: string[] }[] = [{ node: value, path: [] }];
  while (stack.length > 0) {
    const { node, path } = stack.pop()!;
    if (node === null || typeof node !== 'object') continue;
    if (Object.hasOwn(node, '__proto__')) return jsonPointer([...path, '__proto__']);
    const ctor = (node as Record<string, unknown>).constructor;
    if (Object.hasOwn(node, 'constructor') && ctor !== null && typeof ctor === 'object' && Object.hasOwn(ctor, 'prototype')) {
      return jsonPointer([...path, 'constructor', 'prototype']);
    }
    for (const [k, v] of Object.entries(node)) if (v !== null && typeof v === 'object') stack.push({ node: v, path: [...path, k] });
  }
  return null;
}
