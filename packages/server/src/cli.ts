#!/usr/bin/env node
import { parseArgs } from 'node:util';
import { ServiceError } from '@sandboxd/protocol';
import { loadConfig } from './config/index.js';
import { KEY_FORMATS, KeyService, parseScopes, type KeyFormat } from './services/keys.js';
import { publicOrgId } from './services/org-ids.js';
import { start } from './main.js';
import { openImages, openStore } from './roles/shared.js';
import { keygen, nodeCredential } from './cli-cluster.js';
import { readStatus, statusExitCode, statusJson, statusText } from './cli-status.js';
import { admitNode, drainNode, drainSummary, listNodes, nodeTableRows, removeNode, setNodeStatus, type DrainAnswer } from './cli-nodes.js';
import { controlApi } from './cli-control.js';
import { LIMIT_OPTIONS, applyLimitFlags, describeLimits, listRow } from './cli-limits.js';
import { applyEnvFile, CONTROL_ENV_FILE } from './cli-env.js';

const USAGE = `sandboxd: self-hosted sandbox execution service

Usage:
  sandboxd [serve]                                  start the service (root)
  sandboxd control                                  the API and gateway of a cluster, over its nodes
                                                    (SANDBOXD_DATABASE_URL,
                                                    SANDBOXD_CLUSTER_SIGNING_KEY_FILE); any number
                                                    of replicas
  sandboxd edge                                     serves the sandboxes' public_host and previews
                                                    of a cluster (host mode; SANDBOXD_DATABASE_URL,
                                                    SANDBOXD_CLUSTER_SIGNING_KEY_FILE); any number
                                                    of replicas
  sandboxd node                                     run this machine as a node of a cluster: its
                                                    runtime, served to control (root; needs
                                                    SANDBOXD_CLUSTER_VERIFY_KEY_FILE, see
                                                    docs/cluster.md)
  sandboxd cluster keygen --out DIR                 a new key pair of a cluster: DIR/cluster-signing.pem
                                                    (0600, control's and edge's) and DIR/cluster-verify.pem
                                                    (public, for every node); overwrites nothing
  sandboxd cluster status [--json]                  the store, control replicas, edges, nodes with their
                                                    leases, orphans, and a verdict; exits 1 when
                                                    something is wrong (the store, no replica up, a node
                                                    lost with sandboxes)
  sandboxd cluster node-credential ID --out FILE [--days N]
                                                    node ID's registry credential (0600), signed with
                                                    SANDBOXD_CLUSTER_SIGNING_KEY_FILE (or --signing-key):
                                                    the node registers through control with it
                                                    (SANDBOXD_NODE_CREDENTIAL_FILE), no database access;
                                                    good for N days (default 30, at most 365), the node
                                                    renews it past half that; one made after
                                                    \`nodes remove ID\` admits that node again
  sandboxd orgs create NAME                         create an organization
  sandboxd orgs list                                every organization with its limits (* = set for it)
  sandboxd orgs delete NAME [--url URL] [--api-key-file FILE]
                                                    delete an organization and everything it made (through the running service)
  sandboxd orgs limits NAME [--max-vcpu N] [--max-memory-mb N] [--max-disk-gb N]
                    [--max-sandboxes N] [--max-total-memory-mb N] [--max-total-disk-gb N]
                    [--default-timeout-seconds N] [--max-timeout-seconds N]
                    [--max-snapshot-storage-mb N]
                                                    show (no flags) or set an organization's limits:
                                                    N, 0 or unlimited (no limit), default (the
                                                    configured value); applies at once
  sandboxd keys create --org NAME [--scopes a,b] [--name LABEL] [--format e2b]
                                                    create an API key (secret shown once); --format
                                                    e2b: shaped e2b_<hex>, as E2B's clients expect
  sandboxd keys list [--org NAME]
  sandboxd keys revoke KEY_ID
  sandboxd nodes list                               the cluster's nodes: status, up, what they hold
  sandboxd nodes cordon|uncordon NODE               takes nothing new / active again
  sandboxd nodes drain NODE [--stop-running] [--timeout SECONDS] [--url URL] [--api-key-file FILE]
                                                    takes nothing new and empties its warm pool; control
                                                    moves its stopped and paused sandboxes to other
                                                    nodes (--stop-running: its running ones too, stopped
                                                    first), then this waits for the running ones to end
                                                    (--timeout: at most that long); run again, it goes
                                                    on; control at URL (default SANDBOXD_HOST and
                                                    SANDBOXD_PORT) with an admin key (default the
                                                    bootstrap key)
  sandboxd nodes remove NODE [--force]              forgets it; its sandboxes are marked deleted; it
                                                    cannot register again with the credentials it had
  sandboxd nodes admit NODE                         clears a removal: the node may register again (one
                                                    through control: with its old credentials too)
  sandboxd images import REF FILE                   import a docker-save / OCI archive as base image REF
  sandboxd images pull REF                          pull REF from the configured registry
  sandboxd images list
  sandboxd help

Scopes: sandboxes:read, sandboxes:write, templates:read, templates:write, metrics:read, admin
(default: the sandboxes and templates scopes). metrics:read reads the node-wide /metrics. admin stands
for every scope; on a key of the operator's organization (default) it also opens the admin API
(/v1/admin: organizations and keys).
Configuration comes from the environment (SANDBOXD_DATA_DIR, ...; see docs/configuration.md).
--env-file FILE (any command) adds the variables of FILE that the environment does not set. orgs,
keys, nodes and cluster read ${CONTROL_ENV_FILE} (control's, in the systemd layout) when it exists
and neither SANDBOXD_DATABASE_URL nor SANDBOXD_DATA_DIR is set.`;

function table(rows: Array<Record<string, string>>): string {
  if (rows.length === 0) return '(none)';
  const cols = Object.keys(rows[0]!);
  const width = cols.map((c) => Math.max(c.length, ...rows.map((r) => (r[c] ?? '').length)));
  const line = (vals: string[]) => vals.map((v, i) => v.padEnd(width[i]!)).join('  ').trimEnd();
  return [line(cols.map((c) => c.toUpperCase())), ...rows.map((r) => line(cols.map((c) => r[c] ?? '')))].join('\n');
}

async function admin(args: string[]): Promise<number> {
  const [group, verb, ...rest] = args;
  const { values, positionals } = parseArgs({
    args: rest,
    allowPositionals: true,
    options: {
      org: { type: 'string' },
      scopes: { type: 'string' },
      name: { type: 'string' },
      format: { type: 'string' },
      json: { type: 'boolean' },
      url: { type: 'string' },
      'api-key-file': { type: 'string' },
      ...LIMIT_OPTIONS,
    },
  });
  const config = loadConfig();
  const store = await openStore(config);
  const keys = new KeyService(store);
  const out = (v: unknown, human: string) => process.stdout.write(`${values.json ? JSON.stringify(v, null, 2) : human}\n`);
  try {
    if (group === 'orgs' && verb === 'create' && positionals[0]) {
      const org = await keys.createOrg(positionals[0]);
      out(org, `created organization ${org.name} (${org.id})`);
    } else if (group === 'orgs' && verb === 'list') {
      const orgs = await store.orgs.list();
      const described = await Promise.all(orgs.map(async (o) => ({ ...o, ...(await describeLimits(store, config.limits, o, config.dataDir)).json })));
      const rows = await Promise.all(orgs.map((o) => listRow(store, config.limits, o)));
      out(described, `${table(rows)}\n* set for this organization; other values are the configured defaults`);
    } else if (group === 'orgs' && verb === 'delete' && positionals[0]) {
      // Its sandboxes are the running service's to delete: this asks it (the admin API).
      const control = controlApi(config, { url: values.url, keyFile: values['api-key-file'] });
      const r = await control<{ name: string; id: string; deleted: Record<string, number> }>('DELETE', `/v1/admin/orgs/${encodeURIComponent(positionals[0])}`);
      const d = r.deleted;
      out(r, `deleted organization ${r.name} (${r.id}): ${d.sandboxes} sandbox(es), ${d.snapshots} snapshot(s), ${d.templates} template(s), ${d.uploads} upload(s), ${d.keys} key(s)`);
    } else if (group === 'orgs' && verb === 'limits' && positionals[0]) {
      const org = await keys.org(positionals[0]).catch(() => undefined);
      if (!org) throw new ServiceError('VALIDATION_ERROR', `no organization named ${positionals[0]} (a name, or an id in either form)`);
      const current = await store.orgs.limits(org.id);
      const next = applyLimitFlags(current, values);
      if (JSON.stringify(next) !== JSON.stringify(current)) await store.orgs.setLimits(org.id, next);
      const { json, rows } = await describeLimits(store, config.limits, org, config.dataDir);
      out(json, `organization ${org.name} (${org.id})\n${table(rows)}`);
    } else if (group === 'keys' && verb === 'create') {
      if (!values.org) throw new ServiceError('VALIDATION_ERROR', 'keys create needs --org NAME');
      const org = (await keys.org(values.org).catch(() => undefined)) ?? (await keys.createOrg(values.org));
      if (values.format !== undefined && !KEY_FORMATS.includes(values.format as KeyFormat)) {
        throw new ServiceError('VALIDATION_ERROR', `--format must be one of ${KEY_FORMATS.join(', ')}`);
      }
      const { key, secret } = await keys.createKey(org.id, { name: values.name, scopes: parseScopes(values.scopes), format: values.format as KeyFormat | undefined });
      out(
        { id: key.id, organization: org.name, organization_id: publicOrgId(org.id), scopes: key.scopes, api_key: secret },
        `created API key ${key.id} for organization ${org.name} with scopes ${key.scopes.join(',')}\n${secret}\n(the secret is shown only now)`,
      );
    } else if (group === 'keys' && verb === 'list') {
      const org = values.org ? await store.orgs.byName(values.org) : undefined;
      if (values.org && !org) throw new ServiceError('VALIDATION_ERROR', `no organization named ${values.org}`);
      const list = await store.keys.list(org?.id);
      const orgs = new Map((await store.orgs.list()).map((o) => [o.id, o.name]));
      out(
        list.map(({ hash: _h, ...k }) => k),
        table(
          list.map((k) => ({
            id: k.id,
            org: orgs.get(k.orgId) ?? k.orgId,
            name: k.name,
            scopes: k.scopes.join(','),
            created: k.createdAt,
            revoked: k.revokedAt ?? '',
          })),
        ),
      );
    } else if (group === 'keys' && verb === 'revoke' && positionals[0]) {
      await keys.revoke(positionals[0]);
      out({ id: positionals[0], revoked: true }, `revoked ${positionals[0]}`);
    } else {
      process.stderr.write(`${USAGE}\n`);
      return 2;
    }
    return 0;
  } finally {
    store.close();
  }
}

async function nodesCommand(args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: { json: { type: 'boolean' }, force: { type: 'boolean' }, timeout: { type: 'string' }, 'stop-running': { type: 'boolean' }, url: { type: 'string' }, 'api-key-file': { type: 'string' } },
  });
  const [verb, id] = positionals;
  const store = await openStore(loadConfig());
  const out = (v: unknown, human: string) => process.stdout.write(`${values.json ? JSON.stringify(v, null, 2) : human}\n`);
  try {
    if (verb === 'list') {
      const list = await listNodes(store);
      out(list, list.length ? table(nodeTableRows(list)) : '(no nodes: `sandboxd node` registers one when it has SANDBOXD_DATABASE_URL)');
    } else if ((verb === 'cordon' || verb === 'uncordon') && id) {
      const n = await setNodeStatus(store, id, verb === 'cordon' ? 'cordoned' : 'active');
      out(n, `node ${n.id} is ${n.status}`);
    } else if (verb === 'drain' && id) {
      const timeout = values.timeout === undefined ? undefined : Number(values.timeout);
      if (timeout !== undefined && !(Number.isFinite(timeout) && timeout >= 0)) throw new ServiceError('VALIDATION_ERROR', '--timeout takes seconds');
      // The moves are control's (it holds the nodes and the layers): this asks it, call after call.
      const control = controlApi(loadConfig(), { url: values.url, keyFile: values['api-key-file'] });
      // A first ^C ends the drain after the call under way (what it began, control finishes); a second, at once.
      const ac = new AbortController();
      process.once('SIGINT', () => ac.abort());
      const r = await drainNode((body) => control<DrainAnswer>('POST', `/v1/admin/nodes/${encodeURIComponent(id)}/drain`, body), {
        stopRunning: values['stop-running'],
        timeoutMs: timeout === undefined ? undefined : timeout * 1000,
        signal: ac.signal,
        onProgress: (p) => process.stderr.write(`node ${id}: draining: moved ${p.moved} of ${p.of}${p.failed ? ` (${p.failed} could not move)` : ''}; ${p.running} running left\n`),
      });
      out({ id, ...r }, drainSummary(id, r));
      return r.drained ? 0 : 1;
    } else if (verb === 'remove' && id) {
      const r = await removeNode(store, id, { force: values.force });
      out(
        { id, removed: true, ...r },
        `removed node ${id}; ${r.sandboxes} sandbox(es) on it marked deleted (node_removed); it cannot register again until admitted: a new credential (\`sandboxd cluster node-credential ${id}\`), or \`sandboxd nodes admit ${id}\` for a node on the database`,
      );
    } else if (verb === 'admit' && id) {
      const r = await admitNode(store, id);
      out({ id, ...r }, r.admitted ? `node ${id} may register again` : `node ${id} was not removed: nothing to admit`);
    } else {
      process.stderr.write(`${USAGE}\n`);
      return 2;
    }
    return 0;
  } finally {
    store.close();
  }
}

async function clusterCommand(args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({ args, allowPositionals: true, options: { out: { type: 'string' }, json: { type: 'boolean' }, 'signing-key': { type: 'string' }, days: { type: 'string' } } });
  if (positionals[0] === 'status' && positionals.length === 1) {
    const outcome = await readStatus(loadConfig());
    process.stdout.write(`${values.json ? JSON.stringify(statusJson(outcome), null, 2) : statusText(outcome, table)}\n`);
    return statusExitCode(outcome);
  }
  if (positionals[0] === 'node-credential' && positionals.length === 2 && values.out) {
    const key = values['signing-key'] ?? process.env.SANDBOXD_CLUSTER_SIGNING_KEY_FILE;
    if (!key) {
      process.stderr.write('sandboxd cluster node-credential: the signing key: --signing-key FILE or SANDBOXD_CLUSTER_SIGNING_KEY_FILE\n');
      return 2;
    }
    if (values.days !== undefined && !/^\d{1,4}$/.test(values.days)) throw new ServiceError('VALIDATION_ERROR', `--days takes a whole number of days, not "${values.days.slice(0, 20)}"`);
    const { file, expiresAt } = await nodeCredential(positionals[1]!, key, values.out, values.days === undefined ? undefined : Number(values.days));
    process.stdout.write(
      values.json
        ? `${JSON.stringify({ node_id: positionals[1], credential_file: file, expires_at: expiresAt }, null, 2)}\n`
        : `wrote ${file} (mode 0600): node ${positionals[1]}'s registry credential (SANDBOXD_NODE_CREDENTIAL_FILE on that node, with SANDBOXD_CONTROL_URL), good until ${expiresAt}; the node renews it past half its life\n`,
    );
    return 0;
  }
  if (positionals[0] === 'keygen' && positionals.length === 1 && values.out) {
    const { signing, verify } = keygen(values.out);
    process.stdout.write(
      values.json
        ? `${JSON.stringify({ signing_key_file: signing, verify_key_file: verify }, null, 2)}\n`
        : `wrote ${signing} (mode 0600): the signing key, for control and edge only (SANDBOXD_CLUSTER_SIGNING_KEY_FILE)\n` +
            `wrote ${verify} (mode 0644): the verify key, for every node (SANDBOXD_CLUSTER_VERIFY_KEY_FILE)\n`,
    );
    return 0;
  }
  process.stderr.write(`${USAGE}\n`);
  return 2;
}

async function imagesCommand(args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({ args, allowPositionals: true, options: { json: { type: 'boolean' } } });
  const [verb, ref, file] = positionals;
  const config = loadConfig();
  const log = (line: string) => process.stderr.write(`${line}\n`);
  const images = openImages(config, log);
  if (verb === 'import' && ref && file) {
    const rec = await images.importArchive(file, ref);
    process.stdout.write(values.json ? `${JSON.stringify(rec, null, 2)}\n` : `imported ${ref}: ${rec.layers.length} layer(s)\n`);
    return 0;
  }
  if (verb === 'pull' && ref) {
    const rec = await images.pull(ref);
    process.stdout.write(values.json ? `${JSON.stringify(rec, null, 2)}\n` : `pulled ${ref}: ${rec.layers.length} layer(s)\n`);
    return 0;
  }
  if (verb === 'list') {
    const list = await images.images.list();
    process.stdout.write(
      values.json
        ? `${JSON.stringify(list, null, 2)}\n`
        : `${table(list.map((r) => ({ ref: r.ref, layers: String(r.layers.length), source: String((r as unknown as Record<string, unknown>).source ?? '') })))}\n`,
    );
    return 0;
  }
  process.stderr.write(`${USAGE}\n`);
  return 2;
}

async function main(args: string[]): Promise<number> {
  const chosen = applyEnvFile(args, process.env);
  if (chosen.defaulted) process.stderr.write(`sandboxd: settings from ${chosen.file} (neither SANDBOXD_DATABASE_URL nor SANDBOXD_DATA_DIR is set)\n`);
  const argv = chosen.argv;
  const [cmd] = argv;
  if (cmd === undefined || cmd === 'serve' || cmd === 'control') {
    await start(cmd ?? 'serve');
    return -1;
  }
  if (cmd === 'edge' || cmd === 'node') {
    const role = (await start(cmd))!;
    const stop = (signal: string) => {
      process.stderr.write(`sandboxd ${cmd}: ${signal}: shutting down${cmd === 'node' ? '; sandboxes keep running' : ''}\n`);
      void role.close().then(() => process.exit(0));
    };
    process.once('SIGTERM', () => stop('SIGTERM'));
    process.once('SIGINT', () => stop('SIGINT'));
    return -1;
  }
  if (cmd === 'help' || cmd === '--help' || cmd === '-h') {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  if (cmd === 'keys' || cmd === 'orgs') return admin(argv);
  if (cmd === 'images') return imagesCommand(argv.slice(1));
  if (cmd === 'nodes') return nodesCommand(argv.slice(1));
  if (cmd === 'cluster') return clusterCommand(argv.slice(1));
  process.stderr.write(`unknown command "${cmd}"\n\n${USAGE}\n`);
  return 2;
}

main(process.argv.slice(2)).then(
  (code) => {
    if (code >= 0) process.exit(code);
  },
  (err: unknown) => {
    // The operator's own terminal: the whole story, a tool's output (detail) included.
    const detail = err instanceof ServiceError && err.detail ? ` (${err.detail})` : '';
    process.stderr.write(`sandboxd: ${err instanceof Error ? err.message : String(err)}${detail}\n`);
    process.exit(1);
  },
);
