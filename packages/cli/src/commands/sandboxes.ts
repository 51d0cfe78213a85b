import { Sandbox, type ForkOptions, type NetworkPolicy, type SandboxInfo } from '@sandboxd/sdk';
import { parseDuration, parseKeyValues, parsePositiveInt, UsageError } from '../args.js';
import type { Command, Context, Parsed } from '../command.js';
import { bytes, json, keyValues, relativeTime, table } from '../output.js';
import { parseVolumeMounts } from './volumes.js';

function sandboxRows(list: SandboxInfo[]): string {
  return table(
    ['ID', 'STATUS', 'TEMPLATE', 'CREATED', 'EXPIRES'],
    list.map((s) => [s.id, s.status, s.templateName, relativeTime(s.createdAt), relativeTime(s.expiresAt)]),
  );
}

export function describeSandbox(s: SandboxInfo): string {
  return keyValues([
    ['id', s.id],
    ['status', s.status],
    ['template', s.templateName + (s.templateId && s.templateId !== s.templateName ? ` (${s.templateId})` : '')],
    ['resources', `${s.resources.vcpu} vCPU, ${s.resources.memoryMb} MB memory, ${s.resources.diskGb} GB disk`],
    ['internet', s.internetAccess ? 'yes' : 'no'],
    ...egressLines(s.network),
    ['public host', s.publicHost || '-'],
    ['region', s.region || '-'],
    ['created', `${s.createdAt} (${relativeTime(s.createdAt)})`],
    ['expires', s.expiresAt ? `${s.expiresAt} (${relativeTime(s.expiresAt)})` : 'never'],
    ['on timeout', s.onTimeout === 'pause' ? 'pause' : 'delete'],
    ['idle timeout', s.idleTimeoutSeconds ? `${s.idleTimeoutSeconds}s, then pause` : 'none'],
    ['auto resume', s.autoResume ? 'yes' : 'no'],
    ...(s.volumes?.length ? [['volumes', s.volumes.map((v) => `${v.name}:${v.path}${v.readOnly ? ':ro' : ''}`).join(', ')] as [string, string]] : []),
  ]);
}

/** The allow and deny lists, when there are any. */
function egressLines(p: NetworkPolicy): Array<[string, string]> {
  const lines: Array<[string, string]> = [];
  if (p.allowOut.length) lines.push(['allow out', p.allowOut.join(', ')]);
  if (p.denyOut.length) lines.push(['deny out', p.denyOut.join(', ')]);
  return lines;
}

function onTimeoutOf(v: string | undefined): 'delete' | 'pause' | undefined {
  if (v === undefined || v === 'delete' || v === 'pause') return v;
  throw new UsageError(`--on-timeout must be delete or pause, not ${JSON.stringify(v)}`);
}

/** The settings `create` and `fork` share, from their options; those not given are left out. */
export function settingsOf(values: Parsed['values']): Omit<ForkOptions, 'signal' | 'requestTimeoutMs'> {
  const envVars = parseKeyValues(values.env as string[] | undefined);
  return {
    timeoutSeconds: values.timeout ? parseDuration(values.timeout as string) : undefined,
    internetAccess: values['no-internet'] ? false : undefined,
    allowOut: values['allow-out'] as string[] | undefined,
    denyOut: values['deny-out'] as string[] | undefined,
    onTimeout: onTimeoutOf(values['on-timeout'] as string | undefined),
    idleTimeoutSeconds: values['idle-timeout'] ? parseDuration(values['idle-timeout'] as string, '--idle-timeout') : undefined,
    autoResume: values['auto-resume'] ? true : undefined,
    envVars: Object.keys(envVars).length ? envVars : undefined,
  };
}

const quiet = { type: 'boolean', short: 'q', help: 'print only the sandbox id(s)' } as const;

export const create: Command = {
  name: 'create',
  summary: 'create a sandbox',
  args: '',
  details:
    'Creates a sandbox from a template, or from a snapshot with its files, environment and template settings,\n' +
    'and prints it; it is running when this returns.',
  examples: [
    'sbx create --template code-interpreter --timeout 30m --env DEBUG=1',
    'sbx create --allow-out pypi.org --allow-out files.pythonhosted.org',
    'sbx create --snapshot $SNAPSHOT_ID --timeout 1h',
    'sbx create --volume datasets:/data --volume cache:/root/.cache',
    'ID=$(sbx create -q)',
  ],
  options: {
    template: { type: 'string', short: 't', value: 'NAME', help: 'template name (default code-interpreter)' },
    snapshot: { type: 'string', value: 'SNAPSHOT_ID', help: 'start from this snapshot instead of a template' },
    timeout: { type: 'string', value: 'DURATION', help: 'delete the sandbox after this long (300, 90s, 15m, 2h; default never)' },
    'no-internet': { type: 'boolean', help: 'no network access from inside the sandbox' },
    'allow-out': { type: 'string', multiple: true, value: 'ENTRY', help: 'reach only these: IPv4 address, CIDR, domain or *.domain (repeatable)' },
    'deny-out': { type: 'string', multiple: true, value: 'ENTRY', help: 'never reach this, even when allowed (repeatable)' },
    'on-timeout': { type: 'string', value: 'delete|pause', help: 'what the timeout does (default delete; pause keeps it paused for the retention time)' },
    'idle-timeout': { type: 'string', value: 'DURATION', help: 'pause the sandbox after this long unused (default never)' },
    'auto-resume': { type: 'boolean', help: 'a request to the paused sandbox resumes it' },
    env: { type: 'string', short: 'e', multiple: true, value: 'K=V', help: 'environment variable (repeatable)' },
    region: { type: 'string', value: 'REGION', help: 'preferred region' },
    volume: { type: 'string', multiple: true, value: 'NAME:/PATH[:ro]', help: 'mount a volume (`sbx volume create`) at PATH (repeatable)' },
    quiet,
  },
  minArgs: 0,
  maxArgs: 0,
  async run(ctx, { values }) {
    if (values.template !== undefined && values.snapshot !== undefined) throw new UsageError('--template and --snapshot exclude each other', 'create');
    const sb = await Sandbox.create({
      client: ctx.client,
      template: values.template as string | undefined,
      snapshot: values.snapshot as string | undefined,
      ...settingsOf(values),
      region: values.region as string | undefined,
      volumes: parseVolumeMounts(values.volume as string[] | undefined),
      signal: ctx.signal,
    });
    if (ctx.json) ctx.out(json(sb.info));
    else if (values.quiet) ctx.out(sb.id + '\n');
    else ctx.out(describeSandbox(sb.info));
    return 0;
  },
};

export const ls: Command = {
  name: 'ls',
  summary: 'list sandboxes',
  args: '',
  options: {
    status: { type: 'string', value: 'STATUS', help: 'only running, paused or stopped sandboxes' },
    template: { type: 'string', value: 'NAME', help: 'only sandboxes of this template' },
    limit: { type: 'string', short: 'n', value: 'N', help: 'show at most N sandboxes' },
    quiet,
  },
  minArgs: 0,
  maxArgs: 0,
  async run(ctx, { values }) {
    const maxItems = values.limit ? parsePositiveInt(values.limit as string, '--limit') : undefined;
    const list: SandboxInfo[] = [];
    for await (const sb of Sandbox.list({ client: ctx.client, status: values.status as string | undefined, template: values.template as string | undefined, maxItems, signal: ctx.signal })) {
      list.push(sb.info);
    }
    if (ctx.json) ctx.out(json(list));
    else if (values.quiet) ctx.out(list.map((s) => s.id + '\n').join(''));
    else if (list.length === 0) ctx.err('no sandboxes\n');
    else ctx.out(sandboxRows(list));
    return 0;
  },
};

export const get: Command = {
  name: 'get',
  summary: 'show a sandbox',
  args: 'ID',
  options: {},
  minArgs: 1,
  maxArgs: 1,
  async run(ctx, { positionals }) {
    const sb = await Sandbox.connect(positionals[0]!, { client: ctx.client, signal: ctx.signal });
    ctx.out(ctx.json ? json(sb.info) : describeSandbox(sb.info));
    return 0;
  },
};

export const stats: Command = {
  name: 'stats',
  summary: "show a sandbox's cpu, memory, disk and network use now",
  args: 'ID',
  details:
    'CPU time and network bytes count from when the sandbox last started; egress denied (connections and datagrams its egress rules refused) from when the daemon did. --json prints the whole record.',
  examples: ['sbx stats $ID', 'sbx stats $ID --json'],
  options: {},
  minArgs: 1,
  maxArgs: 1,
  async run(ctx, { positionals }) {
    const r = await Sandbox.fromId(positionals[0]!, { client: ctx.client }).resources({ signal: ctx.signal });
    if (ctx.json) {
      ctx.out(json(r));
      return 0;
    }
    const pct = (a: number, b: number) => (b > 0 ? ` (${((a / b) * 100).toFixed(1)} %)` : '');
    ctx.out(
      keyValues([
        ['status', r.status],
        ['cpu', `${r.cpu.usageSeconds.toFixed(2)} s of ${r.cpu.vcpu} vCPU`],
        ['memory', `${bytes(r.memory.usedBytes)} of ${bytes(r.memory.limitBytes)}${pct(r.memory.usedBytes, r.memory.limitBytes)}`],
        ['disk', `${bytes(r.disk.usedBytes)} of ${bytes(r.disk.totalBytes)}${pct(r.disk.usedBytes, r.disk.totalBytes)}`],
        ['network', `${bytes(r.network.rxBytes)} in, ${bytes(r.network.txBytes)} out`],
        ['processes', String(r.pids)],
        ['oom kills', String(r.oomKills)],
        ['egress denied', String(r.egressDenied)],
      ]),
    );
    return 0;
  },
};

export const ports: Command = {
  name: 'ports',
  summary: 'show the ports something listens on inside a sandbox',
  args: 'ID',
  details: "Read from the kernel's tables of the sandbox's network (loopback included), not asked of the sandbox.",
  examples: ['sbx ports $ID', 'sbx ports $ID --json'],
  options: {},
  minArgs: 1,
  maxArgs: 1,
  async run(ctx, { positionals }) {
    const list = await Sandbox.fromId(positionals[0]!, { client: ctx.client }).ports({ signal: ctx.signal });
    if (ctx.json) ctx.out(json(list));
    else if (list.length === 0) ctx.out('nothing listens\n');
    else ctx.out(table(['PORT', 'ADDRESSES', 'LISTENS ON'], list.map((p) => [String(p.port), p.addresses.join(', '), p.loopbackOnly ? 'loopback' : 'network'])));
    return 0;
  },
};

export const preview: Command = {
  name: 'preview',
  summary: 'the URL of a port inside a sandbox (private unless made public)',
  args: 'ID PORT',
  details:
    'A private preview takes the sandbox token in the X-Sandboxd-Token header, or open the signed link (10 minutes) in a browser: it sets a cookie for that port.',
  examples: ['sbx preview $ID 3000', 'sbx preview $ID 3000 --public', 'sbx preview $ID 3000 --private --json'],
  options: {
    public: { type: 'boolean', help: 'open it to anyone who has the URL' },
    private: { type: 'boolean', help: 'only with the sandbox token or a signed link (the default)' },
  },
  minArgs: 2,
  maxArgs: 2,
  async run(ctx, { positionals, values }) {
    if (values.public && values.private) throw new UsageError('--public and --private exclude each other');
    const port = Number(positionals[1]);
    if (!/^\d{1,5}$/.test(positionals[1]!) || port < 1 || port > 65535) throw new UsageError(`PORT must be a number from 1 to 65535, got "${positionals[1]}"`);
    const p = await Sandbox.fromId(positionals[0]!, { client: ctx.client }).getPreviewUrl(port, {
      signal: ctx.signal,
      ...(values.public ? { public: true } : values.private ? { public: false } : {}),
    });
    if (ctx.json) ctx.out(json(p));
    else ctx.out(`${p.url}\n${p.public ? '  public: anyone with the URL\n' : `  private: send X-Sandboxd-Token, or open in a browser (until ${p.signedUrlExpiresAt}):\n  ${p.signedUrl}\n`}`);
    return 0;
  },
};

type Verb = 'pause' | 'resume' | 'stop' | 'start' | 'kill';

/** Applies one action to each id; reports every failure and exits 1 if any failed. */
async function each(ctx: Context, ids: string[], verb: Verb, past: string): Promise<number> {
  const results: Array<{ id: string; status: string }> = [];
  let failed: unknown;
  for (const id of ids) {
    try {
      const r = await Sandbox.fromId(id, { client: ctx.client })[verb]({ signal: ctx.signal });
      results.push(r);
      if (!ctx.json) ctx.out(`${id} ${past}\n`);
    } catch (err) {
      if (ids.length === 1) throw err;
      failed = err;
      ctx.err(`sbx: ${id}: ${err instanceof Error ? err.message : String(err)}\n`);
    }
  }
  if (ctx.json) ctx.out(json(ids.length === 1 ? results[0] : results));
  if (failed) return 1;
  return 0;
}

function action(name: string, verb: Verb, past: string, summary: string): Command {
  return { name, summary, args: 'ID...', options: {}, minArgs: 1, maxArgs: Infinity, run: (ctx, { positionals }) => each(ctx, positionals, verb, past) };
}

export const pause = action('pause', 'pause', 'paused', 'pause sandboxes (memory and processes kept)');
export const resume = action('resume', 'resume', 'resumed', 'resume paused sandboxes');
export const stop = action('stop', 'stop', 'stopped', 'stop sandboxes (processes end, files kept)');
export const start = action('start', 'start', 'started', 'start stopped sandboxes');
export const rm = action('rm', 'kill', 'deleted', 'delete sandboxes and everything in them');

export const setTimeoutCmd: Command = {
  name: 'timeout',
  summary: "set a sandbox's auto-delete timeout, counted from now",
  args: 'ID DURATION',
  options: {},
  minArgs: 2,
  maxArgs: 2,
  async run(ctx, { positionals }) {
    const sb = Sandbox.fromId(positionals[0]!, { client: ctx.client });
    const r = await sb.setTimeout(parseDuration(positionals[1]!, 'DURATION'), { signal: ctx.signal });
    ctx.out(ctx.json ? json(r) : `${r.id} expires ${r.expiresAt} (${relativeTime(r.expiresAt)})\n`);
    return 0;
  },
};
