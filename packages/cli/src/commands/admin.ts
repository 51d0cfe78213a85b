import { Admin, type ApiKeyInfo } from '@sandboxd/sdk';
import { UsageError } from '../args.js';
import type { Command } from '../command.js';
import { json, keyValues, relativeTime, table } from '../output.js';

// The admin API: organizations and API keys, for a key of the operator's organization with the
// `admin` scope. `sandboxd orgs|keys` on the host does the same without a running service.

export const orgLs: Command = {
  name: 'org ls',
  summary: 'list organizations (admin)',
  args: '',
  options: {},
  minArgs: 0,
  maxArgs: 0,
  async run(ctx) {
    const list = await Admin.listOrgs({ client: ctx.client, signal: ctx.signal });
    ctx.out(ctx.json ? json(list) : table(['NAME', 'ID', 'CREATED'], list.map((o) => [o.name, o.id, relativeTime(o.createdAt)])));
    return 0;
  },
};

export const orgCreate: Command = {
  name: 'org create',
  summary: 'create an organization (admin)',
  args: 'NAME',
  options: {},
  minArgs: 1,
  maxArgs: 1,
  async run(ctx, { positionals }) {
    const org = await Admin.createOrg(positionals[0]!, { client: ctx.client, signal: ctx.signal });
    ctx.out(ctx.json ? json(org) : `created organization ${org.name} (${org.id})\n`);
    return 0;
  },
};

export const orgRm: Command = {
  name: 'org rm',
  summary: 'delete an organization with its keys, sandboxes, snapshots, templates and uploads (admin)',
  args: 'NAME',
  options: {},
  minArgs: 1,
  maxArgs: 1,
  async run(ctx, { positionals }) {
    const r = await Admin.deleteOrg(positionals[0]!, { client: ctx.client, signal: ctx.signal });
    const d = r.deleted;
    ctx.out(ctx.json ? json(r) : `deleted organization ${r.name} (${r.id}): ${d.sandboxes} sandbox(es), ${d.snapshots} snapshot(s), ${d.templates} template(s), ${d.uploads} upload(s), ${d.keys} key(s)\n`);
    return 0;
  },
};

const keyRow = (k: ApiKeyInfo) => [k.id, k.org ?? k.orgId, k.name, k.scopes.join(','), relativeTime(k.createdAt), k.revokedAt ? `revoked ${relativeTime(k.revokedAt)}` : 'active'];

export const keyLs: Command = {
  name: 'key ls',
  summary: 'list API keys, without their secrets (admin)',
  args: '',
  options: { org: { type: 'string', value: 'ORG', help: "only this organization's keys (name or id)" } },
  minArgs: 0,
  maxArgs: 0,
  async run(ctx, { values }) {
    const list = await Admin.listKeys({ client: ctx.client, signal: ctx.signal, org: values.org as string | undefined });
    ctx.out(ctx.json ? json(list) : table(['ID', 'ORG', 'NAME', 'SCOPES', 'CREATED', 'STATE'], list.map(keyRow)));
    return 0;
  },
};

export const keyCreate: Command = {
  name: 'key create',
  summary: 'create an API key; its secret is printed this once only (admin)',
  args: '--org ORG',
  options: {
    org: { type: 'string', value: 'ORG', help: 'the organization (name or id)' },
    scopes: { type: 'string', value: 'A,B', help: 'comma-separated scopes (default: sandboxes and templates read/write)' },
    name: { type: 'string', value: 'LABEL', help: 'a label for the key' },
    format: { type: 'string', value: 'FORMAT', help: "e2b: a secret shaped e2b_<hex>, as E2B's clients expect (default: sandboxd)" },
  },
  examples: ['sbx key create --org acme --scopes sandboxes:read,sandboxes:write --name ci', 'sbx key create --org acme --format e2b --name e2b-clients'],
  minArgs: 0,
  maxArgs: 0,
  async run(ctx, { values }) {
    const org = values.org as string | undefined;
    if (!org) throw new UsageError('name the organization with --org ORG', 'key create');
    const scopes = typeof values.scopes === 'string' ? values.scopes.split(',').map((s) => s.trim()).filter(Boolean) : undefined;
    const format = values.format as string | undefined;
    if (format !== undefined && format !== 'sandboxd' && format !== 'e2b') throw new UsageError('--format is sandboxd or e2b', 'key create');
    const key = await Admin.createKey({ org, name: values.name as string | undefined, scopes, ...(format ? { format } : {}) }, { client: ctx.client, signal: ctx.signal });
    if (ctx.json) ctx.out(json(key));
    else {
      ctx.out(keyValues([['id', key.id], ['org', key.org ?? key.orgId], ['scopes', key.scopes.join(',')], ['secret', key.secret]]));
      ctx.err('The secret is shown only now; keep it.\n');
    }
    return 0;
  },
};

export const keyRevoke: Command = {
  name: 'key revoke',
  summary: 'revoke API keys at once (admin)',
  args: 'KEY_ID...',
  options: {},
  minArgs: 1,
  maxArgs: Infinity,
  async run(ctx, { positionals }) {
    const out: ApiKeyInfo[] = [];
    for (const id of positionals) {
      out.push(await Admin.revokeKey(id, { client: ctx.client, signal: ctx.signal }));
      if (!ctx.json) ctx.out(`${id} revoked\n`);
    }
    if (ctx.json) ctx.out(json(positionals.length === 1 ? out[0] : out));
    return 0;
  },
};
