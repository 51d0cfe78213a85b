import { EventsTokenResult, SandboxEvent } from '@sandboxd/protocol';
import type { SuccessDoc } from '../api-doc-types.js';
import { json, jsonRequest, sse, event } from './payloads.js';
import { SBX, REQ, AT, LATER, EVENTS_TOKEN } from './examples.js';

/** The events streams and their tokens. */
export const EVENT_RESPONSES: Record<string, SuccessDoc> = {
  'GET /v1/sandboxes/{id}/events': {
    status: 200,
    description: "the sandbox's events, as they happen, until the client closes the stream",
    content: sse(Object.fromEntries(['created', 'paused', 'resumed', 'stopped', 'started', 'deleted', 'expired', 'oom_killed'].map((k) => [k, SandboxEvent])), `: connected\n\n${event('paused', { id: SBX, status: 'paused', at: AT })}: ping\n\n${event('resumed', { id: SBX, status: 'running', at: LATER })}`),
  },
  'GET /v1/events': {
    status: 200,
    description: "every sandbox's events, as they happen",
    content: sse(
      Object.fromEntries(['created', 'paused', 'resumed', 'stopped', 'started', 'deleted', 'expired', 'oom_killed'].map((k) => [k, SandboxEvent])),
      `: connected\n\n${event('created', { id: SBX, status: 'running', at: AT })}${event('expired', { id: 'sb0m4k8t2x6q9w1z5v3r7c', status: 'deleted', at: LATER, reason: 'expired' })}`,
    ),
  },
  'POST /v1/events/token': {
    status: 200,
    description: 'a token for ?token= on the events streams',
    content: json(EventsTokenResult, { token: EVENTS_TOKEN, expires_at: '2025-06-02T09:20:00.000Z', sandbox_id: SBX, request_id: REQ }),
    request: jsonRequest({ sandbox_id: SBX }, undefined, false),
  },
};
