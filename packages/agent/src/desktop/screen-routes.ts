import type { Route } from '../context.js';
import { ServiceError } from '../proto.js';
import { coord, int, MAX_SIDE } from './args.js';
import type { Recorder } from './recording.js';
import { runTool } from './run.js';
import { DISPLAY, NOVNC_PORT, VNC_PORT } from './session.js';
import { binary, both, ok, sendBytes, wantsRaw } from './reply.js';
import type { DesktopTools } from './tools.js';

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
const DESKTOP_PROCESSES = /^(Xvfb|xfce4-|xfwm4|xfdesktop|xfsettingsd|xfconfd|Thunar|panel-|x11vnc|websockify|ffmpeg|dbus-|mousepad|chromium|chrome|xdotool|scrot|xclip)/;

/** VNC: the client GETs start/stop; the Python client POSTs. */
export function vncRoutes({ d }: DesktopTools): Route[] {
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

  return [
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
  ];
}

export function screenshotRoutes({ d, capture }: DesktopTools): Route[] {
  return [
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
  ];
}

export function displayRoutes({ d }: DesktopTools, recorder: Recorder): Route[] {
  return [
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
  ];
}

export function debugRoutes({ d }: DesktopTools): Route[] {
  return [
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
}
