import { Sandbox, Snapshot, type SnapshotInfo } from '@sandboxd/sdk';
import { parsePositiveInt } from '../args.js';
import type { Command } from '../command.js';
import { bytes, json, keyValues, relativeTime, table } from '../output.js';
import { settingsOf } from './sandboxes.js';

function describeSnapshot(s: SnapshotInfo): string {
  const r = s.resources;
  return keyValues([
    ['id', s.snapshotId],
    ['name', s.name ?? '-'],
    ['sandbox', s.sandboxId],
    ['template', s.templateName + (s.templateId && s.templateId !== s.templateName ? ` (${s.templateId})` : '')],
    ['parent', s.parentSnapshotId ?? '-'],
    ['size', bytes(s.size)],
    ['resources', `${r.vcpu} vCPU, ${r.memoryMb} MB memory, ${r.diskGb} GB disk`],
    ['created', `${s.createdAt} (${relativeTime(s.createdAt)})`],
  ]);
}

export const snapshotCreate: Command = {
  name: 'snapshot create',
  summary: "save a sandbox's files and settings as a snapshot; print its id",
  args: 'ID',
  details:
    'A snapshot keeps the filesystem, environment and template settings of the sandbox: `sbx create --snapshot`\n' +
    'starts new sandboxes from it, `sbx restore` puts the sandbox back to it, and `sbx snapshot promote` makes a\n' +
    'template of it. A running sandbox is frozen for the copy and resumes by itself. `sbx snapshot ID` is short\n' +
    'for this. --json prints the whole snapshot.',
  examples: ['SNAP=$(sbx snapshot create $ID --name before-upgrade)', 'sbx snapshot $ID', 'sbx snapshot create $ID --json'],
  options: {
    name: { type: 'string', value: 'NAME', help: 'a name for it (1 to 128 characters)' },
  },
  minArgs: 1,
  maxArgs: 1,
  async run(ctx, { positionals, values }) {
    const sb = Sandbox.fromId(positionals[0]!, { client: ctx.client });
    const snap = await sb.snapshot({ name: values.name as string | undefined, signal: ctx.signal });
    ctx.out(ctx.json ? json(snap) : snap.snapshotId + '\n');
    return 0;
  },
};

export const snapshotLs: Command = {
  name: 'snapshot ls',
  summary: 'list snapshots',
  args: '',
  details: 'Newest first. SIZE is what each snapshot stores itself (what changed since its template or its parent).',
  examples: ['sbx snapshot ls', 'sbx snapshot ls --sandbox $ID -q'],
  options: {
    sandbox: { type: 'string', value: 'ID', help: 'only the snapshots taken of this sandbox' },
    limit: { type: 'string', short: 'n', value: 'N', help: 'show at most N snapshots' },
    quiet: { type: 'boolean', short: 'q', help: 'print only the snapshot ids' },
  },
  minArgs: 0,
  maxArgs: 0,
  async run(ctx, { values }) {
    const maxItems = values.limit ? parsePositiveInt(values.limit as string, '--limit') : undefined;
    const list = await Snapshot.list({ client: ctx.client, sandboxId: values.sandbox as string | undefined, maxItems, signal: ctx.signal }).toArray();
    if (ctx.json) ctx.out(json(list));
    else if (values.quiet) ctx.out(list.map((s) => s.snapshotId + '\n').join(''));
    else if (list.length === 0) ctx.err('no snapshots\n');
    else
      ctx.out(
        table(
          ['ID', 'NAME', 'SANDBOX', 'TEMPLATE', 'SIZE', 'CREATED'],
          list.map((s) => [s.snapshotId, s.name ?? '-', s.sandboxId, s.templateName, bytes(s.size), relativeTime(s.createdAt)]),
        ),
      );
    return 0;
  },
};

export const snapshotGet: Command = {
  name: 'snapshot get',
  summary: 'show a snapshot',
  args: 'SNAPSHOT_ID',
  options: {},
  minArgs: 1,
  maxArgs: 1,
  async run(ctx, { positionals }) {
    const snap = await Snapshot.get(positionals[0]!, { client: ctx.client, signal: ctx.signal });
    ctx.out(ctx.json ? json(snap) : describeSnapshot(snap));
    return 0;
  },
};

export const snapshotRm: Command = {
  name: 'snapshot rm',
  summary: 'delete snapshots',
  args: 'SNAPSHOT_ID...',
  options: {},
  minArgs: 1,
  maxArgs: Infinity,
  async run(ctx, { positionals }) {
    const results: Array<{ id: string; status: string }> = [];
    let failed = false;
    for (const id of positionals) {
      try {
        results.push(await Snapshot.delete(id, { client: ctx.client, signal: ctx.signal }));
        if (!ctx.json) ctx.out(`${id} deleted\n`);
      } catch (err) {
        if (positionals.length === 1) throw err;
        failed = true;
        ctx.err(`sbx: ${id}: ${err instanceof Error ? err.message : String(err)}\n`);
      }
    }
    if (ctx.json) ctx.out(json(positionals.length === 1 ? results[0] : results));
    return failed ? 1 : 0;
  },
};

export const snapshotPromote: Command = {
  name: 'snapshot promote',
  summary: 'make a template of a snapshot',
  args: 'SNAPSHOT_ID ALIAS',
  details: "ALIAS is the new template's name (lowercase letters, digits, '.', '_', '-'); sandboxes created with\n`--template ALIAS` start with the snapshot's files. --json prints the template.",
  examples: ['sbx snapshot promote $SNAP my-app-v2 && sbx create --template my-app-v2'],
  options: {},
  minArgs: 2,
  maxArgs: 2,
  async run(ctx, { positionals }) {
    const [id, alias] = positionals as [string, string];
    const t = await Snapshot.toTemplate(id, alias, { client: ctx.client, signal: ctx.signal });
    ctx.out(ctx.json ? json(t) : `template ${t.name} made of ${id}\n`);
    return 0;
  },
};

export const fork: Command = {
  name: 'fork',
  summary: 'make new sandboxes with a copy of a sandbox as it is now; print their ids',
  args: 'ID',
  details:
    "Each fork is a new running sandbox with the source's filesystem at this moment (a running source is frozen\n" +
    "for the copy and resumes by itself). The settings not given are the source's. Prints one id a line;\n" +
    '--json prints the sandboxes.',
  examples: ['sbx fork $ID', 'for F in $(sbx fork $ID -n 3 --timeout 30m); do sbx exec "$F" -- ./try.sh & done; wait'],
  options: {
    count: { type: 'string', short: 'n', value: 'N', help: 'how many sandboxes to make (default 1)' },
    timeout: { type: 'string', value: 'DURATION', help: "delete each fork after this long (300, 90s, 15m, 2h; default the source's)" },
    'no-internet': { type: 'boolean', help: 'no network access from inside the forks' },
    'allow-out': { type: 'string', multiple: true, value: 'ENTRY', help: "reach only these (repeatable; default the source's rules)" },
    'deny-out': { type: 'string', multiple: true, value: 'ENTRY', help: 'never reach this, even when allowed (repeatable)' },
    'on-timeout': { type: 'string', value: 'delete|pause', help: 'what the timeout does' },
    'idle-timeout': { type: 'string', value: 'DURATION', help: 'pause a fork after this long unused' },
    'auto-resume': { type: 'boolean', help: 'a request to a paused fork resumes it' },
    env: { type: 'string', short: 'e', multiple: true, value: 'K=V', help: 'environment variable (repeatable)' },
  },
  minArgs: 1,
  maxArgs: 1,
  async run(ctx, { positionals, values }) {
    const count = values.count ? parsePositiveInt(values.count as string, '--count') : 1;
    const forks = await Sandbox.fromId(positionals[0]!, { client: ctx.client }).fork(count, { ...settingsOf(values), signal: ctx.signal });
    ctx.out(ctx.json ? json(forks.map((f) => f.info)) : forks.map((f) => f.id + '\n').join(''));
    return 0;
  },
};

export const restore: Command = {
  name: 'restore',
  summary: "put a sandbox's files back as a snapshot has them",
  args: 'ID SNAPSHOT_ID',
  details:
    'The snapshot must be of the sandbox (taken of it, or of a state it descends from). The sandbox keeps its id,\n' +
    'URL and token; its processes restart, so what lived only in memory is gone. --json prints the sandbox.',
  examples: ['sbx restore $ID $SNAP'],
  options: {},
  minArgs: 2,
  maxArgs: 2,
  async run(ctx, { positionals }) {
    const [id, snapshot] = positionals as [string, string];
    const info = await Sandbox.fromId(id, { client: ctx.client }).restore(snapshot, { signal: ctx.signal });
    ctx.out(ctx.json ? json(info) : `${id} restored to ${snapshot}\n`);
    return 0;
  },
};
