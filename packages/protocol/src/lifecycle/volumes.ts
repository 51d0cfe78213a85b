import { Type, type Static } from '@sinclair/typebox';

/** Volumes (issue 32): a filesystem of its own that outlives sandboxes and that several share. */
export const VOLUME_NAME_PATTERN = '^[a-z0-9][a-z0-9._-]{0,62}$';
export const MAX_VOLUMES_PER_SANDBOX = 16;

export const VolumeMount = Type.Object(
  {
    name: Type.String({ minLength: 1, maxLength: 80, description: "the volume's name or id (one of the organization's)" }),
    path: Type.String({ minLength: 1, maxLength: 1024, description: "where it appears inside the sandbox: absolute, normalized, not '/' and not under /proc, /sys, /dev or /.sb" }),
    read_only: Type.Optional(Type.Boolean({ description: 'default false' })),
  },
  { additionalProperties: false },
);
export type VolumeMount = Static<typeof VolumeMount>;

/** A volume as a sandbox's answer lists it. */
export const SandboxVolume = Type.Object({ volume_id: Type.String(), name: Type.String(), path: Type.String(), read_only: Type.Boolean() });
export type SandboxVolume = Static<typeof SandboxVolume>;

export const CreateVolumeBody = Type.Object(
  {
    name: Type.String({ pattern: VOLUME_NAME_PATTERN, description: 'unique in the organization: lowercase letters, digits, ".", "_" and "-", up to 63' }),
    size_gb: Type.Integer({ minimum: 1, maximum: 16384, description: 'its size: a hard limit (ENOSPC inside past it); counted in max_total_disk_gb' }),
  },
  { additionalProperties: false },
);
export type CreateVolumeBody = Static<typeof CreateVolumeBody>;

export const Volume = Type.Object({
  object: Type.Literal('volume'),
  id: Type.String(),
  name: Type.String(),
  organization_id: Type.String(),
  size_gb: Type.Integer(),
  used_bytes: Type.Optional(Type.Integer({ description: 'what its filesystem holds (GET of one volume)' })),
  mounted_by: Type.Array(Type.String(), { description: 'the sandboxes (not deleted) that mount it' }),
  node: Type.Optional(Type.String({ description: 'the machine it lives on' })),
  created_at: Type.String(),
  request_id: Type.Optional(Type.String()),
});
export type Volume = Static<typeof Volume>;

export const VolumeList = Type.Object({
  object: Type.Literal('list'),
  data: Type.Array(Volume),
  url: Type.String(),
  request_id: Type.Optional(Type.String()),
});
export type VolumeList = Static<typeof VolumeList>;

export const DeleteVolumeQuery = Type.Object({
  force: Type.Optional(Type.Boolean({ description: 'delete it even while sandboxes mount it: those sandboxes are deleted first' })),
});
export type DeleteVolumeQuery = Static<typeof DeleteVolumeQuery>;
