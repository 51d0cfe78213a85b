import { Type, type Static } from '@sinclair/typebox';
import { nullable } from './helpers.js';

/** A node of the service, as the admin API shows it (`GET /v1/admin/nodes`). */
export const AdminNode = Type.Object({
  id: Type.String(),
  status: Type.Union([Type.Literal('active'), Type.Literal('cordoned'), Type.Literal('draining')], { description: 'what the operator wants of it: active takes new sandboxes; cordoned and draining take none' }),
  up: Type.Boolean({ description: "whether it serves now: its lease runs (it heartbeats); the all-in-one's machine always" }),
  in_process: Type.Boolean({ description: "the all-in-one daemon's own machine, served in its process: no lease, no URL" }),
  url: nullable(Type.String(), 'its node API (null: in process)'),
  lease_expires_at: nullable(Type.String(), 'past this it is taken as lost'),
  heartbeat_at: nullable(Type.String()),
  heartbeat_age_seconds: nullable(Type.Integer()),
  registered_at: nullable(Type.String()),
  capacity: Type.Object({
    vcpu: Type.Number(),
    memory_mb: Type.Number(),
    disk_gb: Type.Number(),
    max_sandboxes: nullable(Type.Integer(), 'null: no bound of its own (one machine: the organizations\' quotas are the bound)'),
  }),
  committed: Type.Object(
    {
      sandboxes: Type.Integer({ description: 'active and stopped' }),
      active: Type.Integer(),
      stopped: Type.Integer(),
      vcpu: Type.Number(),
      memory_mb: Type.Number(),
      disk_gb: Type.Number(),
    },
    { description: "what the store's sandboxes on it hold (vcpu and memory: the active ones'; disk: every one's)" },
  ),
  reported: Type.Object(
    {
      sandboxes: Type.Integer({ description: 'every sandbox its runtime holds, ready ones of its warm pool included' }),
      warm_ready: Type.Integer(),
      orphans: nullable(Type.Integer(), 'sandboxes it holds that no record and no control replica owns (it destroys each after its grace); null: not counted'),
    },
    { description: 'what it said at its last heartbeat (one machine: now)' },
  ),
});
export type AdminNode = Static<typeof AdminNode>;
export const AdminNodeList = Type.Object({
  object: Type.Literal('list'),
  mode: Type.Union([Type.Literal('cluster'), Type.Literal('all-in-one')], { description: "cluster: the nodes of control's registry; all-in-one: the one machine" }),
  data: Type.Array(AdminNode),
  request_id: Type.Optional(Type.String()),
});
export type AdminNodeList = Static<typeof AdminNodeList>;

/** `POST /v1/admin/nodes/{id}/drain`: the node of a cluster, by its id. */
export const NodeDrainParams = Type.Object({ id: Type.String({ pattern: '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$', description: "the node's id (SANDBOXD_NODE_ID)" }) });
export type NodeDrainParams = Static<typeof NodeDrainParams>;
export const NodeDrainBody = Type.Object({
  stop_running: Type.Optional(
    Type.Boolean({ description: 'stop its running sandboxes first (as their owners would) and move them stopped; default false: they are listed and left to end by their deadlines or their owners' }),
  ),
});
export type NodeDrainBody = Static<typeof NodeDrainBody>;
const DrainedSandbox = { id: Type.String(), organization_id: Type.String() };
/** What one drain call did: the node takes nothing new, and what it could move in the call's time went to other nodes. */
export const NodeDrainResult = Type.Object({
  object: Type.Literal('node_drain'),
  node_id: Type.String(),
  status: Type.Literal('draining'),
  moved: Type.Array(Type.Object({ ...DrainedSandbox, status: Type.Union([Type.Literal('stopped'), Type.Literal('paused')]), node_id: Type.String({ description: 'the node it is on now' }) }), {
    description: 'moved by this call, in the state it had (a paused one keeps its files, not its processes)',
  }),
  failed: Type.Array(Type.Object({ ...DrainedSandbox, status: Type.String(), error: Type.Object({ code: Type.String(), message: Type.String() }) }), {
    description: 'not moved by this call: each is where it was, as it was; a later call tries again',
  }),
  running: Type.Array(Type.Object({ ...DrainedSandbox, expires_at: nullable(Type.String()) }), { description: 'running on the node, left to end by their deadlines or their owners' }),
  left: Type.Integer({ description: 'stopped and paused sandboxes this call had no time for: call again' }),
  drained: Type.Boolean({ description: 'no sandbox is left on the node' }),
  request_id: Type.Optional(Type.String()),
});
export type NodeDrainResult = Static<typeof NodeDrainResult>;
