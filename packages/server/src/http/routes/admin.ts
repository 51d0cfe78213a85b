import type { FastifyInstance } from 'fastify';
import { AdminKeysQuery, CreateKeyBody, CreateOrgBody, DeletedOrganization, KeyIdParams, ServiceError } from '@sandboxd/protocol';
import type { Services } from '../services.js';
import type { ApiKeyRow, OrgRow } from '../../store/types/index.js';
import { operatorOnly, principalOf } from '../auth.js';
import { deleteOrganization } from '../../services/org-deletion.js';
import { NameOrIdParams } from './params.js';
import { publicOrgId } from '../../services/org-ids.js';

const org = (o: OrgRow) => ({ id: publicOrgId(o.id), name: o.name, created_at: o.createdAt });

/** A key as the admin API shows it: never its secret or hash. */
const key = (k: ApiKeyRow, orgName: string | undefined) => ({
  id: k.id,
  org_id: publicOrgId(k.orgId),
  org: orgName ?? null,
  name: k.name,
  scopes: k.scopes,
  created_at: k.createdAt,
  revoked_at: k.revokedAt,
  last_used_at: k.lastUsedAt,
});

/**
 * The admin API: what `sandboxd orgs|keys` does on the host, over HTTP, for the operator's keys
 * (KeyService.requireOperator). Organizations: list, create, delete (with everything they made).
 * Keys: list, create (the secret is in that answer only), revoke.
 */
export function adminRoutes(app: FastifyInstance, s: Services): void {
  const admin = operatorOnly(s.keys);
  const orgNames = async () => new Map((await s.store.orgs.list()).map((o) => [o.id, o.name]));

  app.get('/v1/admin/orgs', { preHandler: admin }, async (req) => {
    const list = await s.store.orgs.list();
    return { object: 'list', data: list.map(org), request_id: req.id };
  });

  app.post<{ Body: CreateOrgBody }>('/v1/admin/orgs', { preHandler: admin, schema: { body: CreateOrgBody } }, async (req, reply) => {
    const created = await s.keys.createOrg(req.body.name);
    req.log.info({ org: created.name, id: created.id, by_key: principalOf(req).keyId }, 'organization created');
    return reply.code(201).send({ ...org(created), request_id: req.id });
  });

  app.delete<{ Params: NameOrIdParams }>('/v1/admin/orgs/:nameOrId', { preHandler: admin, schema: { params: NameOrIdParams, response: { 200: DeletedOrganization } } }, async (req) => {
    const target = await s.keys.org(req.params.nameOrId);
    if (target.id === principalOf(req).orgId) {
      throw new ServiceError('INVALID_STATE', 'a key cannot delete its own organization', { org: target.name });
    }
    const deleted = await deleteOrganization(s, target);
    req.log.info({ org: target.name, id: target.id, deleted, by_key: principalOf(req).keyId }, 'organization deleted');
    return { ...org(target), status: 'deleted', deleted, request_id: req.id };
  });

  app.get<{ Querystring: AdminKeysQuery }>('/v1/admin/keys', { preHandler: admin, schema: { querystring: AdminKeysQuery } }, async (req) => {
    const only = req.query.org ? await s.keys.org(req.query.org) : undefined;
    const names = await orgNames();
    const list = await s.store.keys.list(only?.id);
    return { object: 'list', data: list.map((k) => key(k, names.get(k.orgId))), request_id: req.id };
  });

  app.post<{ Body: CreateKeyBody }>(
    '/v1/admin/keys',
    { preHandler: admin, schema: { body: CreateKeyBody } },
    async (req, reply) => {
      const target = await s.keys.org(req.body.org);
      const { key: created, secret } = await s.keys.createKey(target.id, { name: req.body.name, scopes: req.body.scopes, format: req.body.format });
      req.log.info({ key: created.id, org: target.name, scopes: created.scopes, by_key: principalOf(req).keyId }, 'API key created');
      return reply.code(201).send({ ...key(created, target.name), secret, request_id: req.id });
    },
  );

  app.delete<{ Params: KeyIdParams }>('/v1/admin/keys/:id', { preHandler: admin, schema: { params: KeyIdParams } }, async (req) => {
    if (req.params.id === principalOf(req).keyId) {
      throw new ServiceError('INVALID_STATE', 'a key cannot revoke itself over the API (that would lock this client out); use another admin key, or sandboxd keys revoke on the host', { id: req.params.id });
    }
    const target = await s.store.keys.byId(req.params.id);
    if (target && (await s.keys.isBootstrapKey(target))) {
      throw new ServiceError('INVALID_STATE', 'the bootstrap key is the operator\'s way in and the daemon starts with it: revoke it on the host (sandboxd keys revoke) after setting SANDBOXD_BOOTSTRAP_API_KEY to another', { id: req.params.id });
    }
    const revoked = await s.keys.revoke(req.params.id);
    req.log.info({ key: revoked.id, by_key: principalOf(req).keyId }, 'API key revoked');
    return { ...key(revoked, (await orgNames()).get(revoked.orgId)), request_id: req.id };
  });
}
