// How the response docs write a body by media type, and a request body; the SSE example text.
import { Type, type TSchema } from '@sinclair/typebox';
import type { Payload, SuccessDoc } from '../api-doc-types.js';

export const json = (schema: TSchema | undefined, example: unknown): Record<string, Payload> => ({ 'application/json': { schema, example } });
export const jsonRequest = (example: unknown, schema?: TSchema, required = true): SuccessDoc['request'] => ({ required, content: { 'application/json': { schema, example } } });
export const sse = (events: Record<string, TSchema>, example: string): Record<string, Payload> => ({
  'text/event-stream': {
    schema: Type.String({ description: 'server-sent events: `event: <name>` and `data: <JSON>` (see x-events), and `: comment` lines (keep-alives)' }),
    events,
    example,
  },
});
export const event = (name: string, data: unknown) => `event: ${name}\ndata: ${JSON.stringify(data)}\n\n`;
export const BINARY = Type.String({ format: 'binary' });
