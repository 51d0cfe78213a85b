import { DeletedResult, Sandbox, Snapshot, SnapshotList, Template } from '@sandboxd/protocol';
import type { SuccessDoc } from '../api-doc-types.js';
import { json, jsonRequest } from './payloads.js';
import { SBX, ORG, TPL, BUILD, REQ, LATER, SNAP, sandbox, template } from './examples.js';

const snapshot = {
  object: 'snapshot',
  snapshot_id: SNAP,
  id: SNAP,
  name: 'deps installed',
  sandbox_id: SBX,
  organization_id: ORG,
  template_id: TPL,
  template_name: 'code-interpreter',
  parent_snapshot_id: null,
  size: 104_857_600,
  created_at: LATER,
  resources: { vcpu: 2, memory_mb: 2048, disk_gb: 10, disk_mb: 10240 },
};

/** Snapshots: taken of a sandbox, listed, restored, made into a template. */
export const SNAPSHOT_RESPONSES: Record<string, SuccessDoc> = {
  'POST /v1/sandboxes/{id}/snapshots': {
    status: 201,
    description: 'the snapshot, taken; a running sandbox runs again',
    content: json(Snapshot, { ...snapshot, request_id: REQ }),
    request: jsonRequest({ name: 'deps installed' }, undefined, false),
  },
  'GET /v1/snapshots': {
    status: 200,
    description: 'a page of snapshots, newest first',
    content: json(SnapshotList, { object: 'list', data: [snapshot], has_more: false, next_cursor: null, url: '/v1/snapshots', request_id: REQ }),
  },
  'GET /v1/snapshots/{id}': { status: 200, description: 'the snapshot', content: json(Snapshot, { ...snapshot, request_id: REQ }) },
  'DELETE /v1/snapshots/{id}': { status: 200, description: 'deleted', content: json(DeletedResult, { id: SNAP, status: 'deleted', request_id: REQ }) },
  'POST /v1/snapshots/{id}/template': {
    status: 201,
    description: 'the new template, active',
    content: json(Template, {
      ...template,
      id: BUILD,
      name: 'my-env',
      display_name: 'my-env',
      description: `From snapshot ${SNAP} (deps installed) of a code-interpreter sandbox`,
      category: 'custom',
      is_public: false,
      build_id: null,
      tags: ['custom', 'snapshot'],
      request_id: REQ,
    }),
    request: jsonRequest({ alias: 'my-env' }),
  },
  'POST /v1/sandboxes/{id}/restore': {
    status: 200,
    description: 'the sandbox, with the snapshot\'s files, running again (or stopped, if it was)',
    content: json(Sandbox, { ...sandbox, request_id: REQ }),
    request: jsonRequest({ snapshot_id: SNAP }),
  },
};
