import type { Route } from '../context.js';
import { str } from './args.js';
import { ok } from './reply.js';
import { runForking } from './run.js';
import type { DesktopTools } from './tools.js';

const CLIPBOARD_HISTORY = 50;

export function clipboardRoutes({ d, run }: DesktopTools): Route[] {
  const clipboard: string[] = [];
  const remember = (text: string) => {
    if (text === '' || clipboard[clipboard.length - 1] === text) return;
    clipboard.push(text);
    if (clipboard.length > CLIPBOARD_HISTORY) clipboard.shift();
  };

  return [
    {
      method: 'GET',
      path: '/desktop/clipboard/get',
      handler: async () => {
        const r = await run('clipboard', 'xclip', ['-selection', 'clipboard', '-o'], { okCodes: [1] });
        const content = r.stdout.toString('utf8');
        remember(content);
        return { content, text: content };
      },
    },
    {
      method: 'POST',
      path: '/desktop/clipboard/set',
      handler: async (ctx) => {
        const b = await ctx.body();
        const content = b.content !== undefined ? str(b, 'content', 1024 * 1024, { allowEmpty: true }) : str(b, 'text', 1024 * 1024, { allowEmpty: true });
        await d.ensure('clipboard');
        await runForking('xclip', ['-selection', 'clipboard', '-i'], { env: d.toolEnv(), input: content });
        // xclip's first process returns once it has forked the one that will own the selection,
        // which takes it a moment later: answer once a read sees it (a get right after the set
        // read the old clipboard), for up to 2 s.
        for (let i = 0; i < 100; i++) {
          const now = await run('clipboard', 'xclip', ['-selection', 'clipboard', '-o'], { okCodes: [1] });
          if (now.stdout.toString('utf8') === content) break;
          await new Promise((r) => setTimeout(r, 20));
        }
        remember(content);
        return ok({ length: content.length });
      },
    },
    { method: 'GET', path: '/desktop/clipboard/history', handler: () => ({ history: [...clipboard].reverse(), count: clipboard.length }) },
  ];
}
