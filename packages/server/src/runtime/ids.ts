// Host ids: where layers and sandboxes live in the host's uid/gid space.

/**
 * Ownership offset of layers on disk: uid/gid k inside ↔ CANONICAL_ID_OFFSET + k on the host. Above
 * any range a host user may hold in /etc/subuid (useradd hands them out from 100000 up to
 * SUB_UID_MAX, 600100000 by default), so no host user can map these ids in a user namespace of their
 * own and write to a layer. Sandboxes never run as these ids: each maps the layers to its own range
 * through idmapped mounts (runtime/id-ranges.ts); only build steps, which make layers, run as them.
 */
export const CANONICAL_ID_OFFSET = 900_000_000;
/**
 * The offset layers were stored with before (inside the default subuid space). The runtime still
 * mounts such layers (mapping them like canonical ones), so that templates and sandboxes made before
 * the change keep working until they are rebuilt; nothing new is made with it.
 */
export const LEGACY_ID_OFFSET = 100_000;
export const ID_RANGE = 65536;
