import { createInterface } from 'node:readline';
import { Sandbox, type CodeContext } from '@sandboxd/sdk';
import type { Command } from '../command.js';

/** Whether `lines` (Python) need more input before they run: an open block, bracket or backslash. */
export function needsMore(lines: string[]): boolean {
  const last = lines[lines.length - 1] ?? '';
  if (lines.length > 1) return last.trim() !== ''; // inside a block: a blank line ends it
  if (/[:\\]\s*$/.test(last) || /^\s*@/.test(last)) return true;
  let depth = 0;
  for (const ch of lines.join('\n').replace(/(["'])(?:\\.|(?!\1).)*\1/g, '').replace(/#.*$/gm, '')) {
    if ('([{'.includes(ch)) depth++;
    else if (')]}'.includes(ch)) depth--;
  }
  return depth > 0;
}

export const repl: Command = {
  name: 'repl',
  summary: 'an interactive Python prompt in a sandbox whose variables live on between lines',
  args: 'ID',
  details:
    'Each entry runs in a code context of the sandbox (a new one unless --context names one), so\n' +
    'state lives on as in a notebook. A block (a line ending in ":") runs after an empty line. The\n' +
    'value of an expression is printed. Ctrl-C interrupts a running entry; Ctrl-D leaves (the\n' +
    'context stays unless --rm). With stdin not a terminal, each entry is read the same way.',
  examples: ['sbx repl $ID', 'sbx repl $ID --context ctx_0123abcd', "printf 'x = 41\\nx + 1\\n' | sbx repl $ID"],
  options: {
    language: { type: 'string', short: 'l', value: 'LANG', help: 'the language of a new context (python)' },
    context: { type: 'string', short: 'c', value: 'CTX', help: 'use this existing code context' },
    rm: { type: 'boolean', help: 'delete the context when leaving' },
  },
  minArgs: 1,
  maxArgs: 1,
  async run(ctx, { values, positionals }) {
    const sb = Sandbox.fromId(positionals[0]!, { client: ctx.client });
    const context: string | CodeContext = (values.context as string | undefined) ?? (await sb.createCodeContext({ language: (values.language as string | undefined) ?? 'python', signal: ctx.signal }));
    const id = typeof context === 'string' ? context : context.id;
    const tty = ctx.io.stdin.isTTY === true;
    ctx.err(`sbx: context ${id}${tty ? ' (Ctrl-D to leave)' : ''}\n`);
    const rl = createInterface({ input: ctx.io.stdin, output: tty ? ctx.io.stdout : undefined, prompt: '>>> ', terminal: tty });
    let status = 0;
    let running: AbortController | null = null;
    rl.on('SIGINT', () => {
      if (running) running.abort();
      else ctx.err('\nKeyboardInterrupt\n');
    });
    const lines: string[] = [];
    try {
      if (tty) rl.prompt();
      for await (const line of rl) {
        lines.push(line);
        if (needsMore(lines)) {
          if (tty) {
            rl.setPrompt('... ');
            rl.prompt();
          }
          continue;
        }
        const code = lines.join('\n');
        lines.length = 0;
        if (code.trim() !== '') {
          running = new AbortController();
          const signal = AbortSignal.any([ctx.signal, running.signal]);
          try {
            const r = await sb.runCode(code, {
              context: id,
              signal,
              onStdout: (d) => ctx.io.stdout.write(d),
              onStderr: (d) => ctx.io.stderr.write(d),
            });
            if (r.result !== undefined) ctx.io.stdout.write(`${r.result}\n`);
            status = r.exitCode === 0 ? 0 : 1;
          } catch (err) {
            if (ctx.signal.aborted) throw err;
            if (running.signal.aborted) ctx.err('KeyboardInterrupt\n');
            else throw err;
          } finally {
            running = null;
          }
        }
        if (tty) {
          rl.setPrompt('>>> ');
          rl.prompt();
        }
      }
    } finally {
      rl.close();
      if (values.rm) await sb.deleteCodeContext(id).catch(() => undefined);
    }
    if (tty) ctx.err('\n');
    return status;
  },
};
