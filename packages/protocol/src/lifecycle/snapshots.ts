import { Type, type Static } from '@sinclair/typebox';
import { Resources } from './sandboxes.js';
import { SandboxVolume } from './volumes.js';

/** Snapshots of a sandbox's filesystem (issue 13). */
export const Snapshot = Type.Object({
  object: Type.Literal('snapshot'),
  snapshot_id: Type.String(),
  id: Type.String({ description: 'the same as snapshot_id' }),
  name: Type.Union([Type.String(), Type.Null()]),
  sandbox_id: Type.String({ description: 'the sandbox it was taken of (it may have been deleted since)' }),
  organization_id: Type.String(),
  template_id: Type.String(),
  template_name: Type.String(),
  parent_snapshot_id: Type.Union([Type.String(), Type.Null()], { description: 'the snapshot the sandbox was created from or restored to, if any' }),
  size: Type.Integer({ description: 'bytes this snapshot stores itself: what changed since its template or its parent' }),
  created_at: Type.String(),
  resources: Resources,
  volumes: Type.Optional(Type.Array(SandboxVolume, { description: 'the volumes its sandbox mounted: a create from it mounts them again (their files are not in the snapshot)' })),
  request_id: Type.Optional(Type.String()),
});
export type Snapshot = Static<typeof Snapshot>;

export const CreateSnapshotBody = Type.Object(
  { name: Type.Optional(Type.String({ minLength: 1, maxLength: 128, pattern: '^[^\\u0000-\\u001f]*$' })) },
  { additionalProperties: false },
);
export type CreateSnapshotBody = Static<typeof CreateSnapshotBody>;

export const ListSnapshotsQuery = Type.Object({
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000 })),
  cursor: Type.Optional(Type.String({ maxLength: 200 })),
  sandbox_id: Type.Optional(Type.String({ minLength: 1, maxLength: 128 })),
});
export type ListSnapshotsQuery = Static<typeof ListSnapshotsQuery>;

export const SnapshotList = Type.Object({
  object: Type.Literal('list'),
  data: Type.Array(Snapshot),
  has_more: Type.Boolean(),
  next_cursor: Type.Union([Type.String(), Type.Null()]),
  url: Type.String(),
  request_id: Type.Optional(Type.String()),
});

export const PromoteSnapshotBody = Type.Object(
  { alias: Type.String({ minLength: 1, maxLength: 63, pattern: '^[a-z0-9][a-z0-9._-]*$', description: 'the new template\'s name' }) },
  { additionalProperties: false },
);
export type PromoteSnapshotBody = Static<typeof PromoteSnapshotBody>;

export const RestoreBody = Type.Object({ snapshot_id: Type.String({ minLength: 1, maxLength: 200 }) }, { additionalProperties: false });
export type RestoreBody = Static<typeof RestoreBody>;
