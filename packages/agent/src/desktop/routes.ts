import { randomBytes } from 'node:crypto';
import { readFile, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Agent, Route, RouteContext } from '../context.js';
import { logLine } from '../log.js';
import { ServiceError } from '../proto.js';
import { button, coord, hexId, int, keyCombo, keyName, MAX_SIDE, ocrLanguage, str, windowId } from './args.js';
import { Recorder } from './recording.js';
import { runForking, runTool } from './run.js';
import { Desktop, DISPLAY, NOVNC_PORT, parseGeometry, VNC_PORT, type Part } from './session.js';

const DEFAULT_GEOMETRY = { width: 1024, height: 768, depth: 24 };
/** What display/resolutions offers (Xvfb takes any size; these are the usual ones). */
const RESOLUTIONS: Array<[number, number]> = [
  [640, 480],
  [800, 600],
  [1024, 768],
  [1280, 720],
  [1280, 800],
  [1280, 1024],
  [1366, 768],
  [1440, 900],
  [1600, 900],
  [1680, 1050],
  [1920, 1080],
  [1920, 1200],
  [2560, 1440],
];
const CLIPBOARD_HISTORY = 50;
const MAX_TYPE_CHARS = 64 * 1024;
const DESKTOP_PROCESSES = /^(Xvfb|xfce4-|xfwm4|xfdesktop|xfsettingsd|xfconfd|Thunar|panel-|x11vnc|websockify|ffmpeg|dbus-|mousepad|chromium|chrome|xdotool|scrot|xclip)/;

/**
 * The `/desktop/*` agent API (the paths, bodies and answers of the official client, see
 * docs/desktop.md): screen, mouse, keyboard, clipboard, windows, display, recordings, VNC, OCR.
 * Each call runs ordinary programs inside the sandbox (xdotool, scrot, xclip, wmctrl, xrandr,
 * ffmpeg, tesseract) with an argv, never a shell. A sandbox without them answers 501
 * DESKTOP_NOT_AVAILABLE with what is missing. Starts the display now when the template asks
 * (SANDBOXD_DESKTOP), so that it is up before the sandbox is handed out.
 */
export function desktopRoutes(agent: Agent): Route[] {
  const spec = agent.config.desktop;
  const geometry = (spec && parseGeometry(spec)) || DEFAULT_GEOMETRY;
  const d = new Desktop(agent.config.baseEnv, !!spec, geometry);
  const tmpDir = join(agent.config.stateDir, 'tmp');
  const recorder = new Recorder(d);
  const clipboard: string[] = [];
  const remember = (text: string) => {
    if (text === '' || clipboard[clipboard.length - 1] === text) return;
    clipboard.push(text);
    if (clipboard.length > CLIPBOARD_HISTORY) clipboard.shift();
  };
  if (spec && d.missing('display').length === 0) {
    d.ensure().catch((err: unknown) => logLine(`desktop: the display did not start: ${(err as Error).message}`));
  }

  const run = async (part: Part, file: string, args: string[], opts: { timeoutMs?: number; input?: string; okCodes?: number[] } = {}) => {
    await d.ensure(part);
    return runTool(file, args, { env: d.toolEnv(), ...opts });
  };
  const xdotool = (args: string[], input?: string) => run('input', 'xdotool', args, { input, timeoutMs: input ? 120_000 : 10_000 });

  /** A PNG of the screen or of a part of it, read from a scrot file in the agent's tmp dir. */
  const capture = async (region?: { x: number; y: number; width: number; height: number }): Promise<Buffer> => {
    await d.ensure('screenshot');
    const file = join(tmpDir, `shot-${randomBytes(6).toString('hex')}.png`);
    const args = ['-o', '-z'];
    if (region) {
      const r = clip(region, d);
      args.push('-a', `${r.x},${r.y},${r.width},${r.height}`);
    }
    try {
      await runTool('scrot', [...args, file], { env: d.toolEnv() });
      return await readFile(file);
    } finally {
      await rm(file, { force: true });
    }
  };

  const windows = async () => {
    await d.ensure('windows');
    const [list, active] = await Promise.all([
      runTool('wmctrl', ['-lpG'], { env: d.toolEnv() }),
      runTool('xdotool', ['getactivewindow'], { env: d.toolEnv(), okCodes: [1] }),
    ]);
    const activeId = Number(active.stdout.toString().trim()) || 0;
    const out = [];
    for (const line of list.stdout.toString('utf8').split('\n')) {
      // id desktop pid x y w h host title...
      const m = /^(0x[0-9a-f]+)\s+(-?\d+)\s+(\d+)\s+(-?\d+)\s+(-?\d+)\s+(\d+)\s+(\d+)\s+\S+\s?(.*)$/i.exec(line);
      if (!m) continue;
      const id = parseInt(m[1]!.slice(2), 16);
      out.push({ id: hexId(id), desktop: Number(m[2]), pid: Number(m[3]) || undefined, x: Number(m[4]), y: Number(m[5]), width: Number(m[6]), height: Number(m[7]), title: m[8] ?? '', focused: id === activeId, isActive: id === activeId });
    }
    const states = await Promise.all(out.map((w) => runTool('xprop', ['-id', w.id, '_NET_WM_STATE'], { env: d.toolEnv(), okCodes: [1] }).catch(() => null)));
    return out.map((w, i) => ({ ...w, isMinimized: /_NET_WM_STATE_HIDDEN/.test(states[i]?.stdout.toString() ?? '') }));
  };

  /** Words Tesseract finds on the screen (or a region), with their boxes in screen coordinates. */
  const ocrWords = async (region: { x: number; y: number; width: number; height: number } | undefined, language: string) => {
    const png = await capture(region);
    const file = join(tmpDir, `ocr-${randomBytes(6).toString('hex')}.png`);
    await writeFile(file, png);
    try {
      const r = await run('ocr', 'tesseract', [file, 'stdout', '-l', language, 'tsv'], { timeoutMs: 60_000 });
      const ox = region ? clip(region, d).x : 0;
      const oy = region ? clip(region, d).y : 0;
      const words: Array<{ text: string; x: number; y: number; width: number; height: number; line: string; conf: number }> = [];
      for (const row of r.stdout.toString('utf8').split('\n').slice(1)) {
        const f = row.split('\t');
        if (f.length < 12 || f[0] !== '5' || !f[11]!.trim()) continue;
        words.push({ text: f[11]!.trim(), x: ox + Number(f[6]), y: oy + Number(f[7]), width: Number(f[8]), height: Number(f[9]), line: `${f[2]}.${f[3]}.${f[4]}`, conf: Number(f[10]) });
      }
      return words;
    } finally {
      await rm(file, { force: true });
    }
  };
  const findText = async (text: string) => {
    const want = text.toLowerCase().split(/\s+/).filter(Boolean);
    if (want.length === 0) throw new ServiceError('VALIDATION_ERROR', 'text: must not be blank', { field: 'text' });
    const words = await ocrWords(undefined, 'eng');
    for (let i = 0; i < words.length; i++) {
      const span = words.slice(i, i + want.length);
      if (span.length < want.length || span.some((w) => w.line !== words[i]!.line)) continue;
      const ok = want.every((w, k) => (k === want.length - 1 && want.length === 1 ? span[k]!.text.toLowerCase().includes(w) : span[k]!.text.toLowerCase().replace(/[^\p{L}\p{N}]+$/u, '') === w || span[k]!.text.toLowerCase().startsWith(w)));
      if (!ok) continue;
      const x = Math.min(...span.map((w) => w.x));
      const y = Math.min(...span.map((w) => w.y));
      const right = Math.max(...span.map((w) => w.x + w.width));
      const bottom = Math.max(...span.map((w) => w.y + w.height));
      return { x, y, width: right - x, height: bottom - y, text: span.map((w) => w.text).join(' '), center_x: Math.round((x + right) / 2), center_y: Math.round((y + bottom) / 2) };
    }
    return null;
  };

  const vncInfo = () => ({
    running: d.vncRunning,
    display: DISPLAY,
    port: NOVNC_PORT,
    vnc_port: VNC_PORT,
    novnc_port: NOVNC_PORT,
    // The agent does not know the sandbox's public URLs: the preview of port 6080 serves this path
    // (sandbox.getPreviewUrl(6080), or `sbx desktop open`).
    url: '',
    path: '/vnc.html?autoconnect=true&resize=scale',
    password: null,
  });

  const ok = (extra: Record<string, unknown> = {}) => ({ success: true, ...extra });
  const both = (path: string, handler: Route['handler']): Route[] => [
    { method: 'GET', path, handler },
    { method: 'POST', path, handler },
  ];

  return [
    // VNC: the client GETs start/stop; the Python client POSTs.
    ...both('/desktop/vnc/start', async () => {
      await d.startVnc();
      return vncInfo();
    }),
    ...both('/desktop/vnc/stop', () => {
      d.stopVnc();
      return ok({ running: false });
    }),
    { method: 'GET', path: '/desktop/vnc/info', handler: () => vncInfo() },
    { method: 'GET', path: '/desktop/vnc/status', handler: () => vncInfo() },

    // Screen
    {
      method: 'GET',
      path: '/desktop/screenshot',
      handler: async (ctx) => {
        const png = await capture();
        if (wantsRaw(ctx.req, ctx.url)) return sendBytes(ctx.res, png, 'image/png');
        return { image: png.toString('base64'), format: 'png', width: d.width, height: d.height };
      },
    },
    {
      method: 'POST',
      path: '/desktop/screenshot',
      handler: async (ctx) => {
        const png = await capture();
        if (wantsRaw(ctx.req, ctx.url)) return sendBytes(ctx.res, png, 'image/png');
        return { image: png.toString('base64'), format: 'png', width: d.width, height: d.height };
      },
    },
    {
      method: 'POST',
      path: '/desktop/screenshot/region',
      handler: async (ctx) => {
        const b = await ctx.body();
        const region = { x: coord(b, 'x'), y: coord(b, 'y'), width: int(b, 'width', 1, MAX_SIDE), height: int(b, 'height', 1, MAX_SIDE) };
        return binary(ctx, await capture(region), 'image/png');
      },
    },

    // Mouse
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

    // Keyboard
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

    // Clipboard
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

    // Recording (ffmpeg x11grab)
    {
      method: 'POST',
      path: '/desktop/recording/start',
      handler: async (ctx) => {
        const b = await ctx.body();
        const outputFile = b.output_file === undefined || b.output_file === null ? undefined : str(b, 'output_file', 4096);
        await d.ensure('recording');
        return recorder.start({ outputFile, fps: int(b, 'fps', 1, 60, 15), workspace: agent.config.workspaceDir });
      },
    },
    ...both('/desktop/recording/stop', async () => recorder.stop()),
    { method: 'GET', path: '/desktop/recording/status', handler: () => recorder.status() },
    {
      method: 'GET',
      path: '/desktop/recording/*',
      handler: async (ctx) => {
        const m = /^([A-Za-z0-9_-]{1,64})\/download$/.exec(ctx.rest);
        if (!m) throw new ServiceError('ROUTE_NOT_FOUND', `no route for GET ${ctx.url.pathname}`);
        const file = recorder.fileOf(m[1]!);
        const size = (await stat(file).catch(() => null))?.size;
        if (size === undefined) throw new ServiceError('RECORDING_NOT_FOUND', `recording ${m[1]}'s file ${file} is gone`);
        return binary(ctx, await readFile(file), recorder.mimeOf(file));
      },
    },

    // Windows
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

    // Display
    {
      method: 'GET',
      path: '/desktop/display/info',
      handler: async () => {
        await d.ensure('display');
        return { width: d.width, height: d.height, depth: d.depth, display: DISPLAY, refresh_rate: 60, displays: [{ id: 0, name: 'screen', width: d.width, height: d.height, primary: true }] };
      },
    },
    { method: 'GET', path: '/desktop/display/resolutions', handler: () => ({ resolutions: RESOLUTIONS, current: [d.width, d.height] }) },
    {
      method: 'POST',
      path: '/desktop/display/resolution',
      handler: async (ctx) => {
        const b = await ctx.body();
        const w = int(b, 'width', 64, 3840);
        const h = int(b, 'height', 64, 2160);
        if (recorder.active) throw new ServiceError('INVALID_STATE', 'stop the recording before changing the resolution');
        await d.resize(w, h);
        return ok({ width: d.width, height: d.height, restarted: true });
      },
    },

    // X11 helpers
    {
      method: 'POST',
      path: '/desktop/x11/ocr',
      handler: async (ctx) => {
        const b = await ctx.body();
        const language = ocrLanguage(b);
        const whole = b.width === undefined && b.height === undefined;
        const region = whole ? undefined : { x: coord(b, 'x', 0), y: coord(b, 'y', 0), width: int(b, 'width', 1, MAX_SIDE), height: int(b, 'height', 1, MAX_SIDE) };
        const words = await ocrWords(region, language);
        const lines = new Map<string, string[]>();
        for (const w of words) lines.set(w.line, [...(lines.get(w.line) ?? []), w.text]);
        return { text: [...lines.values()].map((l) => l.join(' ')).join('\n'), words: words.map(({ line: _l, ...w }) => w) };
      },
    },
    {
      method: 'POST',
      path: '/desktop/x11/find_element',
      handler: async (ctx) => {
        const element = await findText(str(await ctx.body(), 'text', 500));
        return { found: element !== null, element };
      },
    },
    {
      method: 'POST',
      path: '/desktop/x11/get_bounds',
      handler: async (ctx) => {
        const text = str(await ctx.body(), 'text', 500);
        const element = await findText(text);
        if (!element) throw new ServiceError('ELEMENT_NOT_FOUND', `no text "${text.slice(0, 100)}" on the screen`);
        return element;
      },
    },
    {
      method: 'POST',
      path: '/desktop/x11/wait_for',
      handler: async (ctx) => {
        const b = await ctx.body();
        const text = str(b, 'text', 500);
        const timeoutS = int(b, 'timeout', 0, 300, 30);
        const deadline = Date.now() + timeoutS * 1000;
        for (;;) {
          const element = await findText(text);
          if (element) return { found: true, element };
          if (Date.now() >= deadline || ctx.req.destroyed) throw new ServiceError('ELEMENT_NOT_FOUND', `no text "${text.slice(0, 100)}" on the screen after ${timeoutS} s`);
          await new Promise((r) => setTimeout(r, 500));
        }
      },
    },
    ...['drag_drop', 'drag-drop'].map((p): Route => ({ method: 'POST', path: `/desktop/x11/${p}`, handler: async (ctx) => drag(await ctx.body()) })),
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

    // Debug
    { method: 'GET', path: '/desktop/debug/logs', handler: () => ({ logs: d.recentLogs() }) },
    {
      method: 'GET',
      path: '/desktop/debug/processes',
      handler: async () => {
        const r = await runTool('ps', ['-eo', 'pid=,user=,rss=,comm=,args='], { env: d.toolEnv() });
        const processes = [];
        for (const line of r.stdout.toString('utf8').split('\n')) {
          const m = /^\s*(\d+)\s+(\S+)\s+(\d+)\s+(\S+)\s+(.*)$/.exec(line);
          if (m && DESKTOP_PROCESSES.test(m[4]!)) processes.push({ pid: Number(m[1]), user: m[2], rss_kb: Number(m[3]), name: m[4], command: m[5] });
        }
        return { processes, display: DISPLAY, running: d.running };
      },
    },
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

  async function knownWindow(id: number): Promise<number> {
    const list = await windows();
    if (!list.some((w) => parseInt(w.id.slice(2), 16) === id)) throw new ServiceError('WINDOW_NOT_FOUND', `no window ${hexId(id)} (see GET /desktop/windows/list)`);
    return id;
  }
}

function scrollAmount(b: Record<string, unknown>): number {
  const amount = int(b, 'amount', 1, 200, 3);
  const dir = b.direction === undefined ? 'down' : String(b.direction);
  if (dir !== 'up' && dir !== 'down') throw new ServiceError('VALIDATION_ERROR', 'direction: must be up or down', { field: 'direction' });
  return dir === 'up' ? -amount : amount;
}

/** A region clipped to the screen (scrot refuses one that leaves it). */
function clip(r: { x: number; y: number; width: number; height: number }, d: { width: number; height: number }) {
  const x = Math.min(r.x, d.width - 1);
  const y = Math.min(r.y, d.height - 1);
  return { x, y, width: Math.max(1, Math.min(r.width, d.width - x)), height: Math.max(1, Math.min(r.height, d.height - y)) };
}

/** Asked for the bytes themselves (Accept: image/png, or ?raw=true / ?format=png). */
function wantsRaw(req: IncomingMessage, url: URL): boolean {
  const q = url.searchParams.get('raw') ?? url.searchParams.get('format');
  if (q === 'true' || q === '1' || q === 'png') return true;
  return /\bimage\/png\b/.test(String(req.headers.accept ?? ''));
}

/**
 * Bytes for a client that parses JSON (the official TypeScript client runs Buffer.from on what it
 * parsed, so only an array of byte values reaches it as bytes) or raw for any other (the Python
 * client, curl, our SDK).
 */
function binary(ctx: RouteContext, bytes: Buffer, type: string): unknown {
  const accept = String(ctx.req.headers.accept ?? '');
  if (/\bapplication\/json\b/.test(accept) && !/\bimage\/|\bvideo\/|application\/octet-stream/.test(accept)) return [...bytes];
  return sendBytes(ctx.res, bytes, type);
}

function sendBytes(res: ServerResponse, bytes: Buffer, type: string): undefined {
  res.writeHead(200, { 'content-type': type, 'content-length': bytes.length, 'cache-control': 'no-store' });
  res.end(bytes);
  return undefined;
}
