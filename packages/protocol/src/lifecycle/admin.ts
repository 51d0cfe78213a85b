import { Type, type Static } from '@sinclair/typebox';
import { API_SCOPES } from './account.js';
import { nullable } from './helpers.js';

// The admin API (/v1/admin): organizations and API keys, for keys of the operator's organization
// (`default`) that hold the `admin` scope.
const ORG_NAME = Type.String({
  pattern: '^(?![oO][rR][gG]_)[A-Za-z0-9][A-Za-z0-9._-]{0,62}$',
  description: '1-63 letters, digits, ".", "_" or "-", starting with a letter or digit; not starting with "org_" (ids do)',
});
export const CreateOrgBody = Type.Object({ name: ORG_NAME });
export type CreateOrgBody = Static<typeof CreateOrgBody>;
export const CreateKeyBody = Type.Object({
  org: Type.String({ minLength: 1, maxLength: 100, description: "the organization's name or id" }),
  name: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'a label for the key' })),
  scopes: Type.Optional(
    Type.Array(Type.Union(API_SCOPES.map((s) => Type.Literal(s))), {
      minItems: 1,
      uniqueItems: true,
      description: 'default: sandboxes:read, sandboxes:write, templates:read, templates:write',
    }),
  ),
  format: Type.Optional(
    Type.Union([Type.Literal('sandboxd'), Type.Literal('e2b')], {
      description: "the secret's shape: `sbd_...` (default), or `e2b_` and 40 hex digits, the shape E2B's clients accept without E2B_VALIDATE_API_KEY=false (the same key otherwise)",
    }),
  ),
});
export type CreateKeyBody = Static<typeof CreateKeyBody>;
export const KeyIdParams = Type.Object({ id: Type.String({ pattern: '^key_[0-9a-f]{16}$' }) });
export type KeyIdParams = Static<typeof KeyIdParams>;
export const AdminKeysQuery = Type.Object({ org: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })) });
export type AdminKeysQuery = Static<typeof AdminKeysQuery>;

/** An organization, as the admin API shows it. */
export const Organization = Type.Object({
  id: Type.String({ description: 'digits only (a decimal number of up to 25 digits); the admin API and CLI accept it, the org_ form and the name' }),
  name: Type.String(),
  created_at: Type.String(),
  request_id: Type.Optional(Type.String()),
});
export type Organization = Static<typeof Organization>;
/** `DELETE /v1/admin/orgs/{nameOrId}`: the organization, and how many of what it made went with it. */
export const DeletedOrganization = Type.Object({
  id: Type.String(),
  name: Type.String(),
  created_at: Type.String(),
  status: Type.Literal('deleted'),
  deleted: Type.Object({
    keys: Type.Integer({ minimum: 0 }),
    sandboxes: Type.Integer({ minimum: 0 }),
    snapshots: Type.Integer({ minimum: 0 }),
    templates: Type.Integer({ minimum: 0 }),
    uploads: Type.Integer({ minimum: 0 }),
  }),
  request_id: Type.Optional(Type.String()),
});
export const OrganizationList = Type.Object({ object: Type.Literal('list'), data: Type.Array(Organization), request_id: Type.Optional(Type.String()) });

/** An API key, as the admin API shows it: never its secret or its hash. */
export const ApiKey = Type.Object({
  id: Type.String({ description: 'key_ and 16 hex digits' }),
  org_id: Type.String(),
  org: nullable(Type.String(), "the organization's name"),
  name: Type.String(),
  scopes: Type.Array(Type.String({ description: API_SCOPES.join(', ') })),
  created_at: Type.String(),
  revoked_at: nullable(Type.String()),
  last_used_at: nullable(Type.String()),
  request_id: Type.Optional(Type.String()),
});
export type ApiKey = Static<typeof ApiKey>;
export const ApiKeyList = Type.Object({ object: Type.Literal('list'), data: Type.Array(ApiKey), request_id: Type.Optional(Type.String()) });
/** `POST /v1/admin/keys` (201): the key and, in this answer only, its secret. */
export const CreatedApiKey = Type.Composite([ApiKey, Type.Object({ secret: Type.String({ description: 'the API key itself (sbd_...): shown once, stored hashed' }) })]);
