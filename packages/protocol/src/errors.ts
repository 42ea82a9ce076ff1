import { z } from 'zod';

export { API_ERROR_CODES, API_ERRORS, type ApiErrorCode } from './values.js';

export const ApiErrorBodySchema = z
  .object({
    error: z.object({
      code: z.string(),
      message: z.string(),
      details: z.record(z.string(), z.unknown()).optional(),
      // Optional only so that a client still reads an error from a proxy or an older server.
      request_id: z.string().optional().describe('The X-Request-Id of the request (always sent by this service); quote it when asking for support'),
    }),
  })
  .meta({ id: 'Error', description: 'Every error response has this body.' });
export type ApiErrorBody = z.infer<typeof ApiErrorBodySchema>;
