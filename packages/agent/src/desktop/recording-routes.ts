import { readFile, stat } from 'node:fs/promises';
import type { Route } from '../context.js';
import { ServiceError } from '../proto.js';
import { int, str } from './args.js';
import type { Recorder } from './recording.js';
import { binary, both } from './reply.js';
import type { DesktopTools } from './tools.js';

/** Recording (ffmpeg x11grab). */
export function recordingRoutes({ d }: DesktopTools, recorder: Recorder, workspaceDir: string): Route[] {
  return [
    {
      method: 'POST',
      path: '/desktop/recording/start',
      handler: async (ctx) => {
        const b = await ctx.body();
        const outputFile = b.output_file === undefined || b.output_file === null ? undefined : str(b, 'output_file', 4096);
        await d.ensure('recording');
        return recorder.start({ outputFile, fps: int(b, 'fps', 1, 60, 15), workspace: workspaceDir });
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
  ];
}
