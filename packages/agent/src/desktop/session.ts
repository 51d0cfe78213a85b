import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { accessSync, chmodSync, chownSync, constants, copyFileSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { delimiter, dirname, join } from 'node:path';
import { logLine } from '../log.js';
import { ServiceError } from '../proto.js';
import { e2bDesktopShims } from './e2b-compat.js';

/** The display every desktop sandbox has (one per sandbox: its own X server). */
export const DISPLAY = ':0';
const X_SOCKET = '/tmp/.X11-unix/X0';
const X_LOCK = '/tmp/.X0-lock';
/** x11vnc listens on loopback only; websockify serves noVNC and bridges to it (the preview port). */
export const VNC_PORT = 5900;
export const NOVNC_PORT = 6080;
const NOVNC_WEB = '/usr/share/novnc';
const LOG_LINES = 400;

/** The pieces each part of the API needs (what a template without them lacks). */
export const NEEDS = {
  display: ['Xvfb'],
  input: ['Xvfb', 'xdotool'],
  screenshot: ['Xvfb', 'scrot'],
  clipboard: ['Xvfb', 'xclip'],
  windows: ['Xvfb', 'wmctrl', 'xdotool', 'xprop'],
  resolution: ['Xvfb', 'xrandr'],
  vnc: ['Xvfb', 'x11vnc', 'websockify'],
  recording: ['Xvfb', 'ffmpeg'],
  ocr: ['Xvfb', 'scrot', 'tesseract'],
} as const;
export type Part = keyof typeof NEEDS;

interface RunAs {
  name: string;
  uid: number;
  gid: number;
  home: string;
}

/** `SANDBOXD_DESKTOP` (`WxH` or `WxHxDEPTH`), as the template sets it; null when malformed. */
export function parseGeometry(spec: string): { width: number; height: number; depth: number } | null {
  const m = /^(\d{2,5})x(\d{2,5})(?:x(8|16|24|32))?$/.exec(spec.trim());
  if (!m) return null;
  const width = Number(m[1]);
  const height = Number(m[2]);
  if (width < 64 || height < 64 || width > 8192 || height > 8192) return null;
  return { width, height, depth: Number(m[3] ?? 24) };
}

/**
 * The sandbox's desktop: an X server (Xvfb) with an Xfce session on it, run as the image's
 * unprivileged `user` when it has one, and, on demand, VNC (x11vnc on loopback) with noVNC
 * (websockify) to watch it through a preview. Everything runs inside the sandbox, under its limits.
 * A template with SANDBOXD_DESKTOP starts it with the agent; any other that has the tools starts it
 * on the first /desktop call.
 */
export class Desktop {
  width: number;
  height: number;
  readonly depth: number;
  private xvfb: ChildProcess | null = null;
  private session: ChildProcess | null = null;
  private vnc: ChildProcess | null = null;
  private novnc: ChildProcess | null = null;
  private starting: Promise<void> | null = null;
  private readonly logs: string[] = [];
  private readonly found = new Map<string, boolean>();
  private runAs: RunAs | null | undefined;

  constructor(
    private readonly baseEnv: Record<string, string>,
    readonly autostart: boolean,
    geometry: { width: number; height: number; depth: number },
  ) {
    this.width = geometry.width;
    this.height = geometry.height;
    this.depth = geometry.depth;
  }

  /** The image's `user`, looked up at the first use (every sandbox's agent makes a Desktop). */
  get user(): RunAs | null {
    if (this.runAs === undefined) this.runAs = findUser('user');
    return this.runAs;
  }

  /** Whether `tool` is on the PATH (looked up once). */
  has(tool: string): boolean {
    let ok = this.found.get(tool);
    if (ok === undefined) {
      ok = (this.baseEnv.PATH ?? '/usr/bin:/bin').split(delimiter).some((d) => {
        try {
          accessSync(join(d, tool), constants.X_OK);
          return true;
        } catch {
          return false;
        }
      });
      this.found.set(tool, ok);
    }
    return ok;
  }

  missing(part: Part): string[] {
    return NEEDS[part].filter((t) => !this.has(t));
  }

  /** Throws 501 DESKTOP_NOT_AVAILABLE naming what `part` lacks. */
  need(part: Part): void {
    const missing = this.missing(part);
    if (missing.length === 0) return;
    const all = Object.keys(NEEDS).flatMap((p) => this.missing(p as Part));
    throw new ServiceError(
      'DESKTOP_NOT_AVAILABLE',
      `this sandbox has no desktop: ${missing.join(', ')} ${missing.length === 1 ? 'is' : 'are'} not installed (create it from the "desktop" template)`,
      { missing: [...new Set(all)] },
    );
  }

  /** The env of a tool run against the display (xdotool, scrot, ...). */
  toolEnv(): Record<string, string> {
    return { ...this.baseEnv, DISPLAY, LANG: this.baseEnv.LANG ?? 'C.UTF-8' };
  }

  /** The env of the session's programs: the user's home, runtime dir and no accessibility bus. */
  private sessionEnv(): Record<string, string> {
    const u = this.user;
    const env: Record<string, string> = { ...this.toolEnv(), NO_AT_BRIDGE: '1' };
    delete env.DBUS_SESSION_BUS_ADDRESS;
    if (u) Object.assign(env, { HOME: u.home, USER: u.name, LOGNAME: u.name, XDG_RUNTIME_DIR: `/tmp/runtime-${u.name}` });
    else env.XDG_RUNTIME_DIR = '/tmp/runtime-root';
    return env;
  }

  log(line: string): void {
    this.logs.push(`${new Date().toISOString()} ${line}`);
    if (this.logs.length > LOG_LINES) this.logs.splice(0, this.logs.length - LOG_LINES);
  }

  recentLogs(): string[] {
    return [...this.logs];
  }

  get running(): boolean {
    return this.xvfb !== null || otherServer() !== null;
  }

  /** Starts the display (and its session) unless it runs; concurrent callers wait for one start. */
  ensure(part: Part = 'display'): Promise<void> {
    this.need(part);
    if (this.xvfb) return this.starting ?? Promise.resolve();
    if (!this.starting && otherServer() !== null) return Promise.resolve();
    this.starting ??= this.start().finally(() => {
      this.starting = null;
    });
    return this.starting;
  }

  private async start(): Promise<void> {
    const t0 = Date.now();
    mkdirSync('/tmp/.X11-unix', { recursive: true });
    chmodSync('/tmp/.X11-unix', 0o1777);
    // A server killed outright leaves its lock and socket, which would stop a new one.
    rmSync(X_LOCK, { force: true });
    rmSync(X_SOCKET, { force: true });
    // Before anything can run in the sandbox: E2B's desktop client starts a session of its own.
    for (const note of e2bDesktopShims()) this.log(note);
    const env = this.sessionEnv();
    if (this.user) prepareHome(this.user, env.XDG_RUNTIME_DIR!);
    else mkdirSync(env.XDG_RUNTIME_DIR!, { recursive: true, mode: 0o700 });
    const xvfb = this.spawn('Xvfb', [DISPLAY, '-screen', '0', `${this.width}x${this.height}x${this.depth}`, '-ac', '-nolisten', 'tcp', '-dpi', '96', '-s', '0', '+extension', 'RANDR'], env, () => {
      if (this.xvfb === xvfb) {
        this.xvfb = null;
        this.stopSession();
      }
    });
    this.xvfb = xvfb;
    if (!(await waitForSocket(X_SOCKET, 10_000, () => this.xvfb !== xvfb))) {
      this.log('Xvfb did not come up');
      this.stopAll();
      throw new ServiceError('INTERNAL_ERROR', 'the X server did not start; see GET /desktop/debug/logs');
    }
    this.log(`display ${DISPLAY} ${this.width}x${this.height}x${this.depth} up in ${Date.now() - t0} ms`);
    void chromiumFlags().then((note) => note && this.log(note));
    if (this.has('xfce4-session') && this.has('dbus-launch')) {
      this.session = this.spawn('dbus-launch', ['--exit-with-session', 'xfce4-session'], env, () => (this.session = null));
    } else if (this.has('xfwm4')) {
      this.session = this.spawn('xfwm4', [], env, () => (this.session = null));
    }
  }

  /**
   * A new screen size. Xvfb cannot change its size (RandR offers only the mode it started with),
   * so the display restarts at the new size: the session starts again and open windows are lost.
   */
  async resize(width: number, height: number): Promise<void> {
    this.need('display');
    await this.starting?.catch(() => undefined);
    const vnc = this.vncRunning;
    const old = this.xvfb;
    this.stopAll();
    if (old) await exited(old, 5_000);
    this.width = width;
    this.height = height;
    await this.ensure();
    if (vnc) await this.startVnc();
  }

  /** Starts x11vnc and noVNC's websockify unless they run. */
  async startVnc(): Promise<void> {
    await this.ensure('vnc');
    const env = this.sessionEnv();
    if (!this.vnc) {
      this.vnc = this.spawn('x11vnc', ['-display', DISPLAY, '-forever', '-shared', '-nopw', '-localhost', '-rfbport', String(VNC_PORT), '-noxdamage', '-quiet'], env, () => (this.vnc = null));
    }
    if (!this.novnc) {
      const web = existsSync(NOVNC_WEB) ? ['--web', NOVNC_WEB] : [];
      this.novnc = this.spawn('websockify', [...web, `127.0.0.1:${NOVNC_PORT}`, `127.0.0.1:${VNC_PORT}`], env, () => (this.novnc = null));
    }
    const ok = (await waitForTcp(VNC_PORT, 10_000)) && (await waitForTcp(NOVNC_PORT, 10_000));
    if (!ok) throw new ServiceError('INTERNAL_ERROR', 'VNC did not start; see GET /desktop/debug/logs');
  }

  stopVnc(): void {
    for (const p of [this.novnc, this.vnc]) killGroup(p);
    this.novnc = null;
    this.vnc = null;
  }

  get vncRunning(): boolean {
    return this.vnc !== null && this.novnc !== null;
  }

  private stopSession(): void {
    killGroup(this.session);
    this.session = null;
    this.stopVnc();
  }

  stopAll(): void {
    this.stopSession();
    killGroup(this.xvfb);
    this.xvfb = null;
  }

  /** Desktop programs run as the sandbox's `user`, in their own process group, their output in the debug log. */
  private spawn(file: string, args: string[], env: Record<string, string>, onExit: () => void): ChildProcess {
    const u = this.user;
    const child = spawn(file, args, {
      env,
      cwd: u?.home ?? '/',
      detached: true,
      stdio: ['ignore', 'pipe', 'pipe'],
      ...(u ? { uid: u.uid, gid: u.gid } : {}),
    });
    const name = file;
    this.log(`${name} started (pid ${child.pid ?? '?'})`);
    const tail = (chunk: Buffer) => {
      for (const l of chunk.toString('utf8').split('\n')) if (l.trim()) this.log(`${name}: ${l.trimEnd().slice(0, 500)}`);
    };
    child.stdout!.on('data', tail);
    child.stderr!.on('data', tail);
    child.once('error', (err) => this.log(`${name}: ${err.message}`));
    child.once('exit', (code, signal) => {
      this.log(`${name} exited (${signal ?? code})`);
      onExit();
    });
    return child;
  }
}

const CHROMIUM_FLAGS_FILE = '/etc/chromium.d/sandboxd';

/**
 * Chromium's own sandbox needs user namespaces (Debian ships no setuid helper); where the
 * container refuses them (our default seccomp profile does), Chromium starts only with
 * --no-sandbox, so its launcher is told so (docs/security.md says why this is acceptable here).
 */
async function chromiumFlags(): Promise<string | null> {
  if (!existsSync('/etc/chromium.d') || existsSync(CHROMIUM_FLAGS_FILE)) return null;
  const userns = await new Promise<boolean>((resolve) => execFile('unshare', ['-U', 'true'], { timeout: 5_000 }, (err) => resolve(!err)));
  if (userns) return null;
  try {
    writeFileSync(CHROMIUM_FLAGS_FILE, '# Written by the sandboxd agent: this container allows no user namespaces, which Chromium\'s sandbox needs.\nexport CHROMIUM_FLAGS="$CHROMIUM_FLAGS --no-sandbox --test-type"\n', { mode: 0o644 });
    return `no user namespaces here: chromium runs with --no-sandbox (${CHROMIUM_FLAGS_FILE})`;
  } catch (err) {
    return `cannot write ${CHROMIUM_FLAGS_FILE}: ${(err as Error).message}`;
  }
}

/** The pid of a live X server on :0 that is not ours (one a user started), else null. */
function otherServer(): number | null {
  try {
    const pid = Number(readFileSync(X_LOCK, 'utf8').trim());
    if (!Number.isInteger(pid) || pid <= 0) return null;
    process.kill(pid, 0);
    return pid;
  } catch {
    return null;
  }
}

function exited(p: ChildProcess, timeoutMs: number): Promise<void> {
  if (p.exitCode !== null || p.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const t = setTimeout(() => {
      try {
        if (p.pid) process.kill(-p.pid, 'SIGKILL');
      } catch {
        // gone
      }
      resolve();
    }, timeoutMs);
    p.once('exit', () => {
      clearTimeout(t);
      resolve();
    });
  });
}

function killGroup(p: ChildProcess | null): void {
  if (!p?.pid || p.exitCode !== null || p.signalCode !== null) return;
  try {
    process.kill(-p.pid, 'SIGTERM');
  } catch {
    p.kill('SIGTERM');
  }
}

function findUser(name: string): RunAs | null {
  try {
    for (const line of readFileSync('/etc/passwd', 'utf8').split('\n')) {
      const f = line.split(':');
      if (f[0] === name && f.length >= 7) {
        const uid = Number(f[2]);
        const gid = Number(f[3]);
        if (Number.isInteger(uid) && uid > 0 && Number.isInteger(gid) && f[5]) return { name, uid, gid, home: f[5] };
      }
    }
  } catch {
    // no passwd: run as the agent's user
  }
  return null;
}

/**
 * The user's home and runtime dir, and the panel's default layout as the user's own: without it
 * xfce4-panel asks, in a dialog over everything, which layout to use.
 */
function prepareHome(u: RunAs, runtimeDir: string): void {
  const own = (p: string) => {
    try {
      chownSync(p, u.uid, u.gid);
    } catch {
      // best effort: a home the user cannot write only costs the session its settings
    }
  };
  mkdirSync(runtimeDir, { recursive: true, mode: 0o700 });
  own(runtimeDir);
  const panel = join(u.home, '.config/xfce4/xfconf/xfce-perchannel-xml/xfce4-panel.xml');
  const shipped = '/etc/xdg/xfce4/panel/default.xml';
  if (!existsSync(panel) && existsSync(shipped)) {
    try {
      let dir = dirname(panel);
      mkdirSync(dir, { recursive: true });
      copyFileSync(shipped, panel);
      own(panel);
      while (dir.startsWith(u.home) && dir !== u.home) {
        own(dir);
        dir = dirname(dir);
      }
    } catch (err) {
      logLine(`desktop: cannot seed the panel layout: ${(err as Error).message}`);
    }
  }
}

function waitForSocket(path: string, timeoutMs: number, gone: () => boolean): Promise<boolean> {
  return poll(timeoutMs, gone, () => tryConnect({ path }));
}

export function waitForTcp(port: number, timeoutMs: number): Promise<boolean> {
  return poll(timeoutMs, () => false, () => tryConnect({ port, host: '127.0.0.1' }));
}

async function poll(timeoutMs: number, gone: () => boolean, probe: () => Promise<boolean>): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (gone()) return false;
    if (await probe()) return true;
    await new Promise((r) => setTimeout(r, 15));
  }
  return false;
}

function tryConnect(to: { path: string } | { port: number; host: string }): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect(to as never);
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });
}
