import { Sandbox } from '@sandboxd/sdk';
import type { Command } from '../command.js';

export const watch: Command = {
  name: 'watch',
  summary: 'print changes below a directory of a sandbox as they happen',
  args: 'ID [PATH]',
  details:
    'PATH defaults to /workspace; the watch is recursive. One line per change: the event (created,\n' +
    'modified, deleted, renamed), the path, and for renamed the old path. Runs until Ctrl-C, or until\n' +
    'the directory is removed. With --json, one JSON object per line.',
  examples: ['sbx watch $ID', 'sbx watch $ID /workspace/src --json'],
  options: {},
  minArgs: 1,
  maxArgs: 2,
  async run(ctx, { positionals }) {
    const sb = Sandbox.fromId(positionals[0]!, { client: ctx.client });
    const watcher = await sb.files.watch(positionals[1] ?? '/workspace', {
      signal: ctx.signal,
      onWarning: (w) => ctx.err(`sbx: ${w.message}\n`),
    });
    if (!ctx.json) ctx.err(`watching ${watcher.path} (Ctrl-C to stop)\n`);
    try {
      for await (const c of watcher) {
        if (ctx.json) ctx.out(`${JSON.stringify(c)}\n`);
        else ctx.out(`${c.event.padEnd(8)} ${c.path}${c.isDir ? '/' : ''}${c.oldPath ? ` (from ${c.oldPath})` : ''}\n`);
      }
    } catch (err) {
      if (ctx.signal.aborted) return 0;
      throw err;
    }
    return 0;
  },
};
