import { writeFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import { Sandbox } from '@sandboxd/sdk';
import { UsageError } from '../args.js';
import type { Command } from '../command.js';
import { bytes, json } from '../output.js';

export const desktopScreenshot: Command = {
  name: 'desktop screenshot',
  summary: "save a PNG of a desktop sandbox's screen",
  args: 'ID',
  details: 'The sandbox needs a desktop (the `desktop` template). With `-o -` the PNG goes to stdout.',
  examples: ['sbx desktop screenshot $ID -o shot.png', 'sbx desktop screenshot $ID -o - > shot.png'],
  options: { output: { type: 'string', short: 'o', value: 'FILE', help: 'where to write the PNG (default screenshot.png; - for stdout)' } },
  minArgs: 1,
  maxArgs: 1,
  async run(ctx, { positionals, values }) {
    const out = typeof values.output === 'string' ? values.output : 'screenshot.png';
    if (out === '') throw new UsageError('-o needs a file name (or - for stdout)', 'desktop screenshot');
    const png = await Sandbox.fromId(positionals[0]!, { client: ctx.client }).desktop.screenshot({ signal: ctx.signal });
    if (out === '-') {
      await new Promise<void>((done, fail) => ctx.io.stdout.write(png, (err) => (err ? fail(err) : done())));
      return 0;
    }
    const path = resolve(out);
    await writeFile(path, png);
    if (ctx.json) ctx.out(json({ path, size: png.length }));
    else ctx.err(`${path} (${bytes(png.length)})\n`);
    return 0;
  },
};

export const desktopOpen: Command = {
  name: 'desktop open',
  summary: "a link that shows a desktop sandbox's screen in a browser (noVNC), mouse and keyboard included",
  args: 'ID',
  details:
    'Starts VNC in the sandbox and prints the signed link of the preview of its noVNC port (6080): open it within 10 minutes; it sets a cookie for that port only. The preview stays private unless made public with `sbx preview ID 6080 --public`.',
  examples: ['sbx desktop open $ID', 'xdg-open "$(sbx desktop open $ID)"'],
  options: {},
  minArgs: 1,
  maxArgs: 1,
  async run(ctx, { positionals }) {
    const url = await Sandbox.fromId(positionals[0]!, { client: ctx.client }).desktop.streamUrl({ signal: ctx.signal });
    if (ctx.json) ctx.out(json({ url }));
    else ctx.out(`${url}\n`);
    return 0;
  },
};
