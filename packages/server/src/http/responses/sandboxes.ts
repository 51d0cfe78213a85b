import { Type } from '@sinclair/typebox';
import {
  ForkResult,
  NetworkPolicyResult,
  Sandbox,
  SandboxActionResult,
  SandboxList,
  SandboxMetrics,
  SandboxPorts,
  SandboxPreview,
  SetTimeoutResult,
  TokenResult,
} from '@sandboxd/protocol';
import type { SuccessDoc } from '../api-doc-types.js';
import { json, jsonRequest, sse, event } from './payloads.js';
import { SBX, REQ, AT, LATER, SANDBOX_TOKEN, sandbox } from './examples.js';

const metrics = {
  sandbox_id: SBX,
  status: 'running',
  timestamp: LATER,
  cpu: { usage_seconds: 3.42, vcpu: 2 },
  memory: { used_bytes: 187_392_000, limit_bytes: 2_147_483_648 },
  disk: { used_bytes: 48_238_592, total_bytes: 10_737_418_240 },
  network: { rx_bytes: 1_284_311, tx_bytes: 90_112 },
  pids: 7,
  oom_kills: 0,
  egress_denied: 0,
};

/** A sandbox: its lifecycle, deadline, token, metrics, ports, network and forks. */
export const SANDBOX_RESPONSES: Record<string, SuccessDoc> = {
  'POST /v1/sandboxes': {
    status: 201,
    description: 'created and running: its agent answers at public_host with auth_token',
    content: json(Sandbox, { ...sandbox, auth_token: SANDBOX_TOKEN, token_expires_at: '2025-06-03T09:14:07.000Z', request_id: REQ }),
    request: jsonRequest({ template_name: 'code-interpreter', timeout_seconds: 3600, internet_access: true, env_vars: { APP_ENV: 'staging' } }),
  },
  'GET /v1/sandboxes': {
    status: 200,
    description: 'a page of sandboxes, newest first',
    content: json(SandboxList, { object: 'list', data: [sandbox], has_more: true, next_cursor: Buffer.from(JSON.stringify([AT, SBX])).toString('base64url'), url: '/v1/sandboxes', request_id: REQ }),
  },
  'GET /v1/sandboxes/{id}': { status: 200, description: 'the sandbox (never its token)', content: json(Sandbox, { ...sandbox, request_id: REQ }) },
  'DELETE /v1/sandboxes/{id}': { status: 200, description: 'deleted', content: json(SandboxActionResult, { id: SBX, status: 'deleted', request_id: REQ }) },
  'POST /v1/sandboxes/{id}/pause': { status: 200, description: 'paused', content: json(SandboxActionResult, { id: SBX, status: 'paused', request_id: REQ }) },
  'POST /v1/sandboxes/{id}/resume': { status: 200, description: 'running again', content: json(SandboxActionResult, { id: SBX, status: 'running', request_id: REQ }) },
  'POST /v1/sandboxes/{id}/stop': { status: 200, description: 'stopped', content: json(SandboxActionResult, { id: SBX, status: 'stopped', request_id: REQ }) },
  'POST /v1/sandboxes/{id}/start': { status: 200, description: 'booted again', content: json(SandboxActionResult, { id: SBX, status: 'running', request_id: REQ }) },
  'PUT /v1/sandboxes/{id}/timeout': {
    status: 200,
    description: 'the new deadline',
    content: json(SetTimeoutResult, { id: SBX, timeout_seconds: 7200, expires_at: '2025-06-02T11:20:41.907Z', request_id: REQ }),
    request: jsonRequest({ timeout_seconds: 7200 }),
  },
  'POST /v1/sandboxes/{id}/token/refresh': {
    status: 200,
    description: 'a new token for public_host',
    content: json(TokenResult, { id: SBX, auth_token: SANDBOX_TOKEN, token_expires_at: '2025-06-03T09:14:07.000Z', request_id: REQ }),
  },
  'GET /v1/sandboxes/{id}/metrics': { status: 200, description: 'its resource use now', content: json(SandboxMetrics, { ...metrics, request_id: REQ }) },
  'GET /v1/sandboxes/{id}/ports': {
    status: 200,
    description: 'the ports something listens on, with where',
    content: json(SandboxPorts, {
      object: 'list',
      data: [
        { port: 3000, addresses: ['127.0.0.1'], loopback_only: true },
        { port: 8000, addresses: ['0.0.0.0', '::'], loopback_only: false },
      ],
      request_id: REQ,
    }),
  },
  'GET /v1/sandboxes/{id}/ports/{port}': {
    status: 200,
    description: 'the preview URL of the port',
    content: json(SandboxPreview, {
      port: 3000,
      url: 'http://127.0.0.1:40007',
      public: false,
      signed_url: 'http://127.0.0.1:40007/_sandboxd/auth?token=eyJhbGciOiJFZERTQSIsInR5cCI6InNhbmRib3hkLXByZXZpZXcrand0In0.e30.c2ln',
      signed_url_expires_at: '2025-06-02T09:24:11.000Z',
      request_id: REQ,
    }),
  },
  'PUT /v1/sandboxes/{id}/ports/{port}': {
    status: 200,
    description: 'the preview, public or private as asked',
    content: json(SandboxPreview, { port: 3000, url: 'http://127.0.0.1:40007', public: true, request_id: REQ }),
    request: jsonRequest({ public: true }),
  },
  'GET /v1/sandboxes/{id}/network': {
    status: 200,
    description: 'the egress policy that applies now',
    content: json(NetworkPolicyResult, { internet_access: true, allow_out: ['pypi.org', '*.pythonhosted.org', '140.82.112.0/20'], deny_out: [], request_id: REQ }),
  },
  'PUT /v1/sandboxes/{id}/network': {
    status: 200,
    description: 'the policy as it now applies (entries normalized: lowercase names, CIDRs with their host bits cleared)',
    content: json(NetworkPolicyResult, { internet_access: true, allow_out: ['pypi.org', '*.pythonhosted.org', '140.82.112.0/20'], deny_out: ['203.0.113.7'], request_id: REQ }),
    request: jsonRequest({ allow_out: ['pypi.org', '*.pythonhosted.org', '140.82.112.0/20'], deny_out: ['203.0.113.7'] }),
  },
  'POST /v1/sandboxes/{id}/fork': {
    status: 201,
    description: 'the new sandboxes, running, each with its own token',
    content: json(ForkResult, {
      object: 'list',
      data: [
        { ...sandbox, id: 'sbf0rk1a2b3c4d5e6f7g8h', auth_token: SANDBOX_TOKEN, token_expires_at: '2025-06-03T09:14:09.000Z' },
        { ...sandbox, id: 'sbf0rk2b3c4d5e6f7g8h9i', auth_token: SANDBOX_TOKEN, token_expires_at: '2025-06-03T09:14:09.000Z' },
      ],
      source_id: SBX,
      request_id: REQ,
    }),
    request: jsonRequest({ count: 2, timeout_seconds: 600 }, undefined, false),
  },
  'GET /v1/sandboxes/{id}/metrics/stream': {
    status: 200,
    description: 'a stream of samples, until the client closes it or the sandbox is gone',
    content: sse(
      { metrics: SandboxMetrics, end: Type.Object({ id: Type.String(), reason: Type.String({ description: 'an error code: NOT_FOUND, SANDBOX_EXPIRED, ...' }) }) },
      `: connected\n\n${event('metrics', metrics)}${event('metrics', { ...metrics, timestamp: '2025-06-02T09:14:11.030Z', cpu: { usage_seconds: 3.61, vcpu: 2 } })}${event('end', { id: SBX, reason: 'NOT_FOUND' })}`,
    ),
  },
};
