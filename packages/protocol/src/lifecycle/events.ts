import { Type, type Static } from '@sinclair/typebox';

export const SandboxEvent = Type.Object({
  id: Type.String(),
  status: Type.String(),
  at: Type.String(),
  reason: Type.Optional(Type.String()),
});

/**
 * `POST /v1/events/token`: a short-lived token that opens the events streams with `?token=` (for
 * browsers' EventSource, which cannot send headers). API keys are never accepted in a URL.
 */
export const EventsTokenBody = Type.Object(
  { sandbox_id: Type.Optional(Type.String({ minLength: 1, maxLength: 128, description: 'limit the token to this sandbox\'s events' })) },
  { additionalProperties: true },
);
export type EventsTokenBody = Static<typeof EventsTokenBody>;

export const EventsTokenResult = Type.Object({
  token: Type.String(),
  expires_at: Type.String(),
  sandbox_id: Type.Union([Type.String(), Type.Null()]),
  request_id: Type.Optional(Type.String()),
});
export type EventsTokenResult = Static<typeof EventsTokenResult>;

export const EventsQuery = Type.Object({
  token: Type.Optional(Type.String({ maxLength: 4096, description: 'an events token from POST /v1/events/token (never an API key)' })),
});
export type EventsQuery = Static<typeof EventsQuery>;

/** `GET /v1/sandboxes/{id}/metrics/stream`: one sample of SandboxMetrics every `interval` seconds. */
export const MetricsStreamQuery = Type.Object({
  token: Type.Optional(Type.String({ maxLength: 4096, description: 'an events token from POST /v1/events/token (never an API key)' })),
  interval: Type.Optional(Type.Integer({ minimum: 1, maximum: 60, default: 2, description: 'seconds between samples' })),
});
export type MetricsStreamQuery = Static<typeof MetricsStreamQuery>;

export const SANDBOX_EVENT_KINDS = ['created', 'paused', 'resumed', 'stopped', 'started', 'deleted', 'expired', 'oom_killed'] as const;
export type SandboxEventKind = (typeof SANDBOX_EVENT_KINDS)[number];
