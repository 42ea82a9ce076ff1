import type { FastifySerializerCompiler } from 'fastify/types/schema.js';
import { ResponseSerializationError } from 'fastify-type-provider-zod';
import { $ZodType, safeEncode } from 'zod/v4/core';
import { safeJsonStringify } from '@fleet/protocol';

/**
 * The response serializer: each response is checked against its route's zod schema (as
 * fastify-type-provider-zod does), then written with a stringify that cannot overflow the stack,
 * so a value stored before the JSON bounds existed can never make a read answer 500.
 */
export const boundedSerializerCompiler: FastifySerializerCompiler<unknown> = ({ schema, method, url }) => {
  const zodSchema = resolve(schema);
  return (data: unknown) => {
    const result = safeEncode(zodSchema, data);
    if (result.error) throw new ResponseSerializationError(method, url, { cause: result.error });
    return safeJsonStringify(result.data);
  };
};

function resolve(schema: unknown): $ZodType {
  if (schema instanceof $ZodType) return schema;
  const props = (schema as { properties?: unknown } | null)?.properties;
  if (props instanceof $ZodType) return props;
  throw new Error('response schema is not a zod schema');
}
