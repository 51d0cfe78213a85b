import { randomBytes } from 'node:crypto';
import { readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { ServiceError } from '../proto.js';
import { hexId } from './args.js';
import { runTool } from './run.js';
import type { Desktop, Part } from './session.js';

/** A rectangle of the screen, in pixels. */
export type Region = { x: number; y: number; width: number; height: number };

/** The X tools the `/desktop/*` routes share, each run once the part of the desktop it needs is up. */
export type DesktopTools = ReturnType<typeof desktopTools>;

export function desktopTools(d: Desktop, tmpDir: string) {
  const run = async (part: Part, file: string, args: string[], opts: { timeoutMs?: number; input?: string; okCodes?: number[] } = {}) => {
    await d.ensure(part);
    return runTool(file, args, { env: d.toolEnv(), ...opts });
  };
  const xdotool = (args: string[], input?: string) => run('input', 'xdotool', args, { input, timeoutMs: input ? 120_000 : 10_000 });

  /** A PNG of the screen or of a part of it, read from a scrot file in the agent's tmp dir. */
  const capture = async (region?: Region): Promise<Buffer> => {
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

  async function knownWindow(id: number): Promise<number> {
    const list = await windows();
    if (!list.some((w) => parseInt(w.id.slice(2), 16) === id)) throw new ServiceError('WINDOW_NOT_FOUND', `no window ${hexId(id)} (see GET /desktop/windows/list)`);
    return id;
  }

  return { d, tmpDir, run, xdotool, capture, windows, knownWindow };
}

/** A region clipped to the screen (scrot refuses one that leaves it). */
export function clip(r: Region, d: { width: number; height: number }) {
  const x = Math.min(r.x, d.width - 1);
  const y = Math.min(r.y, d.height - 1);
  return { x, y, width: Math.max(1, Math.min(r.width, d.width - x)), height: Math.max(1, Math.min(r.height, d.height - y)) };
}
