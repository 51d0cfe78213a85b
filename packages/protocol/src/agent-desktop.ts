import { Type, type TSchema } from '@sinclair/typebox';

/**
 * The `/desktop/*` agent API (docs/desktop.md): its request bodies and answers, for the OpenAPI
 * document. The agent validates these bodies itself (packages/agent/src/desktop/args.ts), with
 * the aliases the official clients send; what is here is the canonical shape.
 */

const Coord = (description: string) => Type.Integer({ minimum: 0, maximum: 8191, description });
const Side = (description: string) => Type.Integer({ minimum: 1, maximum: 8192, description });
const Button = Type.Union([Type.Literal('left'), Type.Literal('middle'), Type.Literal('right'), Type.Integer({ minimum: 1, maximum: 9 })], { description: 'left (default), middle, right, or an X button number 1-9' });
const KeyName = Type.String({ minLength: 1, maxLength: 64, description: 'an X keysym (Return, Tab, F5, a) or an alias (enter, esc, ctrl, alt, shift, super, up, pageup, ...)' });
const WindowId = Type.Union([Type.String({ pattern: '^(0x[0-9a-fA-F]{1,8}|[0-9]{1,10})$' }), Type.Integer({ minimum: 1 })], { description: 'a window id: 0x-hex (as windows/list gives) or decimal' });
const Success = { success: Type.Boolean({ description: 'true' }) };

export const DesktopPointBody = Type.Object({ x: Coord('pixels from the left'), y: Coord('pixels from the top') });
export const DesktopRegionBody = Type.Object({ x: Coord('left edge'), y: Coord('top edge'), width: Side('pixels'), height: Side('pixels') });
export const DesktopClickBody = Type.Object({
  x: Type.Optional(Coord('move here first (with y)')),
  y: Type.Optional(Coord('move here first (with x)')),
  button: Type.Optional(Button),
  clicks: Type.Optional(Type.Integer({ minimum: 1, maximum: 10, description: 'clicks in a row (2: a double click), default 1' })),
});
export const DesktopButtonBody = Type.Object({ button: Type.Optional(Button) });
export const DesktopDragBody = Type.Object({
  from_x: Coord('where the drag starts'),
  from_y: Coord('where the drag starts'),
  to_x: Coord('where it ends'),
  to_y: Coord('where it ends'),
  button: Type.Optional(Button),
});
export const DesktopScrollBody = Type.Object({
  x: Type.Optional(Coord('move here first (with y)')),
  y: Type.Optional(Coord('move here first (with x)')),
  delta_y: Type.Optional(Type.Integer({ minimum: -200, maximum: 200, description: 'wheel steps: positive scrolls down, negative up' })),
  delta_x: Type.Optional(Type.Integer({ minimum: -200, maximum: 200, description: 'wheel steps: positive scrolls right, negative left' })),
});
export const DesktopTypeBody = Type.Object({
  text: Type.String({ maxLength: 65536, description: 'typed as it is; newlines type Return' }),
  delay_ms: Type.Optional(Type.Integer({ minimum: 0, maximum: 1000, description: 'between keystrokes, default 12' })),
});
export const DesktopPressBody = Type.Object({ key: Type.String({ minLength: 1, maxLength: 200, description: 'a key, or a combination joined with + (ctrl+s)' }) });
export const DesktopCombinationBody = Type.Object({ keys: Type.Array(KeyName, { minItems: 1, maxItems: 8, description: 'pressed together, in this order' }) });
export const DesktopHotkeyBody = Type.Object({ modifiers: Type.Optional(Type.Array(KeyName, { maxItems: 7 })), key: KeyName });
export const DesktopClipboardBody = Type.Object({ content: Type.String({ maxLength: 1048576, description: 'text for the clipboard (1 MiB at most)' }) });
export const DesktopWindowBody = Type.Object({ window_id: WindowId });
export const DesktopWindowResizeBody = Type.Object({ window_id: WindowId, width: Side('pixels'), height: Side('pixels') });
export const DesktopResolutionBody = Type.Object({
  width: Type.Integer({ minimum: 64, maximum: 3840 }),
  height: Type.Integer({ minimum: 64, maximum: 2160 }),
});
export const DesktopRecordingBody = Type.Object({
  output_file: Type.Optional(Type.String({ maxLength: 4096, description: 'ending in .mp4 (H.264, default), .mkv or .webm (VP8); relative to the workspace; default /tmp/recordings/<id>.mp4' })),
  fps: Type.Optional(Type.Integer({ minimum: 1, maximum: 60, description: 'frames per second, default 15' })),
});
export const DesktopOcrBody = Type.Object({
  x: Type.Optional(Coord('region: left edge (default 0)')),
  y: Type.Optional(Coord('region: top edge (default 0)')),
  width: Type.Optional(Side('region: width (with height; default the whole screen)')),
  height: Type.Optional(Side('region: height (with width)')),
  language: Type.Optional(Type.String({ pattern: '^[a-z_]{3,16}(\\+[a-z_]{3,16}){0,3}$', description: 'Tesseract languages, default eng' })),
});
export const DesktopTextBody = Type.Object({ text: Type.String({ minLength: 1, maxLength: 500, description: 'words to find on the screen (OCR), case-insensitive' }) });
export const DesktopWaitForBody = Type.Object({
  text: Type.String({ minLength: 1, maxLength: 500 }),
  timeout: Type.Optional(Type.Integer({ minimum: 0, maximum: 300, description: 'seconds, default 30' })),
});

// Answers.
export const DesktopOk = Type.Object({ ...Success });
export const DesktopScreenshotResponse = Type.Object({
  image: Type.String({ description: 'the PNG, base64' }),
  format: Type.Literal('png'),
  width: Type.Integer(),
  height: Type.Integer(),
});
export const DesktopMousePosition = Type.Object({
  x: Type.Integer(),
  y: Type.Integer(),
  screen: Type.Integer(),
  window: Type.Union([Type.String({ description: 'the window under the pointer, 0x-hex' }), Type.Null()]),
});
export const DesktopMovedResponse = Type.Object({ ...Success, x: Type.Integer(), y: Type.Integer() });
export const DesktopTypedResponse = Type.Object({ ...Success, typed: Type.Integer({ description: 'characters typed' }) });
export const DesktopKeyResponse = Type.Object({ ...Success, key: Type.String({ description: 'as sent to xdotool' }) });
export const DesktopKeysResponse = Type.Object({ ...Success, keys: Type.String({ description: 'the combination as sent to xdotool (ctrl+s)' }) });
export const DesktopClipboardContent = Type.Object({ content: Type.String(), text: Type.String({ description: 'the same as content' }) });
export const DesktopClipboardSet = Type.Object({ ...Success, length: Type.Integer() });
export const DesktopClipboardHistory = Type.Object({ history: Type.Array(Type.String(), { description: 'newest first, 50 at most' }), count: Type.Integer() });
export const DesktopWindow = Type.Object({
  id: Type.String({ description: '0x-hex' }),
  desktop: Type.Integer({ description: 'workspace, -1 on all' }),
  pid: Type.Optional(Type.Integer()),
  x: Type.Integer(),
  y: Type.Integer(),
  width: Type.Integer(),
  height: Type.Integer(),
  title: Type.String(),
  focused: Type.Boolean(),
  isActive: Type.Boolean(),
  isMinimized: Type.Boolean(),
});
export const DesktopWindowList = Type.Object({ windows: Type.Array(DesktopWindow) });
export const DesktopWindowDone = Type.Object({ ...Success, window_id: Type.String(), width: Type.Optional(Type.Integer()), height: Type.Optional(Type.Integer()) });
export const DesktopDisplayInfo = Type.Object({
  width: Type.Integer(),
  height: Type.Integer(),
  depth: Type.Integer(),
  display: Type.String(),
  refresh_rate: Type.Integer(),
  displays: Type.Array(Type.Object({ id: Type.Integer(), name: Type.String(), width: Type.Integer(), height: Type.Integer(), primary: Type.Boolean() })),
});
const Size = Type.Array(Type.Integer(), { minItems: 2, maxItems: 2, description: '[width, height]' });
export const DesktopResolutions = Type.Object({ resolutions: Type.Array(Size), current: Size });
export const DesktopResolutionSet = Type.Object({ ...Success, width: Type.Integer(), height: Type.Integer(), restarted: Type.Boolean({ description: 'the display restarted at that size: windows were closed' }) });
export const DesktopRecordingStatus = Type.Object({
  success: Type.Optional(Type.Boolean()),
  recording: Type.Boolean(),
  status: Type.Union([Type.Literal('recording'), Type.Literal('stopped'), Type.Literal('failed'), Type.Literal('idle')]),
  recording_id: Type.Optional(Type.String()),
  start_time: Type.Optional(Type.String({ format: 'date-time' })),
  end_time: Type.Optional(Type.String({ format: 'date-time' })),
  duration: Type.Optional(Type.Number({ description: 'seconds' })),
  file_path: Type.Optional(Type.String()),
  output_file: Type.Optional(Type.String()),
  file_size: Type.Optional(Type.Integer()),
  format: Type.Optional(Type.String({ description: 'mp4, mkv or webm' })),
  error: Type.Optional(Type.String({ description: "ffmpeg's last words, when it made no file" })),
});
const Word = { text: Type.String(), x: Type.Integer(), y: Type.Integer(), width: Type.Integer(), height: Type.Integer() };
export const DesktopOcrResponse = Type.Object({ text: Type.String({ description: 'lines joined with newlines' }), words: Type.Array(Type.Object({ ...Word, conf: Type.Number({ description: "Tesseract's confidence, 0-100" }) })) });
export const DesktopElement = Type.Object({ ...Word, center_x: Type.Integer(), center_y: Type.Integer() });
export const DesktopFound = Type.Object({ found: Type.Boolean(), element: Type.Union([DesktopElement, Type.Null()]) });
export const DesktopVncInfo = Type.Object({
  running: Type.Boolean(),
  display: Type.String(),
  port: Type.Integer({ description: "noVNC's port inside the sandbox: open its preview" }),
  vnc_port: Type.Integer({ description: "x11vnc's port (loopback only)" }),
  novnc_port: Type.Integer(),
  url: Type.String({ description: 'empty: the agent does not know the preview URL (sandbox.getPreviewUrl(6080))' }),
  path: Type.String({ description: "noVNC's page on that preview" }),
  password: Type.Null(),
});
export const DesktopVncStopped = Type.Object({ ...Success, running: Type.Literal(false) });
export const DesktopLogs = Type.Object({ logs: Type.Array(Type.String()) });
export const DesktopProcesses = Type.Object({
  processes: Type.Array(Type.Object({ pid: Type.Integer(), user: Type.String(), rss_kb: Type.Integer(), name: Type.String(), command: Type.String() })),
  display: Type.String(),
  running: Type.Boolean(),
});

export interface DesktopRouteDoc {
  method: 'GET' | 'POST';
  path: string;
  summary: string;
  body?: TSchema;
  query?: TSchema;
}

/** The desktop's routes, as AGENT_ROUTES lists them (aliases the clients also use are served too: docs/desktop.md). */
export const DESKTOP_ROUTES: DesktopRouteDoc[] = [
  { method: 'GET', path: '/desktop/screenshot', summary: 'a PNG of the screen (JSON with base64, or the bytes)', query: Type.Object({ format: Type.Optional(Type.Literal('png', { description: 'png: the bytes (as Accept: image/png)' })) }) },
  { method: 'POST', path: '/desktop/screenshot/region', summary: 'a PNG of part of the screen', body: DesktopRegionBody },
  { method: 'POST', path: '/desktop/mouse/move', summary: 'move the pointer', body: DesktopPointBody },
  { method: 'GET', path: '/desktop/mouse/position', summary: "the pointer's position" },
  { method: 'POST', path: '/desktop/mouse/click', summary: 'click (a button, a number of times, optionally somewhere)', body: DesktopClickBody },
  { method: 'POST', path: '/desktop/mouse/down', summary: 'press a mouse button', body: DesktopButtonBody },
  { method: 'POST', path: '/desktop/mouse/up', summary: 'release a mouse button', body: DesktopButtonBody },
  { method: 'POST', path: '/desktop/mouse/drag', summary: 'drag from one point to another', body: DesktopDragBody },
  { method: 'POST', path: '/desktop/mouse/scroll', summary: 'turn the wheel', body: DesktopScrollBody },
  { method: 'POST', path: '/desktop/keyboard/type', summary: 'type text', body: DesktopTypeBody },
  { method: 'POST', path: '/desktop/keyboard/press', summary: 'press a key or a combination', body: DesktopPressBody },
  { method: 'POST', path: '/desktop/keyboard/combination', summary: 'press keys together', body: DesktopCombinationBody },
  { method: 'POST', path: '/desktop/x11/hotkey', summary: 'modifiers and a key together', body: DesktopHotkeyBody },
  { method: 'GET', path: '/desktop/clipboard/get', summary: "the clipboard's text" },
  { method: 'POST', path: '/desktop/clipboard/set', summary: 'set the clipboard', body: DesktopClipboardBody },
  { method: 'GET', path: '/desktop/clipboard/history', summary: 'what the API set or read on the clipboard' },
  { method: 'GET', path: '/desktop/windows/list', summary: 'the open windows' },
  { method: 'POST', path: '/desktop/windows/focus', summary: 'focus a window', body: DesktopWindowBody },
  { method: 'POST', path: '/desktop/windows/close', summary: 'close a window', body: DesktopWindowBody },
  { method: 'POST', path: '/desktop/windows/minimize', summary: 'minimize a window', body: DesktopWindowBody },
  { method: 'POST', path: '/desktop/windows/resize', summary: 'resize a window', body: DesktopWindowResizeBody },
  { method: 'GET', path: '/desktop/display/info', summary: 'the screen: size, depth, display' },
  { method: 'GET', path: '/desktop/display/resolutions', summary: 'usual sizes, and the current one' },
  { method: 'POST', path: '/desktop/display/resolution', summary: 'restart the display at another size', body: DesktopResolutionBody },
  { method: 'POST', path: '/desktop/recording/start', summary: 'start recording the screen (ffmpeg)', body: DesktopRecordingBody },
  { method: 'POST', path: '/desktop/recording/stop', summary: 'stop the recording' },
  { method: 'GET', path: '/desktop/recording/status', summary: 'the current or last recording' },
  { method: 'GET', path: '/desktop/recording/{recording_id}/download', summary: "a recording's video" },
  { method: 'POST', path: '/desktop/x11/ocr', summary: 'the text on the screen (Tesseract), with word boxes', body: DesktopOcrBody },
  { method: 'POST', path: '/desktop/x11/find_element', summary: 'where some text is on the screen', body: DesktopTextBody },
  { method: 'POST', path: '/desktop/x11/get_bounds', summary: 'the box of some text on the screen (404 when absent)', body: DesktopTextBody },
  { method: 'POST', path: '/desktop/x11/wait_for', summary: 'wait until some text is on the screen', body: DesktopWaitForBody },
  { method: 'POST', path: '/desktop/x11/drag_drop', summary: 'drag and drop (as mouse/drag)', body: DesktopDragBody },
  { method: 'GET', path: '/desktop/x11/capture_window', summary: 'a PNG of one window', query: Type.Object({ window_id: Type.Optional(Type.String({ description: '0x-hex or decimal; default the focused window' })) }) },
  { method: 'POST', path: '/desktop/vnc/start', summary: 'start VNC and noVNC (port 6080, for a preview)' },
  { method: 'GET', path: '/desktop/vnc/start', summary: 'start VNC and noVNC (as POST; the official TypeScript client GETs)' },
  { method: 'POST', path: '/desktop/vnc/stop', summary: 'stop VNC and noVNC' },
  { method: 'GET', path: '/desktop/vnc/stop', summary: 'stop VNC and noVNC (as POST)' },
  { method: 'GET', path: '/desktop/vnc/info', summary: 'whether VNC runs, and where' },
  { method: 'GET', path: '/desktop/debug/logs', summary: "the desktop's own log lines" },
  { method: 'GET', path: '/desktop/debug/processes', summary: "the desktop's processes" },
];
