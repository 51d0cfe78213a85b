import { Type } from '@sinclair/typebox';
import {
  DesktopButtonBody,
  DesktopClickBody,
  DesktopClipboardBody,
  DesktopClipboardContent,
  DesktopClipboardHistory,
  DesktopClipboardSet,
  DesktopCombinationBody,
  DesktopDisplayInfo,
  DesktopDragBody,
  DesktopElement,
  DesktopFound,
  DesktopHotkeyBody,
  DesktopKeyResponse,
  DesktopKeysResponse,
  DesktopLogs,
  DesktopMousePosition,
  DesktopMovedResponse,
  DesktopOcrBody,
  DesktopOcrResponse,
  DesktopOk,
  DesktopPointBody,
  DesktopPressBody,
  DesktopProcesses,
  DesktopRecordingBody,
  DesktopRecordingStatus,
  DesktopRegionBody,
  DesktopResolutionBody,
  DesktopResolutions,
  DesktopResolutionSet,
  DesktopScreenshotResponse,
  DesktopScrollBody,
  DesktopTextBody,
  DesktopTypeBody,
  DesktopTypedResponse,
  DesktopVncInfo,
  DesktopVncStopped,
  DesktopWaitForBody,
  DesktopWindowBody,
  DesktopWindowDone,
  DesktopWindowList,
  DesktopWindowResizeBody,
  type ErrorCode,
} from '@sandboxd/protocol';
import type { OperationDoc, Payload, SuccessDoc } from './api-doc-types.js';

/**
 * The `/desktop/*` agent API in the OpenAPI document (docs/desktop.md): what api-docs.ts and
 * responses/ say of each operation, kept here beside each other. Keyed as AGENT_OPERATIONS.
 */

const BINARY = Type.String({ format: 'binary' });
const json = (schema: Payload['schema'], example: unknown): Record<string, Payload> => ({ 'application/json': { schema, example } });
const request = (example: unknown, schema?: Payload['schema']): SuccessDoc['request'] => ({ required: true, content: { 'application/json': { schema, example } } });
// A 1x1 PNG: what a screenshot's bytes look like (a real one is 1024x768).
const PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==';
const AT = '2025-06-02T09:14:07.512Z';
const LATER = '2025-06-02T09:14:19.804Z';
const REC = 'rec_4f1c9a2e7b3d5068';
const WIN = '0x01a00004';
const ok = { success: true };
const vnc = { running: true, display: ':0', port: 6080, vnc_port: 5900, novnc_port: 6080, url: '', path: '/vnc.html?autoconnect=true&resize=scale', password: null };
const stopped = {
  success: true,
  recording: false,
  recording_id: REC,
  status: 'stopped',
  start_time: AT,
  end_time: LATER,
  duration: 12.3,
  file_path: `/tmp/recordings/${REC}.mp4`,
  output_file: `/tmp/recordings/${REC}.mp4`,
  file_size: 482_113,
  format: 'mp4',
};
const element = { text: 'File', x: 12, y: 31, width: 26, height: 12, center_x: 25, center_y: 37 };

/** The operations' docs, with the agent's errors every call may give (`base`). */
export function desktopOperations(base: ErrorCode[]): Record<string, OperationDoc> {
  const D: ErrorCode[] = [...base, 'DESKTOP_NOT_AVAILABLE'];
  const IN: ErrorCode[] = [...D, 'VALIDATION_ERROR'];
  const WIN_ERR: ErrorCode[] = [...IN, 'WINDOW_NOT_FOUND'];
  const op = (summary: string, description: string, errors: ErrorCode[] = D): OperationDoc => ({ tag: 'desktop', summary, description, errors });
  const both = (summary: string, description: string, errors?: ErrorCode[]) => [op(summary, description, errors), op(summary, `${description} Served for GET and POST (the official TypeScript client GETs, the Python one POSTs).`, errors)] as const;
  const [vncStartPost, vncStartGet] = both('Start VNC', 'Starts x11vnc (loopback only, port 5900) and noVNC with websockify on port 6080 unless they run, and answers where: open the preview of port 6080 at `path` (`sbx desktop open`, SDK `sandbox.desktop.streamUrl()`).');
  const [vncStopPost, vncStopGet] = both('Stop VNC', 'Stops x11vnc and noVNC.');
  return {
    'GET /desktop/screenshot': op('Screenshot', 'A PNG of the whole screen: JSON with the image in base64, or the bytes themselves with `Accept: image/png` or `?format=png`. `POST` is served too.'),
    'POST /desktop/screenshot/region': op('Screenshot of a region', 'A PNG of a rectangle of the screen (clipped to it). The bytes; a JSON array of byte values when `Accept` names only JSON, as the official TypeScript client asks.', IN),
    'POST /desktop/mouse/move': op('Move the pointer', 'Moves the pointer to `x`, `y` (xdotool).', IN),
    'GET /desktop/mouse/position': op('Pointer position', 'Where the pointer is, and the window under it.'),
    'POST /desktop/mouse/click': op('Click', 'Clicks `button` `clicks` times (a double click: 2), first moving to `x`, `y` when given.', IN),
    'POST /desktop/mouse/down': op('Press a button', 'Presses a mouse button and holds it (until `/desktop/mouse/up`).', IN),
    'POST /desktop/mouse/up': op('Release a button', 'Releases a mouse button.', IN),
    'POST /desktop/mouse/drag': op('Drag', 'Presses at `from`, moves through the midpoint to `to` and releases: what toolkits take as a drag.', IN),
    'POST /desktop/mouse/scroll': op('Scroll', 'Turns the wheel `delta_y` steps (positive: down) and `delta_x` (positive: right), first moving to `x`, `y` when given.', IN),
    'POST /desktop/keyboard/type': op('Type text', 'Types the text into the focused window (xdotool, from stdin: any text, never read as options), 64 KiB at most.', [...IN, 'PAYLOAD_TOO_LARGE']),
    'POST /desktop/keyboard/press': op('Press a key', 'Presses and releases a key, or a combination joined with `+`.', IN),
    'POST /desktop/keyboard/combination': op('Press keys together', 'Presses the keys in order, then releases them (`["ctrl", "s"]`).', IN),
    'POST /desktop/x11/hotkey': op('Hotkey', 'The modifiers and the key together (`{modifiers: ["ctrl"], key: "c"}`).', IN),
    'GET /desktop/clipboard/get': op('Read the clipboard', "The clipboard's text (xclip)."),
    'POST /desktop/clipboard/set': op('Set the clipboard', 'Puts text on the clipboard, where applications paste it from.', IN),
    'GET /desktop/clipboard/history': op('Clipboard history', 'What was set or read through the API, newest first, 50 at most.'),
    'GET /desktop/windows/list': op('List windows', 'The top-level windows (wmctrl): id, title, geometry, pid, whether focused or minimized. `GET /desktop/windows` is the same.'),
    'POST /desktop/windows/focus': op('Focus a window', 'Raises and focuses the window.', WIN_ERR),
    'POST /desktop/windows/close': op('Close a window', 'Asks the window to close, as its close button does.', WIN_ERR),
    'POST /desktop/windows/minimize': op('Minimize a window', 'Minimizes (iconifies) the window.', WIN_ERR),
    'POST /desktop/windows/resize': op('Resize a window', 'Unmaximizes the window and gives it that size.', WIN_ERR),
    'GET /desktop/display/info': op('Display', 'The screen: size, depth, the X display name.'),
    'GET /desktop/display/resolutions': op('Resolutions', 'The usual screen sizes, and the current one (Xvfb takes any size within the limits).'),
    'POST /desktop/display/resolution': op('Change the resolution', 'Restarts the display at that size (Xvfb cannot resize): open windows are closed and the session starts again; VNC, when running, is restarted too. Refused (409) while a recording runs.', [...IN, 'INVALID_STATE']),
    'POST /desktop/recording/start': op('Start recording', 'Records the screen with ffmpeg (x11grab): H.264 in `.mp4` (default) or `.mkv`, VP8 in `.webm`. One recording at a time (409 while one runs).', [...IN, 'INVALID_PATH', 'INVALID_STATE']),
    'POST /desktop/recording/stop': op('Stop recording', 'Asks ffmpeg to finish (the file is complete) and answers the recording, or the last one when none runs. `GET` is served too.'),
    'GET /desktop/recording/status': op('Recording status', 'The running recording, or the last one (`idle` when none was made).'),
    'GET /desktop/recording/{recording_id}/download': op('Download a recording', "The video's bytes (the same JSON-array rule as the region screenshot). The last 20 recordings are kept.", [...D, 'RECORDING_NOT_FOUND', 'INVALID_STATE', 'ROUTE_NOT_FOUND']),
    'POST /desktop/x11/ocr': op('Read the screen (OCR)', 'The text on the screen or a region (Tesseract), by lines, with each word and its box in screen coordinates.', IN),
    'POST /desktop/x11/find_element': op('Find text', 'Where some words are on the screen (OCR): their box and centre, or `found: false`.', IN),
    'POST /desktop/x11/get_bounds': op('Bounds of text', 'As `find_element`, but a 404 when the text is not on the screen.', [...IN, 'ELEMENT_NOT_FOUND']),
    'POST /desktop/x11/wait_for': op('Wait for text', 'Reads the screen every half second until the text is on it (then as `find_element`) or the timeout passes (404).', [...IN, 'ELEMENT_NOT_FOUND']),
    'POST /desktop/x11/drag_drop': op('Drag and drop', 'As `/desktop/mouse/drag`.', IN),
    'GET /desktop/x11/capture_window': op('Screenshot of a window', "A PNG of one window's rectangle (the focused one when `window_id` is not given): the bytes.", WIN_ERR),
    'POST /desktop/vnc/start': vncStartPost,
    'GET /desktop/vnc/start': vncStartGet,
    'POST /desktop/vnc/stop': vncStopPost,
    'GET /desktop/vnc/stop': vncStopGet,
    'GET /desktop/vnc/info': op('VNC status', 'Whether VNC runs, and where (as start, without starting it). `GET /desktop/vnc/status` is the same.'),
    'GET /desktop/debug/logs': op('Desktop logs', "The desktop's own lines: the X server, the session, VNC, ffmpeg (the last 400)."),
    'GET /desktop/debug/processes': op('Desktop processes', "The desktop's processes (X server, session, VNC, recorders, editors, browsers) with their memory."),
  };
}

const png = { 'image/png': { schema: BINARY, example: PNG } };

export const DESKTOP_RESPONSES: Record<string, SuccessDoc> = {
  'GET /desktop/screenshot': {
    status: 200,
    description: 'the screen, as JSON with the PNG in base64 (or, asked for image/png, the bytes)',
    content: { ...json(DesktopScreenshotResponse, { image: PNG, format: 'png', width: 1024, height: 768 }), ...png },
  },
  'POST /desktop/screenshot/region': { status: 200, description: 'the PNG of the region', content: png, request: request({ x: 0, y: 0, width: 400, height: 300 }, DesktopRegionBody) },
  'POST /desktop/mouse/move': { status: 200, description: 'moved', content: json(DesktopMovedResponse, { success: true, x: 512, y: 384 }), request: request({ x: 512, y: 384 }, DesktopPointBody) },
  'GET /desktop/mouse/position': { status: 200, description: 'the pointer', content: json(DesktopMousePosition, { x: 512, y: 384, screen: 0, window: '0x00000210' }) },
  'POST /desktop/mouse/click': {
    status: 200,
    description: 'clicked',
    content: json(DesktopOk, ok),
    request: { required: true, content: { 'application/json': { schema: DesktopClickBody, examples: { left: { summary: 'a left click somewhere', value: { x: 200, y: 150 } }, double: { summary: 'a double click where the pointer is', value: { button: 'left', clicks: 2 } }, right: { summary: 'a right click', value: { x: 200, y: 150, button: 'right' } } } } } },
  },
  'POST /desktop/mouse/down': { status: 200, description: 'pressed', content: json(DesktopOk, ok), request: request({ button: 'left' }, DesktopButtonBody) },
  'POST /desktop/mouse/up': { status: 200, description: 'released', content: json(DesktopOk, ok), request: request({ button: 'left' }, DesktopButtonBody) },
  'POST /desktop/mouse/drag': { status: 200, description: 'dragged', content: json(DesktopOk, ok), request: request({ from_x: 100, from_y: 100, to_x: 400, to_y: 300 }, DesktopDragBody) },
  'POST /desktop/mouse/scroll': { status: 200, description: 'scrolled', content: json(DesktopOk, ok), request: request({ x: 512, y: 400, delta_y: 3 }, DesktopScrollBody) },
  'POST /desktop/keyboard/type': { status: 200, description: 'typed', content: json(DesktopTypedResponse, { success: true, typed: 19 }), request: request({ text: 'hello from an agent' }, DesktopTypeBody) },
  'POST /desktop/keyboard/press': { status: 200, description: 'pressed', content: json(DesktopKeyResponse, { success: true, key: 'Return' }), request: request({ key: 'enter' }, DesktopPressBody) },
  'POST /desktop/keyboard/combination': { status: 200, description: 'pressed together', content: json(DesktopKeysResponse, { success: true, keys: 'ctrl+s' }), request: request({ keys: ['ctrl', 's'] }, DesktopCombinationBody) },
  'POST /desktop/x11/hotkey': { status: 200, description: 'pressed together', content: json(DesktopKeysResponse, { success: true, keys: 'ctrl+c' }), request: request({ modifiers: ['ctrl'], key: 'c' }, DesktopHotkeyBody) },
  'GET /desktop/clipboard/get': { status: 200, description: "the clipboard's text (empty when it holds none)", content: json(DesktopClipboardContent, { content: 'copied text', text: 'copied text' }) },
  'POST /desktop/clipboard/set': { status: 200, description: 'on the clipboard', content: json(DesktopClipboardSet, { success: true, length: 11 }), request: request({ content: 'copied text' }, DesktopClipboardBody) },
  'GET /desktop/clipboard/history': { status: 200, description: 'newest first', content: json(DesktopClipboardHistory, { history: ['copied text', 'earlier'], count: 2 }) },
  'GET /desktop/windows/list': {
    status: 200,
    description: 'the top-level windows',
    content: json(DesktopWindowList, {
      windows: [{ id: WIN, desktop: 0, pid: 731, x: 112, y: 84, width: 800, height: 560, title: 'notes.txt - Mousepad', focused: true, isActive: true, isMinimized: false }],
    }),
  },
  'POST /desktop/windows/focus': { status: 200, description: 'focused', content: json(DesktopWindowDone, { success: true, window_id: WIN }), request: request({ window_id: WIN }, DesktopWindowBody) },
  'POST /desktop/windows/close': { status: 200, description: 'asked to close', content: json(DesktopWindowDone, { success: true, window_id: WIN }), request: request({ window_id: WIN }, DesktopWindowBody) },
  'POST /desktop/windows/minimize': { status: 200, description: 'minimized', content: json(DesktopWindowDone, { success: true, window_id: WIN }), request: request({ window_id: WIN }, DesktopWindowBody) },
  'POST /desktop/windows/resize': {
    status: 200,
    description: 'resized',
    content: json(DesktopWindowDone, { success: true, window_id: WIN, width: 640, height: 480 }),
    request: request({ window_id: WIN, width: 640, height: 480 }, DesktopWindowResizeBody),
  },
  'GET /desktop/display/info': {
    status: 200,
    description: 'the screen',
    content: json(DesktopDisplayInfo, { width: 1024, height: 768, depth: 24, display: ':0', refresh_rate: 60, displays: [{ id: 0, name: 'screen', width: 1024, height: 768, primary: true }] }),
  },
  'GET /desktop/display/resolutions': {
    status: 200,
    description: 'usual sizes and the current one',
    content: json(DesktopResolutions, { resolutions: [[800, 600], [1024, 768], [1280, 720], [1920, 1080]], current: [1024, 768] }),
  },
  'POST /desktop/display/resolution': {
    status: 200,
    description: 'the display runs at the new size (restarted)',
    content: json(DesktopResolutionSet, { success: true, width: 1280, height: 720, restarted: true }),
    request: request({ width: 1280, height: 720 }, DesktopResolutionBody),
  },
  'POST /desktop/recording/start': {
    status: 200,
    description: 'recording',
    content: json(DesktopRecordingStatus, { success: true, recording: true, recording_id: REC, status: 'recording', start_time: AT, duration: 0, file_path: `/tmp/recordings/${REC}.mp4`, output_file: `/tmp/recordings/${REC}.mp4`, format: 'mp4' }),
    request: request({ fps: 15 }, DesktopRecordingBody),
  },
  'POST /desktop/recording/stop': { status: 200, description: 'stopped: the file is complete', content: json(DesktopRecordingStatus, stopped) },
  'GET /desktop/recording/status': {
    status: 200,
    description: 'the current or last recording',
    content: {
      'application/json': {
        schema: DesktopRecordingStatus,
        examples: { stopped: { summary: 'the last one, stopped', value: (({ success: _s, ...r }) => r)(stopped) }, idle: { summary: 'none made yet', value: { recording: false, status: 'idle' } } },
      },
    },
  },
  'GET /desktop/recording/{recording_id}/download': {
    status: 200,
    description: 'the video',
    content: { 'video/mp4': { schema: BINARY, example: '<the MP4 bytes>' }, 'video/webm': { schema: BINARY, example: '<the WebM bytes>' }, 'video/x-matroska': { schema: BINARY, example: '<the Matroska bytes>' } },
  },
  'POST /desktop/x11/ocr': {
    status: 200,
    description: 'the text read, with word boxes',
    content: json(DesktopOcrResponse, {
      text: 'File Edit Search View\nhello from an agent',
      words: [
        { text: 'File', x: 12, y: 31, width: 26, height: 12, conf: 96.1 },
        { text: 'hello', x: 118, y: 120, width: 38, height: 11, conf: 91.4 },
      ],
    }),
    request: request({ x: 0, y: 0, width: 1024, height: 200, language: 'eng' }, DesktopOcrBody),
  },
  'POST /desktop/x11/find_element': {
    status: 200,
    description: 'where it is, or found false',
    content: { 'application/json': { schema: DesktopFound, examples: { found: { summary: 'on the screen', value: { found: true, element } }, absent: { summary: 'not on the screen', value: { found: false, element: null } } } } },
    request: request({ text: 'File' }, DesktopTextBody),
  },
  'POST /desktop/x11/get_bounds': { status: 200, description: 'its box', content: json(DesktopElement, element), request: request({ text: 'File' }, DesktopTextBody) },
  'POST /desktop/x11/wait_for': { status: 200, description: 'it came', content: json(DesktopFound, { found: true, element }), request: request({ text: 'File', timeout: 10 }, DesktopWaitForBody) },
  'POST /desktop/x11/drag_drop': { status: 200, description: 'dragged', content: json(DesktopOk, ok), request: request({ from_x: 100, from_y: 100, to_x: 400, to_y: 300 }, DesktopDragBody) },
  'GET /desktop/x11/capture_window': { status: 200, description: "the window's PNG", content: png },
  'POST /desktop/vnc/start': { status: 200, description: 'VNC runs: open the preview of `port` at `path`', content: json(DesktopVncInfo, vnc) },
  'GET /desktop/vnc/start': { status: 200, description: 'VNC runs: open the preview of `port` at `path`', content: json(DesktopVncInfo, vnc) },
  'POST /desktop/vnc/stop': { status: 200, description: 'stopped', content: json(DesktopVncStopped, { success: true, running: false }) },
  'GET /desktop/vnc/stop': { status: 200, description: 'stopped', content: json(DesktopVncStopped, { success: true, running: false }) },
  'GET /desktop/vnc/info': { status: 200, description: 'whether VNC runs, and where', content: json(DesktopVncInfo, { ...vnc, running: false }) },
  'GET /desktop/debug/logs': {
    status: 200,
    description: 'the last 400 lines',
    content: json(DesktopLogs, { logs: [`${AT} Xvfb started (pid 41)`, `${AT} display :0 1024x768x24 up in 212 ms`, `${AT} dbus-launch started (pid 47)`] }),
  },
  'GET /desktop/debug/processes': {
    status: 200,
    description: "the desktop's processes",
    content: json(DesktopProcesses, {
      processes: [
        { pid: 41, user: 'user', rss_kb: 92_340, name: 'Xvfb', command: 'Xvfb :0 -screen 0 1024x768x24 -ac -nolisten tcp -dpi 96 -s 0 +extension RANDR' },
        { pid: 58, user: 'user', rss_kb: 21_512, name: 'xfwm4', command: 'xfwm4' },
      ],
      display: ':0',
      running: true,
    }),
  },
};
