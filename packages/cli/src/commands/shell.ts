import { Sandbox } from '@sandboxd/sdk';
import type { Command } from '../command.js';
import { exitStatusFor } from '../args.js';

export const shell: Command = {
  name: 'shell',
  summary: 'open an interactive shell in a sandbox',
  args: 'ID',
  details:
    'A terminal in the sandbox: keystrokes go straight through (Ctrl-C reaches the remote program),\n' +
    'the window size follows yours. Exits with the shell\'s exit status. With stdin not a terminal,\n' +
    'input is sent as typed and the shell gets end-of-file when stdin ends.',
  options: {},
  minArgs: 1,
  maxArgs: 1,
  async run(ctx, { positionals }) {
    const { stdin, stdout } = ctx.io;
    const sb = Sandbox.fromId(positionals[0]!, { client: ctx.client });
    const term = await sb.terminal({ cols: stdout.columns ?? 80, rows: stdout.rows ?? 24, signal: ctx.signal });
    const raw = stdin.isTTY && typeof (stdin as NodeJS.ReadStream).setRawMode === 'function';
    const onResize = (): void => {
      if (!term.closed && stdout.columns && stdout.rows) term.resize(stdout.columns, stdout.rows);
    };
    const onData = (d: Buffer | string): void => {
      if (!term.closed) term.write(typeof d === 'string' ? d : d.toString('utf8'));
    };
    const onEnd = (): void => {
      // End of piped input: Ctrl-D, so the shell sees end-of-file like a user at the prompt.
      if (!term.closed) term.write('\x04');
    };
    term.onOutput((d) => stdout.write(d));
    try {
      if (raw) (stdin as NodeJS.ReadStream).setRawMode(true);
      stdin.on('data', onData);
      stdin.on('end', onEnd);
      stdin.resume();
      stdout.on('resize', onResize);
      const code = await term.exited;
      if (term.error) throw term.error;
      if (code === null) {
        ctx.err('\r\nsbx: the terminal connection closed without an exit status\n');
        return 1;
      }
      return exitStatusFor(code, false);
    } finally {
      stdout.off('resize', onResize);
      stdin.off('data', onData);
      stdin.off('end', onEnd);
      if (raw) (stdin as NodeJS.ReadStream).setRawMode(false);
      stdin.pause();
      term.close();
    }
  },
};
