import { readFile } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import { Template, type BuildLogEntry, type BuildStatus, type TemplateDefinition, type TemplateInfo } from '@sandboxd/sdk';
import { UsageError } from '../args.js';
import type { Command, Context } from '../command.js';
import { json, keyValues, relativeTime, table } from '../output.js';
import { processLogs } from './process-logs.js';

function logLine(e: BuildLogEntry): string {
  const level = e.level && e.level !== 'info' ? `${e.level.toUpperCase()} ` : '';
  return `${level}${e.message}\n`;
}

/** A status line on a terminal's stderr, redrawn in place; plain lines when not a terminal. */
function statusLine(ctx: Context): { show: (s: BuildStatus) => void; clear: () => void } {
  const tty = !!ctx.io.stderr.isTTY;
  let shown = false;
  return {
    show: (s) => {
      const text = `[${String(s.progress).padStart(3)}%] ${s.status}${s.currentStep ? `: ${s.currentStep}` : ''}`;
      if (tty) {
        ctx.io.stderr.write(`\r\x1b[K${text}`);
        shown = true;
      } else ctx.err(text + '\n');
    },
    clear: () => {
      if (tty && shown) ctx.io.stderr.write('\r\x1b[K');
      shown = false;
    },
  };
}

export const templateBuild: Command = {
  name: 'template build',
  summary: 'build a template from a JSON definition, showing progress and logs',
  args: '-f FILE',
  details:
    'FILE holds the build request: {"alias", "cpu", "memory", "diskGB", "skipCache", "steps": [...]}, steps\n' +
    '{"type":"from","image"}, {"type":"apt","packages"}, {"type":"run","command"}, {"type":"env","key","value"},\n' +
    '{"type":"workdir","path"}, {"type":"copy","src","dest"}. Local copy sources are relative to FILE\'s\n' +
    'directory and are uploaded first. Logs go to stdout (stderr with --json); exits 1 if the build fails.',
  examples: ['sbx template build -f template.json', 'sbx template build -f template.json --alias my-tpl --no-cache'],
  options: {
    file: { type: 'string', short: 'f', value: 'FILE', help: 'template definition (JSON; - for stdin)' },
    alias: { type: 'string', value: 'NAME', help: 'override the alias in FILE' },
    'no-cache': { type: 'boolean', help: 'rebuild every step (skipCache)' },
    'no-wait': { type: 'boolean', help: 'print the build id and return without waiting' },
  },
  minArgs: 0,
  maxArgs: 0,
  async run(ctx, { values }) {
    const file = values.file as string | undefined;
    if (!file) throw new UsageError('give the template definition with -f FILE', 'template build');
    let text: string;
    try {
      text = file === '-' ? await readAll(ctx.io.stdin) : await readFile(file, 'utf8');
    } catch (err) {
      throw new UsageError(`cannot read ${file}: ${(err as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file' : (err as Error).message}`, 'template build');
    }
    let def: TemplateDefinition;
    try {
      def = JSON.parse(text) as TemplateDefinition;
    } catch (err) {
      throw new UsageError(`${file} is not valid JSON: ${(err as Error).message}`, 'template build');
    }
    if (values.alias) def.alias = values.alias as string;
    if (values['no-cache']) def.skipCache = true;
    const contextDir = file === '-' ? process.cwd() : dirname(resolve(file));

    const status = statusLine(ctx);
    const logOut = (s: string): void => {
      status.clear();
      if (ctx.json) ctx.err(s);
      else ctx.out(s);
    };
    try {
      const result = await Template.build(def, {
        client: ctx.client,
        contextDir,
        noWait: !!values['no-wait'],
        signal: ctx.signal,
        onLog: (e) => logOut(logLine(e)),
        onProgress: (s) => status.show(s),
      });
      status.clear();
      if (ctx.json) ctx.out(json(result));
      else if (values['no-wait']) ctx.out(`${result.buildId}\n`);
      else ctx.err(`template ${def.alias} is ${result.status} (build ${result.buildId}${result.durationMs !== null ? `, ${(result.durationMs / 1000).toFixed(1)} s` : ''})\n`);
      return 0;
    } finally {
      status.clear();
    }
  },
};

async function readAll(stream: NodeJS.ReadableStream): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of stream) chunks.push(typeof c === 'string' ? Buffer.from(c) : (c as Buffer));
  return Buffer.concat(chunks).toString('utf8');
}

export const logs: Command = {
  name: 'logs',
  summary: "print a template build's logs, or a sandbox's background process's output",
  args: 'BUILD_ID | SANDBOX_ID PROCESS_ID',
  details:
    "One argument is a template build: its log, followed until the build ends (--no-follow: what is there now). Two are a background process of a sandbox (`sbx exec -d`, the SDK's `commands.background` or `runCodeBackground`, `/commands/background` or `/execute/background`): its output kept so far (stdout on stdout, stderr on stderr), from --since (an offset: the `next offset` printed last time); with --follow, then live until it exits, re-attaching from its offset if the connection breaks.",
  examples: ['sbx logs tpl_8e41c0b7d2a95f36e1c4', 'sbx logs $ID proc_7c1e9a3f5b2d8046', 'sbx logs $ID proc_7c1e9a3f5b2d8046 --follow --since 1024'],
  options: {
    'no-follow': { type: 'boolean', help: 'a build: print what is there now and return' },
    follow: { type: 'boolean', short: 'f', help: 'a process: follow its output until it exits' },
    since: { type: 'string', value: 'OFFSET', help: 'a process: start at this offset (default 0: all that is kept)' },
  },
  minArgs: 1,
  maxArgs: 2,
  async run(ctx, { values, positionals }) {
    if (positionals.length === 2) return processLogs(ctx, positionals[0]!, positionals[1]!, values);
    if (values.follow || values.since !== undefined) throw new UsageError('--follow and --since are for a process: sbx logs SANDBOX_ID PROCESS_ID', 'logs');
    const buildId = positionals[0]!;
    if (values['no-follow']) {
      const chunk = await Template.logs(buildId, { client: ctx.client, signal: ctx.signal });
      if (ctx.json) ctx.out(json(chunk));
      else ctx.out(chunk.logs && !chunk.logs.endsWith('\n') ? chunk.logs + '\n' : chunk.logs);
      return 0;
    }
    for await (const e of Template.followLogs(buildId, { client: ctx.client, signal: ctx.signal })) {
      ctx.out(ctx.json ? JSON.stringify(e) + '\n' : logLine(e));
    }
    const st = await Template.buildStatus(buildId, { client: ctx.client, signal: ctx.signal });
    if (!ctx.json) ctx.err(`build ${buildId}: ${st.status}${st.errorMessage ? ` (${st.errorMessage})` : ''}\n`);
    return st.status === 'failed' ? 1 : 0;
  },
};

function resources(t: TemplateInfo): string {
  const r = t.defaultResources;
  return `${r.vcpu} vCPU, ${r.memoryMb} MB, ${r.diskGb} GB`;
}

export const templateLs: Command = {
  name: 'template ls',
  summary: 'list templates',
  args: '',
  options: {
    category: { type: 'string', value: 'CATEGORY', help: 'only this category' },
    language: { type: 'string', value: 'LANG', help: 'only this language' },
  },
  minArgs: 0,
  maxArgs: 0,
  async run(ctx, { values }) {
    const list = await Template.list({ client: ctx.client, category: values.category as string | undefined, language: values.language as string | undefined, signal: ctx.signal });
    if (ctx.json) ctx.out(json(list));
    else
      ctx.out(
        table(
          ['NAME', 'STATUS', 'LANGUAGE', 'RESOURCES', 'UPDATED', 'DESCRIPTION'],
          list.map((t) => [t.name, t.status, t.language || '-', resources(t), relativeTime(t.updatedAt ?? t.createdAt), t.description]),
        ),
      );
    return 0;
  },
};

export const templateGet: Command = {
  name: 'template get',
  summary: 'show a template',
  args: 'NAME',
  options: {},
  minArgs: 1,
  maxArgs: 1,
  async run(ctx, { positionals }) {
    const t = await Template.get(positionals[0]!, { client: ctx.client, signal: ctx.signal });
    if (ctx.json) ctx.out(json(t));
    else
      ctx.out(
        keyValues([
          ['name', t.name],
          ['id', t.id],
          ['status', t.status],
          ['description', t.description || '-'],
          ['language', t.language || '-'],
          ['resources', resources(t)],
          ['public', t.isPublic ? 'yes (built-in)' : 'no'],
          ['build', t.buildId ?? '-'],
        ]),
      );
    return 0;
  },
};

export const templateRm: Command = {
  name: 'template rm',
  summary: 'delete templates',
  args: 'NAME...',
  options: {},
  minArgs: 1,
  maxArgs: Infinity,
  async run(ctx, { positionals }) {
    const out = [];
    for (const name of positionals) {
      const r = await Template.delete(name, { client: ctx.client, signal: ctx.signal });
      out.push(r);
      if (!ctx.json) ctx.out(`${name} deleted\n`);
    }
    if (ctx.json) ctx.out(json(positionals.length === 1 ? out[0] : out));
    return 0;
  },
};
