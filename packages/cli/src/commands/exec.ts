import { readFile } from 'node:fs/promises';
import { Sandbox, shellJoin, type CommandResult } from '@sandboxd/sdk';
import { exitStatusFor, languageFromFile, parseDuration, parseKeyValues, UsageError } from '../args.js';
import type { Command, Context, OptionSpec } from '../command.js';
import { json } from '../output.js';

const runOptions: Record<string, OptionSpec> = {
  timeout: { type: 'string', value: 'DURATION', help: 'stop it after this long (default 60s)' },
  env: { type: 'string', short: 'e', multiple: true, value: 'K=V', help: 'environment variable for this run (repeatable)' },
  workdir: { type: 'string', short: 'w', value: 'DIR', help: 'working directory (default /workspace)' },
};

/** Input a request can carry: the JSON body limit is 10 MiB and bytes travel as base64. */
const MAX_STDIN_BYTES = 7 * 1024 * 1024;

async function readStdinBytes(stream: NodeJS.ReadableStream, limit = Infinity): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let n = 0;
  for await (const c of stream) {
    const b = typeof c === 'string' ? Buffer.from(c) : (c as Buffer);
    n += b.length;
    if (n > limit) throw new UsageError(`stdin is larger than ${limit / 1024 / 1024} MiB; copy big input with \`sbx cp - ID:/path\``, 'exec');
    chunks.push(b);
  }
  return Buffer.concat(chunks);
}

async function readStdin(stream: NodeJS.ReadableStream): Promise<string> {
  return (await readStdinBytes(stream)).toString('utf8');
}

/** Prints a finished result: streamed output was already written; `--json` prints the whole result. */
function finish(ctx: Context, r: CommandResult, streamed: boolean): number {
  if (ctx.json) ctx.out(json(r));
  else if (!streamed) {
    ctx.io.stdout.write(r.stdout);
    ctx.io.stderr.write(r.stderr);
  }
  if (r.timedOut && !ctx.json) ctx.err('sbx: timed out\n');
  if (r.truncated && !ctx.json) ctx.err('sbx: output was truncated by the service\n');
  return exitStatusFor(r.exitCode, r.timedOut);
}

function common(ctx: Context, values: Record<string, unknown>) {
  const env = parseKeyValues(values.env as string[] | undefined);
  return {
    timeout: values.timeout ? parseDuration(values.timeout as string) : undefined,
    env: Object.keys(env).length ? env : undefined,
    workingDir: values.workdir as string | undefined,
    signal: ctx.signal,
  };
}

export const exec: Command = {
  name: 'exec',
  summary: "run a command in a sandbox, streaming its output; exits with the command's exit code",
  args: 'ID -- COMMAND [ARG...]',
  details:
    'Several words after -- run as that exact argument list. A single word is a shell command line,\n' +
    "so pipes and globs work: sbx exec ID -- 'ls *.py | wc -l'. A timeout exits 124. With -i, sbx's\n" +
    'stdin (up to 7 MiB, read to its end first) is the command\'s stdin; without it the command reads\n' +
    'nothing. Use `sbx cp - ID:/path` for big data, `sbx shell` for interaction.',
  examples: ['sbx exec $ID -- python3 -c "print(42)"', "sbx exec $ID -- 'cd /tmp && ls -la'", 'sort data.txt | sbx exec -i $ID -- wc -l', 'PID=$(sbx exec -d $ID -- ./build.sh) && sbx logs $ID $PID --follow'],
  options: {
    ...runOptions,
    interactive: { type: 'boolean', short: 'i', help: "pass sbx's stdin to the command" },
    'no-stream': { type: 'boolean', help: 'wait and print the output at the end (plain HTTP instead of a WebSocket)' },
    background: { type: 'boolean', short: 'd', help: 'start it in the background (default timeout 1h) and print its process id; follow it with `sbx logs ID PID --follow`' },
  },
  minArgs: 1,
  maxArgs: 1,
  passThrough: true,
  async run(ctx, { values, positionals, rest }) {
    if (!rest || rest.length === 0) throw new UsageError('give the command after --, e.g. sbx exec ID -- ls -la', 'exec');
    const line = rest.length === 1 ? rest[0]! : shellJoin(rest);
    const sb = Sandbox.fromId(positionals[0]!, { client: ctx.client });
    const stream = !ctx.json && !values['no-stream'];
    const stdin = values.interactive ? await readStdinBytes(ctx.io.stdin as NodeJS.ReadableStream, MAX_STDIN_BYTES) : undefined;
    if (values.background) {
      const p = await sb.commands.background(line, { ...common(ctx, values), ...(stdin ? { stdin } : {}) });
      ctx.out(ctx.json ? json(p) : `${p.processId}\n`);
      return 0;
    }
    const r = await sb.commands.run(line, {
      ...common(ctx, values),
      ...(stdin ? { stdin } : {}),
      ...(stream ? { onStdout: (d: string) => ctx.io.stdout.write(d), onStderr: (d: string) => ctx.io.stderr.write(d) } : {}),
    });
    return finish(ctx, r, stream);
  },
};

export const run: Command = {
  name: 'run',
  summary: 'run code from a file or stdin in a sandbox, streaming its output',
  args: 'ID [FILE|-]',
  details:
    'The language comes from --language, else the file extension (.py .js .sh .go), else python.\n' +
    'Python runs in the sandbox\'s default code context, where variables live on between runs;\n' +
    '--context runs in another one (`sbx repl` prints its id), --isolated in a fresh process.',
  examples: ['sbx run $ID script.py', "echo 'console.log(1+1)' | sbx run $ID - --language javascript"],
  options: {
    language: { type: 'string', short: 'l', value: 'LANG', help: 'python, javascript, bash or go' },
    context: { type: 'string', short: 'c', value: 'CTX', help: 'run in this code context (default: the language\'s default context)' },
    isolated: { type: 'boolean', help: 'run in a fresh process that keeps no state' },
    ...runOptions,
  },
  minArgs: 1,
  maxArgs: 2,
  async run(ctx, { values, positionals }) {
    const file = positionals[1] ?? '-';
    if (file === '-' && ctx.io.stdin.isTTY) ctx.err('sbx: reading code from stdin (end with Ctrl-D)\n');
    const code = file === '-' ? await readStdin(ctx.io.stdin) : await readFile(file, 'utf8').catch((err: NodeJS.ErrnoException) => {
      throw new UsageError(`cannot read ${file}: ${err.code === 'ENOENT' ? 'no such file' : err.message}`, 'run');
    });
    const language = (values.language as string | undefined) ?? (file !== '-' ? languageFromFile(file) : undefined) ?? 'python';
    const sb = Sandbox.fromId(positionals[0]!, { client: ctx.client });
    const stream = !ctx.json;
    const r = await sb.runCode(code, {
      language,
      ...(values.context ? { context: values.context as string } : {}),
      ...(values.isolated ? { isolated: true } : {}),
      ...common(ctx, values),
      ...(stream ? { onStdout: (d: string) => ctx.io.stdout.write(d), onStderr: (d: string) => ctx.io.stderr.write(d) } : {}),
    });
    return finish(ctx, r, stream);
  },
};
