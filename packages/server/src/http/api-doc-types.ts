// The shapes of the API's documentation (api-docs.ts, responses/, api-desktop.ts): a module
// of its own, so that the pages that fill them import them without importing each other.
import type { TSchema } from '@sinclair/typebox';
import type { ErrorCode } from '@sandboxd/protocol';

export interface OperationDoc {
  tag: string;
  summary: string;
  description: string;
  errors: ErrorCode[];
}

export interface Payload {
  /** Absent only for a JSON request body whose route declares its schema. */
  schema?: TSchema;
  example?: unknown;
  examples?: Record<string, { summary: string; value: unknown }>;
  /** text/event-stream: the `data` of each event, by event name. */
  events?: Record<string, TSchema>;
}

export interface SuccessDoc {
  /** 101 for a WebSocket upgrade. */
  status: 101 | 200 | 201 | 202;
  description: string;
  /** The answer's body, by media type (none for 101). */
  content?: Record<string, Payload>;
  /** WebSocket: the JSON text messages each side sends once the connection is upgraded. */
  frames?: { client: Payload; server: Payload };
  /** Other successes of the same operation (206 for a ranged download). */
  more?: Array<{ status: number; description: string; content: Record<string, Payload> }>;
  /** The request body, by media type; absent: the operation takes none. */
  request?: { required?: boolean; content: Record<string, Payload> };
}
