import type { Route } from '../context.js';
import { ServiceError } from '../proto.js';
import { hexId, int, MAX_SIDE, windowId } from './args.js';
import { ok, sendBytes } from './reply.js';
import type { DesktopTools } from './tools.js';

export function windowRoutes({ run, capture, windows, knownWindow }: DesktopTools): Route[] {
  return [
    { method: 'GET', path: '/desktop/windows/list', handler: async () => ({ windows: await windows() }) },
    { method: 'GET', path: '/desktop/windows', handler: async () => ({ windows: await windows() }) },
    {
      method: 'POST',
      path: '/desktop/windows/focus',
      handler: async (ctx) => {
        const id = await knownWindow(windowId(await ctx.body()));
        await run('windows', 'wmctrl', ['-i', '-a', hexId(id)]);
        return ok({ window_id: hexId(id) });
      },
    },
    {
      method: 'POST',
      path: '/desktop/windows/close',
      handler: async (ctx) => {
        const id = await knownWindow(windowId(await ctx.body()));
        await run('windows', 'wmctrl', ['-i', '-c', hexId(id)]);
        return ok({ window_id: hexId(id) });
      },
    },
    {
      method: 'POST',
      path: '/desktop/windows/minimize',
      handler: async (ctx) => {
        const id = await knownWindow(windowId(await ctx.body()));
        await run('windows', 'xdotool', ['windowminimize', String(id)]);
        return ok({ window_id: hexId(id) });
      },
    },
    {
      method: 'POST',
      path: '/desktop/windows/resize',
      handler: async (ctx) => {
        const b = await ctx.body();
        const id = await knownWindow(windowId(b));
        const w = int(b, 'width', 1, MAX_SIDE);
        const h = int(b, 'height', 1, MAX_SIDE);
        await run('windows', 'wmctrl', ['-i', '-r', hexId(id), '-b', 'remove,maximized_vert,maximized_horz']);
        await run('windows', 'wmctrl', ['-i', '-r', hexId(id), '-e', `0,-1,-1,${w},${h}`]);
        return ok({ window_id: hexId(id), width: w, height: h });
      },
    },
    {
      method: 'GET',
      path: '/desktop/x11/capture_window',
      handler: async (ctx) => {
        const given = ctx.url.searchParams.get('window_id');
        let id: number;
        if (given) id = await knownWindow(windowId({ window_id: given }));
        else {
          const r = await run('input', 'xdotool', ['getactivewindow'], { okCodes: [1] });
          id = Number(r.stdout.toString().trim());
          if (!id) throw new ServiceError('WINDOW_NOT_FOUND', 'no window has the focus');
        }
        const g = await run('input', 'xdotool', ['getwindowgeometry', '--shell', String(id)]);
        const v = Object.fromEntries(g.stdout.toString().trim().split('\n').map((l) => l.split('=') as [string, string]));
        const png = await capture({ x: Math.max(0, Number(v.X)), y: Math.max(0, Number(v.Y)), width: Number(v.WIDTH), height: Number(v.HEIGHT) });
        // The client asks for an arraybuffer: raw bytes, whatever its Accept says.
        return sendBytes(ctx.res, png, 'image/png');
      },
    },
  ];
}
