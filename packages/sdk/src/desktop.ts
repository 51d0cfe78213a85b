import type { AgentClient } from './agent.js';
import type { CallOptions } from './client.js';
import type { PreviewUrl } from './types.js';

/** The noVNC page, served by websockify on this port inside a desktop sandbox. */
export const NOVNC_PORT = 6080;
const NOVNC_PATH = '/vnc.html?autoconnect=true&resize=scale&reconnect=true';

export type MouseButton = 'left' | 'middle' | 'right' | number;

export interface Region {
  x: number;
  y: number;
  width: number;
  height: number;
}

/** Text found on the screen by OCR: its box, in screen pixels. */
export interface TextBounds extends Region {
  text: string;
  centerX: number;
  centerY: number;
}

export interface DesktopWindow {
  /** 0x-hex, as `wmctrl` prints it; what the window calls take. */
  id: string;
  title: string;
  x: number;
  y: number;
  width: number;
  height: number;
  pid?: number;
  focused: boolean;
  minimized: boolean;
}

export interface DisplayInfo {
  width: number;
  height: number;
  depth: number;
  display: string;
}

export interface RecordingInfo {
  recording: boolean;
  recordingId?: string;
  status: 'idle' | 'recording' | 'stopped' | 'failed' | string;
  startTime?: string;
  endTime?: string;
  durationSeconds?: number;
  filePath?: string;
  fileSize?: number;
  format?: string;
}

export interface VncInfo {
  running: boolean;
  display: string;
  /** The noVNC port inside the sandbox (reach it through its preview). */
  port: number;
  vncPort: number;
  /** The noVNC page's path on that preview. */
  path: string;
}

type Json = Record<string, unknown>;
const num = (v: unknown) => (typeof v === 'number' ? v : Number(v));

/**
 * The sandbox's desktop (templates with the `desktop` feature, such as the built-in `desktop`): its
 * screen, mouse, keyboard, clipboard, windows, display, recordings and VNC. Calls on a sandbox
 * without one throw a ServerError with code `DESKTOP_NOT_AVAILABLE` (501).
 */
export class Desktop {
  constructor(
    private readonly agent: AgentClient,
    private readonly preview: (port: number, options: CallOptions) => Promise<PreviewUrl>,
  ) {}

  /** A PNG of the whole screen. */
  async screenshot(options: CallOptions = {}): Promise<Uint8Array> {
    return this.bytes('GET', '/desktop/screenshot', undefined, options, 'image/png', 'screenshot');
  }

  /** A PNG of a part of the screen (clipped to it). */
  async screenshotRegion(region: Region, options: CallOptions = {}): Promise<Uint8Array> {
    return this.bytes('POST', '/desktop/screenshot/region', { ...region }, options, 'image/png', 'screenshot region');
  }

  async moveMouse(x: number, y: number, options: CallOptions = {}): Promise<void> {
    await this.call('POST', '/desktop/mouse/move', { x, y }, options, 'move mouse');
  }

  /** Clicks at (x, y) (or where the pointer is when both are omitted). */
  async click(x?: number, y?: number, opts: { button?: MouseButton; clicks?: number } & CallOptions = {}): Promise<void> {
    await this.call('POST', '/desktop/mouse/click', { x, y, button: opts.button ?? 'left', clicks: opts.clicks ?? 1 }, opts, 'click');
  }

  async doubleClick(x?: number, y?: number, options: CallOptions = {}): Promise<void> {
    await this.click(x, y, { ...options, clicks: 2 });
  }

  async rightClick(x?: number, y?: number, options: CallOptions = {}): Promise<void> {
    await this.click(x, y, { ...options, button: 'right' });
  }

  /** Presses at `from`, moves to `to` with the button held, releases. */
  async drag(from: [number, number], to: [number, number], options: CallOptions = {}): Promise<void> {
    await this.call('POST', '/desktop/mouse/drag', { from_x: from[0], from_y: from[1], to_x: to[0], to_y: to[1] }, options, 'drag');
  }

  /** Wheel steps at (x, y): positive `deltaY` scrolls down, negative up. */
  async scroll(x: number, y: number, deltaY: number, options: CallOptions = {}): Promise<void> {
    await this.call('POST', '/desktop/mouse/scroll', { x, y, delta_y: deltaY }, options, 'scroll');
  }

  async cursorPosition(options: CallOptions = {}): Promise<{ x: number; y: number }> {
    const b = await this.call('GET', '/desktop/mouse/position', undefined, options, 'cursor position');
    return { x: num(b.x), y: num(b.y) };
  }

  /** Types text as key presses into the focused window. */
  async type(text: string, opts: { delayMs?: number } & CallOptions = {}): Promise<void> {
    await this.call('POST', '/desktop/keyboard/type', { text, ...(opts.delayMs === undefined ? {} : { delay_ms: opts.delayMs }) }, { ...opts, requestTimeoutMs: opts.requestTimeoutMs ?? 180_000 }, 'type');
  }

  /** Presses one key: an X keysym (`Return`, `Tab`, `F5`, `a`) or an alias (`enter`, `esc`). */
  async press(key: string, options: CallOptions = {}): Promise<void> {
    await this.call('POST', '/desktop/keyboard/press', { key }, options, `press ${key}`);
  }

  /** Presses keys together, e.g. `hotkey('ctrl', 's')`. */
  async hotkey(...keys: string[]): Promise<void> {
    await this.call('POST', '/desktop/keyboard/combination', { keys }, {}, `press ${keys.join('+')}`);
  }

  async getClipboard(options: CallOptions = {}): Promise<string> {
    const b = await this.call('GET', '/desktop/clipboard/get', undefined, options, 'get clipboard');
    return String(b.content ?? '');
  }

  async setClipboard(text: string, options: CallOptions = {}): Promise<void> {
    await this.call('POST', '/desktop/clipboard/set', { content: text }, options, 'set clipboard');
  }

  /** What the clipboard held, newest first (as set or read through this API). */
  async clipboardHistory(options: CallOptions = {}): Promise<string[]> {
    const b = await this.call('GET', '/desktop/clipboard/history', undefined, options, 'clipboard history');
    return Array.isArray(b.history) ? b.history.map(String) : [];
  }

  async windows(options: CallOptions = {}): Promise<DesktopWindow[]> {
    const b = await this.call('GET', '/desktop/windows/list', undefined, options, 'list windows');
    const list = Array.isArray(b.windows) ? (b.windows as Json[]) : [];
    return list.map((w) => ({
      id: String(w.id),
      title: String(w.title ?? ''),
      x: num(w.x),
      y: num(w.y),
      width: num(w.width),
      height: num(w.height),
      ...(w.pid ? { pid: num(w.pid) } : {}),
      focused: w.focused === true,
      minimized: w.isMinimized === true,
    }));
  }

  async focusWindow(id: string, options: CallOptions = {}): Promise<void> {
    await this.call('POST', '/desktop/windows/focus', { window_id: id }, options, `focus window ${id}`);
  }

  async closeWindow(id: string, options: CallOptions = {}): Promise<void> {
    await this.call('POST', '/desktop/windows/close', { window_id: id }, options, `close window ${id}`);
  }

  async minimizeWindow(id: string, options: CallOptions = {}): Promise<void> {
    await this.call('POST', '/desktop/windows/minimize', { window_id: id }, options, `minimize window ${id}`);
  }

  async resizeWindow(id: string, width: number, height: number, options: CallOptions = {}): Promise<void> {
    await this.call('POST', '/desktop/windows/resize', { window_id: id, width, height }, options, `resize window ${id}`);
  }

  async displayInfo(options: CallOptions = {}): Promise<DisplayInfo> {
    const b = await this.call('GET', '/desktop/display/info', undefined, options, 'display info');
    return { width: num(b.width), height: num(b.height), depth: num(b.depth), display: String(b.display ?? ':0') };
  }

  async resolutions(options: CallOptions = {}): Promise<Array<[number, number]>> {
    const b = await this.call('GET', '/desktop/display/resolutions', undefined, options, 'resolutions');
    return Array.isArray(b.resolutions) ? (b.resolutions as unknown[][]).map((r) => [num(r[0]), num(r[1])] as [number, number]) : [];
  }

  /** A new screen size. The display restarts at it: open windows are closed. */
  async setResolution(width: number, height: number, options: CallOptions = {}): Promise<void> {
    await this.call('POST', '/desktop/display/resolution', { width, height }, { ...options, requestTimeoutMs: options.requestTimeoutMs ?? 60_000 }, 'set resolution');
  }

  /** Starts recording the screen (ffmpeg); `outputFile` in the sandbox ends in .mp4 (default), .mkv or .webm. */
  async startRecording(opts: { outputFile?: string; fps?: number } & CallOptions = {}): Promise<RecordingInfo> {
    return toRecording(await this.call('POST', '/desktop/recording/start', { output_file: opts.outputFile, fps: opts.fps }, opts, 'start recording'));
  }

  async stopRecording(options: CallOptions = {}): Promise<RecordingInfo> {
    return toRecording(await this.call('POST', '/desktop/recording/stop', {}, { ...options, requestTimeoutMs: options.requestTimeoutMs ?? 30_000 }, 'stop recording'));
  }

  async recordingStatus(options: CallOptions = {}): Promise<RecordingInfo> {
    return toRecording(await this.call('GET', '/desktop/recording/status', undefined, options, 'recording status'));
  }

  async downloadRecording(recordingId: string, options: CallOptions = {}): Promise<Uint8Array> {
    return this.bytes('GET', `/desktop/recording/${encodeURIComponent(recordingId)}/download`, undefined, options, 'video/*', `download recording ${recordingId}`);
  }

  /** Text in a region of the screen (the whole screen when omitted), read by Tesseract. */
  async ocr(region?: Region, opts: { language?: string } & CallOptions = {}): Promise<string> {
    const b = await this.call('POST', '/desktop/x11/ocr', { ...region, language: opts.language }, { ...opts, requestTimeoutMs: opts.requestTimeoutMs ?? 90_000 }, 'ocr');
    return String(b.text ?? '');
  }

  /** Where `text` is on the screen (OCR), or null. */
  async findText(text: string, options: CallOptions = {}): Promise<TextBounds | null> {
    const b = await this.call('POST', '/desktop/x11/find_element', { text }, { ...options, requestTimeoutMs: options.requestTimeoutMs ?? 90_000 }, 'find text');
    return b.element ? toBounds(b.element as Json) : null;
  }

  /** Waits until `text` shows on the screen; NotFoundError (ELEMENT_NOT_FOUND) after `timeoutSeconds` (30). */
  async waitForText(text: string, opts: { timeoutSeconds?: number } & CallOptions = {}): Promise<TextBounds> {
    const timeout = opts.timeoutSeconds ?? 30;
    const b = await this.call('POST', '/desktop/x11/wait_for', { text, timeout }, { ...opts, requestTimeoutMs: opts.requestTimeoutMs ?? (timeout + 90) * 1000 }, 'wait for text');
    return toBounds(b.element as Json);
  }

  /** Starts VNC and noVNC in the sandbox (idempotent). */
  async startVnc(options: CallOptions = {}): Promise<VncInfo> {
    return toVnc(await this.call('POST', '/desktop/vnc/start', {}, { ...options, requestTimeoutMs: options.requestTimeoutMs ?? 30_000 }, 'start vnc'));
  }

  async stopVnc(options: CallOptions = {}): Promise<void> {
    await this.call('POST', '/desktop/vnc/stop', {}, options, 'stop vnc');
  }

  async vncInfo(options: CallOptions = {}): Promise<VncInfo> {
    return toVnc(await this.call('GET', '/desktop/vnc/info', undefined, options, 'vnc info'));
  }

  /**
   * A link that opens the desktop in a browser (noVNC through the preview of its port): VNC is
   * started, and the link is the preview's signed link (valid 10 minutes, private previews) or its
   * URL (public ones), landing on the noVNC page.
   */
  async streamUrl(options: CallOptions = {}): Promise<string> {
    const info = await this.startVnc(options);
    const p = await this.preview(info.port, options);
    if (p.signedUrl) return `${p.signedUrl}${p.signedUrl.includes('?') ? '&' : '?'}next=${encodeURIComponent(info.path)}`;
    return `${p.url.replace(/\/$/, '')}${info.path}`;
  }

  /** The desktop's recent log lines (X server, session, VNC, recordings). */
  async logs(options: CallOptions = {}): Promise<string[]> {
    const b = await this.call('GET', '/desktop/debug/logs', undefined, options, 'desktop logs');
    return Array.isArray(b.logs) ? b.logs.map(String) : [];
  }

  async processes(options: CallOptions = {}): Promise<Array<{ pid: number; name: string; command: string }>> {
    const b = await this.call('GET', '/desktop/debug/processes', undefined, options, 'desktop processes');
    return Array.isArray(b.processes) ? (b.processes as Json[]).map((p) => ({ pid: num(p.pid), name: String(p.name), command: String(p.command) })) : [];
  }

  private call(method: 'GET' | 'POST', path: string, json: Json | undefined, options: CallOptions, what: string): Promise<Json> {
    return this.agent.http.json<Json>({ method, path, json, signal: options.signal, timeoutMs: options.requestTimeoutMs, what });
  }

  private async bytes(method: 'GET' | 'POST', path: string, json: Json | undefined, options: CallOptions, accept: string, what: string): Promise<Uint8Array> {
    const sent = await this.agent.http.send({ method, path, json, accept, signal: options.signal, timeoutMs: options.requestTimeoutMs ?? 60_000, what });
    try {
      return new Uint8Array(await sent.res.arrayBuffer());
    } finally {
      sent.done();
    }
  }
}

function toBounds(e: Json): TextBounds {
  return { x: num(e.x), y: num(e.y), width: num(e.width), height: num(e.height), text: String(e.text ?? ''), centerX: num(e.center_x), centerY: num(e.center_y) };
}

function toRecording(b: Json): RecordingInfo {
  return {
    recording: b.recording === true,
    status: String(b.status ?? (b.recording ? 'recording' : 'idle')),
    ...(b.recording_id ? { recordingId: String(b.recording_id) } : {}),
    ...(b.start_time ? { startTime: String(b.start_time) } : {}),
    ...(b.end_time ? { endTime: String(b.end_time) } : {}),
    ...(b.duration !== undefined ? { durationSeconds: num(b.duration) } : {}),
    ...(b.file_path ? { filePath: String(b.file_path) } : {}),
    ...(b.file_size !== undefined ? { fileSize: num(b.file_size) } : {}),
    ...(b.format ? { format: String(b.format) } : {}),
  };
}

function toVnc(b: Json): VncInfo {
  return { running: b.running === true, display: String(b.display ?? ':0'), port: num(b.novnc_port ?? b.port ?? NOVNC_PORT), vncPort: num(b.vnc_port ?? 5900), path: String(b.path ?? NOVNC_PATH) };
}
