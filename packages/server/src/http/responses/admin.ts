import {
  AdminNodeList,
  ApiKey,
  ApiKeyList,
  CreatedApiKey,
  DeletedOrganization,
  NodeDrainResult,
  Organization,
  OrganizationList,
} from '@sandboxd/protocol';
import type { SuccessDoc } from '../api-doc-types.js';
import { json, jsonRequest } from './payloads.js';
import { SBX, ORG, KEY, REQ, AT, LATER } from './examples.js';

const key = { id: KEY, org_id: ORG, org: 'acme', name: 'ci', scopes: ['sandboxes:read', 'sandboxes:write'], created_at: AT, revoked_at: null, last_used_at: null };

/** The operator's API (/v1/admin): nodes, organizations, keys. */
export const ADMIN_RESPONSES: Record<string, SuccessDoc> = {
  'POST /v1/admin/nodes/{id}/drain': {
    status: 200,
    description: 'what this call moved, what it could not, what runs there still',
    content: json(NodeDrainResult, {
      object: 'node_drain',
      node_id: 'node-a',
      status: 'draining',
      moved: [{ id: SBX, organization_id: ORG, status: 'stopped', node_id: 'node-b' }],
      failed: [],
      running: [{ id: 'sbx2k9m4q8t1w6z3r5npa7', organization_id: ORG, expires_at: LATER }],
      left: 0,
      drained: false,
      request_id: REQ,
    }),
    request: jsonRequest({ stop_running: false }, undefined, false),
  },
  'GET /v1/admin/nodes': {
    status: 200,
    description: 'the nodes',
    content: {
      'application/json': {
        schema: AdminNodeList,
        examples: {
          cluster: {
            summary: "a cluster's nodes: one up, one lost",
            value: {
              object: 'list',
              mode: 'cluster',
              data: [
                {
                  id: 'node-a',
                  status: 'active',
                  up: true,
                  in_process: false,
                  url: 'http://10.0.0.11:7070',
                  lease_expires_at: LATER,
                  heartbeat_at: AT,
                  heartbeat_age_seconds: 2,
                  registered_at: '2025-05-30T12:00:00.000Z',
                  capacity: { vcpu: 16, memory_mb: 65536, disk_gb: 500, max_sandboxes: 1000 },
                  committed: { sandboxes: 3, active: 2, stopped: 1, vcpu: 4, memory_mb: 4096, disk_gb: 30 },
                  reported: { sandboxes: 5, warm_ready: 2, orphans: 0 },
                },
                {
                  id: 'node-b',
                  status: 'cordoned',
                  up: false,
                  in_process: false,
                  url: 'http://10.0.0.12:7070',
                  lease_expires_at: AT,
                  heartbeat_at: AT,
                  heartbeat_age_seconds: 95,
                  registered_at: '2025-05-30T12:00:00.000Z',
                  capacity: { vcpu: 16, memory_mb: 65536, disk_gb: 500, max_sandboxes: 1000 },
                  committed: { sandboxes: 1, active: 1, stopped: 0, vcpu: 2, memory_mb: 2048, disk_gb: 10 },
                  reported: { sandboxes: 1, warm_ready: 0, orphans: null },
                },
              ],
              request_id: REQ,
            },
          },
          allInOne: {
            summary: 'the all-in-one daemon: its one machine',
            value: {
              object: 'list',
              mode: 'all-in-one',
              data: [
                {
                  id: 'sandbox-host',
                  status: 'active',
                  up: true,
                  in_process: true,
                  url: null,
                  lease_expires_at: null,
                  heartbeat_at: null,
                  heartbeat_age_seconds: null,
                  registered_at: null,
                  capacity: { vcpu: 8, memory_mb: 32096, disk_gb: 250, max_sandboxes: null },
                  committed: { sandboxes: 2, active: 2, stopped: 0, vcpu: 3, memory_mb: 2560, disk_gb: 20 },
                  reported: { sandboxes: 4, warm_ready: 2, orphans: null },
                },
              ],
              request_id: REQ,
            },
          },
        },
      },
    },
  },
  'GET /v1/admin/orgs': {
    status: 200,
    description: 'every organization',
    content: json(OrganizationList, { object: 'list', data: [{ id: 'org_0a1b2c3d4e5f60718293', name: 'default', created_at: '2025-05-30T12:00:00.000Z' }, { id: ORG, name: 'acme', created_at: AT }], request_id: REQ }),
  },
  'POST /v1/admin/orgs': { status: 201, description: 'created', content: json(Organization, { id: ORG, name: 'acme', created_at: AT, request_id: REQ }), request: jsonRequest({ name: 'acme' }) },
  'DELETE /v1/admin/orgs/{nameOrId}': {
    status: 200,
    description: 'deleted, with everything it made',
    content: json(DeletedOrganization, { id: ORG, name: 'acme', created_at: AT, status: 'deleted', deleted: { keys: 2, sandboxes: 3, snapshots: 1, templates: 1, uploads: 4 }, request_id: REQ }),
  },
  'GET /v1/admin/keys': {
    status: 200,
    description: 'the keys, revoked ones included, without their secrets',
    content: json(ApiKeyList, { object: 'list', data: [key, { ...key, id: 'key_c4d1a8e63f0b9275', name: 'old', revoked_at: LATER, last_used_at: AT }], request_id: REQ }),
  },
  'POST /v1/admin/keys': {
    status: 201,
    description: 'created; the secret is shown in this answer only',
    content: json(CreatedApiKey, { ...key, secret: 'sbd_T0zHLHxUUPb8Uti9SGij1MLzqjHH-dYp', request_id: REQ }),
    request: jsonRequest({ org: 'acme', name: 'ci', scopes: ['sandboxes:read', 'sandboxes:write'] }),
  },
  'DELETE /v1/admin/keys/{id}': { status: 200, description: 'revoked', content: json(ApiKey, { ...key, revoked_at: LATER, request_id: REQ }) },
};
