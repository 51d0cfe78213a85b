import { randomBytes } from 'node:crypto';
import { rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Route } from '../context.js';
import { ServiceError } from '../proto.js';
import { coord, int, MAX_SIDE, ocrLanguage, str } from './args.js';
import { clip, type DesktopTools, type Region } from './tools.js';

/** Text on the screen, read by Tesseract: all of it, or where a given text is. */
export function ocrRoutes({ d, tmpDir, run, capture }: DesktopTools): Route[] {
  /** Words Tesseract finds on the screen (or a region), with their boxes in screen coordinates. */
  const ocrWords = async (region: Region | undefined, language: string) => {
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

  return [
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
  ];
}
