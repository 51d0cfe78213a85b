import { parseArgs } from 'node:util';
import { ApiClient, SDK_VERSION } from '@sandboxd/sdk';
import { splitAtDoubleDash, UsageError } from './args.js';
import { GLOBAL_OPTIONS, type Command, type Context, type OptionSpec, type Parsed } from './command.js';
import { completionScript } from './completion.js';
import { cp } from './commands/cp.js';
import { watch } from './commands/watch.js';
import { env } from './commands/env.js';
import { desktopOpen, desktopScreenshot } from './commands/desktop.js';
import { network } from './commands/network.js';
import { exec, run } from './commands/exec.js';
import { create, get, ls, pause, resume, rm, setTimeoutCmd, ports, preview, start, stats, stop } from './commands/sandboxes.js';
import { repl } from './commands/repl.js';
import { mcp } from './commands/mcp.js';
import { volumeCreate, volumeGet, volumeLs, volumeRm } from './commands/volumes.js';
import { shell } from './commands/shell.js';
import { fork, restore, snapshotCreate, snapshotGet, snapshotLs, snapshotPromote, snapshotRm } from './commands/snapshots.js';
import { logs, templateBuild, templateGet, templateLs, templateRm } from './commands/templates.js';
import { keyCreate, keyLs, keyRevoke, orgCreate, orgLs, orgRm } from './commands/admin.js';
import { reportError, type Io } from './output.js';

export const COMMANDS: Command[] = [
  create,
  ls,
  get,
  stats,
  ports,
  preview,
  network,
  pause,
  resume,
  stop,
  start,
  rm,
  setTimeoutCmd,
  fork,
  restore,
  exec,
  run,
  repl,
  shell,
  cp,
  watch,
  env,
  desktopScreenshot,
  desktopOpen,
  logs,
  templateBuild,
  templateLs,
  templateGet,
  templateRm,
  snapshotCreate,
  snapshotLs,
  snapshotGet,
  snapshotRm,
  snapshotPromote,
  volumeCreate,
  volumeLs,
  volumeGet,
  volumeRm,
  orgLs,
  orgCreate,
  orgRm,
  keyLs,
  keyCreate,
  keyRevoke,
  mcp,
];

/** Groups whose first word alone is not a command. */
const GROUPS: Record<string, string> = {
  template: 'build, list and delete templates',
  desktop: "a desktop sandbox's screen: a screenshot, or a link to watch and use it in a browser",
  snapshot: 'take, list, show, delete and promote snapshots (`sbx snapshot ID` takes one)',
  volume: 'create, list, show and delete volumes (filesystems sandboxes share)',
  org: 'list and create organizations (admin)',
  key: 'list, create and revoke API keys (admin)',
};

/** Groups whose first word followed by an argument is one of their commands: `sbx snapshot ID` is `sbx snapshot create ID`. */
const GROUP_DEFAULTS: Record<string, string> = { snapshot: 'create' };

const ALIASES: Record<string, string> = { list: 'ls', delete: 'rm', kill: 'rm', show: 'get', inspect: 'get' };

export function findCommand(argv: readonly string[]): { command: Command | undefined; group: string | undefined; rest: string[] } {
  const [first, second] = argv;
  if (first && GROUPS[first]) {
    const sub = second === undefined ? undefined : (ALIASES[second] ?? second);
    const command = COMMANDS.find((c) => c.name === `${first} ${sub}`);
    if (command) return { command, group: first, rest: argv.slice(2) };
    const fallback = GROUP_DEFAULTS[first];
    if (fallback && second !== undefined && !second.startsWith('-') && second !== 'help') {
      return { command: COMMANDS.find((c) => c.name === `${first} ${fallback}`), group: first, rest: argv.slice(1) };
    }
    return { command: undefined, group: first, rest: argv.slice(1) };
  }
  const name = first ? (ALIASES[first] ?? first) : undefined;
  return { command: COMMANDS.find((c) => c.name === name), group: undefined, rest: argv.slice(1) };
}

function optionsFor(cmd: Command | undefined): Record<string, OptionSpec> {
  return { ...GLOBAL_OPTIONS, ...(cmd?.options ?? {}) };
}

function toParseArgs(opts: Record<string, OptionSpec>) {
  const out: Record<string, { type: 'string' | 'boolean'; short?: string; multiple?: boolean }> = {};
  for (const [name, o] of Object.entries(opts)) {
    out[name] = { type: o.type };
    if (o.short) out[name].short = o.short;
    if (o.multiple) out[name].multiple = true;
  }
  return out;
}

/** Parses a command's arguments; UsageError on unknown options or a wrong number of arguments. */
export function parseCommandArgs(cmd: Command, argv: readonly string[]): Parsed {
  const { before, after } = cmd.passThrough ? splitAtDoubleDash(argv) : { before: [...argv], after: undefined };
  let parsed;
  try {
    parsed = parseArgs({ args: before, options: toParseArgs(optionsFor(cmd)), allowPositionals: true, strict: true });
  } catch (err) {
    const msg = (err as Error).message.replace(/\. To specify a positional argument starting with a '-'.*$/s, '');
    const hint = cmd.passThrough ? ` (put the command after --: sbx ${cmd.name} ID -- COMMAND ARGS)` : '';
    throw new UsageError(msg + hint, cmd.name);
  }
  const values = parsed.values as Parsed['values'];
  if (values.help) return { values, positionals: parsed.positionals, rest: after };
  let positionals = parsed.positionals;
  let rest = after;
  if (cmd.passThrough && rest === undefined && positionals.length > cmd.maxArgs) {
    // `sbx exec ID ls` without `--`: the words after the id are the command.
    rest = positionals.slice(cmd.maxArgs);
    positionals = positionals.slice(0, cmd.maxArgs);
  }
  if (positionals.length < cmd.minArgs) {
    throw new UsageError(`missing ${cmd.args.split(' ').slice(positionals.length, cmd.minArgs).join(' ') || 'arguments'}`, cmd.name);
  }
  if (positionals.length > cmd.maxArgs) throw new UsageError(`unexpected argument ${JSON.stringify(positionals[cmd.maxArgs])}`, cmd.name);
  return { values, positionals, rest };
}

function optionLines(opts: Record<string, OptionSpec>): string {
  const rows = Object.entries(opts).map(([name, o]) => {
    const flag = `${o.short ? `-${o.short}, ` : '    '}--${name}${o.value ? ` ${o.value}` : ''}`;
    return [flag, o.help] as const;
  });
  const w = Math.max(...rows.map(([f]) => f.length));
  return rows.map(([f, h]) => `  ${f.padEnd(w)}  ${h}`).join('\n');
}

export function commandHelp(cmd: Command): string {
  const parts = [`Usage: sbx ${cmd.name}${Object.keys(cmd.options).length ? ' [options]' : ''}${cmd.args ? ' ' + cmd.args : ''}`, '', cmd.summary[0]!.toUpperCase() + cmd.summary.slice(1) + '.'];
  if (cmd.details) parts.push('', cmd.details);
  if (Object.keys(cmd.options).length) parts.push('', 'Options:', optionLines(cmd.options));
  parts.push('', 'Global options:', optionLines(GLOBAL_OPTIONS));
  if (cmd.examples?.length) parts.push('', 'Examples:', ...cmd.examples.map((e) => `  ${e}`));
  return parts.join('\n') + '\n';
}

export function mainHelp(group?: string): string {
  const cmds = COMMANDS.filter((c) => !group || c.name.startsWith(group + ' '));
  const w = Math.max(...cmds.map((c) => c.name.length));
  const lines = cmds.map((c) => `  ${c.name.padEnd(w)}  ${c.summary}`);
  return (
    [
      group ? `Usage: sbx ${group} COMMAND [options]` : 'Usage: sbx COMMAND [options]',
      '',
      group ? `${GROUPS[group]![0]!.toUpperCase()}${GROUPS[group]!.slice(1)}.` : 'sbx talks to a sandboxd server: sandboxes, code, files, snapshots and templates.',
      '',
      'Commands:',
      ...lines,
      ...(group ? [] : [`  ${'completion'.padEnd(w)}  print a bash completion script (source <(sbx completion bash))`]),
      '',
      'Global options:',
      optionLines({ ...GLOBAL_OPTIONS, version: { type: 'boolean', help: 'print the version' } }),
      '',
      'Environment: SANDBOXD_API_URL, SANDBOXD_API_KEY. Exit status: 0 ok, 1 error, 2 usage error;',
      "exec and run exit with the command's own status.",
      '',
      `Run 'sbx ${group ? group + ' ' : ''}COMMAND --help' for a command's options.`,
    ].join('\n') + '\n'
  );
}

/** Runs one CLI invocation; resolves with the exit status. Never calls process.exit. */
export async function runCli(argv: readonly string[], io: Io, signal: AbortSignal = new AbortController().signal): Promise<number> {
  const jsonFlag = argv.includes('--json');
  const ctxInfo = { baseUrl: '', hasApiKey: false, json: jsonFlag };
  try {
    if (argv.length === 0 || argv[0] === 'help' || argv[0] === '--help' || argv[0] === '-h') {
      const target = argv[0] === 'help' && argv.length > 1 ? findCommand(argv.slice(1)) : undefined;
      if (target?.command) io.stdout.write(commandHelp(target.command));
      else io.stdout.write(mainHelp(target?.group));
      return argv.length === 0 ? 2 : 0;
    }
    if (argv[0] === '--version' || argv[0] === 'version') {
      io.stdout.write(`sbx ${SDK_VERSION}\n`);
      return 0;
    }
    if (argv[0] === 'completion') {
      io.stdout.write(completionScript(COMMANDS, GLOBAL_OPTIONS, Object.keys(GROUPS)));
      return 0;
    }
    const { command, group, rest } = findCommand(argv);
    if (!command) {
      if (group && (rest.length === 0 || rest[0] === '--help' || rest[0] === '-h')) {
        io.stdout.write(mainHelp(group));
        return rest.length === 0 ? 2 : 0;
      }
      const name = group ? `${group} ${rest[0] ?? ''}`.trim() : argv[0]!;
      throw new UsageError(`unknown command ${JSON.stringify(name)}`, group);
    }
    const parsed = parseCommandArgs(command, rest);
    if (parsed.values.help) {
      io.stdout.write(commandHelp(command));
      return 0;
    }
    const client = new ApiClient({
      baseUrl: (parsed.values['api-url'] as string | undefined) ?? io.env.SANDBOXD_API_URL,
      apiKey: (parsed.values['api-key'] as string | undefined) ?? io.env.SANDBOXD_API_KEY,
    });
    ctxInfo.baseUrl = client.config.baseUrl;
    ctxInfo.hasApiKey = !!client.config.apiKey;
    ctxInfo.json = parsed.values.json === true;
    const ctx: Context = {
      io,
      client,
      json: ctxInfo.json,
      signal,
      out: (t) => void io.stdout.write(t),
      err: (t) => void io.stderr.write(t),
    };
    return await command.run(ctx, parsed);
  } catch (err) {
    if (signal.aborted) {
      io.stderr.write('\nsbx: interrupted\n');
      return 130;
    }
    return reportError(io, err, ctxInfo);
  }
}
