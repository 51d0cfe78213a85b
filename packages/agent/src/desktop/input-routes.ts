import type { Route } from '../context.js';
import { ServiceError } from '../proto.js';
import { button, coord, hexId, int, keyCombo, keyName, str } from './args.js';
import { ok } from './reply.js';
import type { DesktopTools } from './tools.js';

const MAX_TYPE_CHARS = 64 * 1024;

export function mouseRoutes({ xdotool }: DesktopTools): Route[] {
  return [
    {
      method: 'GET',
      path: '/desktop/mouse/position',
      handler: async () => {
        const r = await xdotool(['getmouselocation', '--shell']);
        const v = Object.fromEntries(r.stdout.toString().trim().split('\n').map((l) => l.split('=') as [string, string]));
        return { x: Number(v.X), y: Number(v.Y), screen: Number(v.SCREEN ?? 0), window: v.WINDOW ? hexId(Number(v.WINDOW)) : null };
      },
    },
    {
      method: 'POST',
      path: '/desktop/mouse/move',
      handler: async (ctx) => {
        const b = await ctx.body();
        const [x, y] = [coord(b, 'x'), coord(b, 'y')];
        await xdotool(['mousemove', String(x), String(y)]);
        return ok({ x, y });
      },
    },
    {
      method: 'POST',
      path: '/desktop/mouse/click',
      handler: async (ctx) => {
        const b = await ctx.body();
        const btn = button(b);
        const clicks = int(b, 'clicks', 1, 10, 1);
        const at = b.x === undefined && b.y === undefined ? [] : ['mousemove', String(coord(b, 'x')), String(coord(b, 'y'))];
        // xdotool sleeps its delay (100 ms by default) after every click, the last one too.
        await xdotool([...at, 'click', ...(clicks > 1 ? ['--repeat', String(clicks), '--delay', '60'] : ['--delay', '0']), String(btn)]);
        return ok();
      },
    },
    ...['down', 'up'].map(
      (dir): Route => ({
        method: 'POST',
        path: `/desktop/mouse/${dir}`,
        handler: async (ctx) => {
          await xdotool([`mouse${dir}`, String(button(await ctx.body()))]);
          return ok();
        },
      }),
    ),
    {
      method: 'POST',
      path: '/desktop/mouse/drag',
      handler: async (ctx) => drag(await ctx.body()),
    },
    {
      method: 'POST',
      path: '/desktop/mouse/scroll',
      handler: async (ctx) => {
        const b = await ctx.body();
        const dy = b.delta_y !== undefined ? int(b, 'delta_y', -200, 200) : b.amount !== undefined || b.direction !== undefined ? scrollAmount(b) : 0;
        const dx = int(b, 'delta_x', -200, 200, 0);
        const at = b.x === undefined && b.y === undefined ? [] : ['mousemove', String(coord(b, 'x')), String(coord(b, 'y'))];
        const args = [...at];
        // Positive delta_y scrolls down (button 5), negative up (4); delta_x right (7) / left (6).
        if (dy) args.push('click', '--repeat', String(Math.abs(dy)), '--delay', '20', dy > 0 ? '5' : '4');
        if (dx) args.push('click', '--repeat', String(Math.abs(dx)), '--delay', '20', dx > 0 ? '7' : '6');
        if (args.length) await xdotool(args);
        return ok();
      },
    },
    ...['drag_drop', 'drag-drop'].map((p): Route => ({ method: 'POST', path: `/desktop/x11/${p}`, handler: async (ctx) => drag(await ctx.body()) })),
  ];

  async function drag(b: Record<string, unknown>) {
    const [fx, fy, tx, ty] = [coord(b, 'from_x'), coord(b, 'from_y'), coord(b, 'to_x'), coord(b, 'to_y')];
    const btn = button(b);
    const mx = String(Math.round((fx + tx) / 2));
    const my = String(Math.round((fy + ty) / 2));
    // Through a midpoint with short pauses: toolkits start a drag only on motion with the button held.
    await xdotool(['mousemove', String(fx), String(fy), 'mousedown', String(btn), 'sleep', '0.05', 'mousemove', mx, my, 'sleep', '0.05', 'mousemove', String(tx), String(ty), 'sleep', '0.05', 'mouseup', String(btn)]);
    return ok();
  }
}

export function keyboardRoutes({ xdotool }: DesktopTools): Route[] {
  return [
    {
      method: 'POST',
      path: '/desktop/keyboard/type',
      handler: async (ctx) => {
        const b = await ctx.body();
        const text = str(b, 'text', MAX_TYPE_CHARS, { allowEmpty: true });
        const delay = int(b, 'delay_ms', 0, 1000, 12);
        // From stdin: any text, however long, and never read as options.
        if (text) await xdotool(['type', '--clearmodifiers', '--delay', String(delay), '--file', '-'], text);
        return ok({ typed: [...text].length });
      },
    },
    {
      method: 'POST',
      path: '/desktop/keyboard/press',
      handler: async (ctx) => {
        const b = await ctx.body();
        const key = b.key !== undefined ? keyCombo(b.key, 'key') : keyName(b.keys, 'key');
        await xdotool(['key', '--clearmodifiers', '--', key]);
        return ok({ key });
      },
    },
    {
      method: 'POST',
      path: '/desktop/keyboard/combination',
      handler: async (ctx) => {
        const combo = keyCombo((await ctx.body()).keys, 'keys');
        await xdotool(['key', '--clearmodifiers', '--', combo]);
        return ok({ keys: combo });
      },
    },
    {
      method: 'POST',
      path: '/desktop/x11/hotkey',
      handler: async (ctx) => {
        const b = await ctx.body();
        const mods = b.modifiers === undefined ? [] : Array.isArray(b.modifiers) ? b.modifiers : [b.modifiers];
        const combo = keyCombo([...mods, b.key], 'keys');
        await xdotool(['key', '--clearmodifiers', '--', combo]);
        return ok({ keys: combo });
      },
    },
  ];
}

function scrollAmount(b: Record<string, unknown>): number {
  const amount = int(b, 'amount', 1, 200, 3);
  const dir = b.direction === undefined ? 'down' : String(b.direction);
  if (dir !== 'up' && dir !== 'down') throw new ServiceError('VALIDATION_ERROR', 'direction: must be up or down', { field: 'direction' });
  return dir === 'up' ? -amount : amount;
}
