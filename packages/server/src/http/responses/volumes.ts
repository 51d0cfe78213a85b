import { DeletedResult, Volume, VolumeList } from '@sandboxd/protocol';
import type { SuccessDoc } from '../api-doc-types.js';
import { json, jsonRequest } from './payloads.js';
import { SBX, ORG, REQ, AT } from './examples.js';

const volume = {
  object: 'volume',
  id: 'vol-3f9a1c2b7d4e5f60a1b2',
  name: 'datasets',
  organization_id: ORG,
  size_gb: 10,
  mounted_by: [SBX],
  node: 'host-1',
  created_at: AT,
};

/** Volumes. */
export const VOLUME_RESPONSES: Record<string, SuccessDoc> = {
  'POST /v1/volumes': {
    status: 201,
    description: 'the volume, made and empty',
    content: json(Volume, { ...volume, used_bytes: 0, mounted_by: [], request_id: REQ }),
    request: jsonRequest({ name: 'datasets', size_gb: 10 }),
  },
  'GET /v1/volumes': { status: 200, description: "the organization's volumes, by name", content: json(VolumeList, { object: 'list', data: [volume], url: '/v1/volumes', request_id: REQ }) },
  'GET /v1/volumes/{nameOrId}': { status: 200, description: 'the volume, with what it holds', content: json(Volume, { ...volume, used_bytes: 52_428_800, request_id: REQ }) },
  'DELETE /v1/volumes/{nameOrId}': { status: 200, description: 'deleted, nothing of it left', content: json(DeletedResult, { id: 'vol-3f9a1c2b7d4e5f60a1b2', status: 'deleted', request_id: REQ }) },
};
