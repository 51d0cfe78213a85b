import { join } from 'node:path';
import type { Agent, Route } from '../context.js';
import { logLine } from '../log.js';
import { clipboardRoutes } from './clipboard-routes.js';
import { keyboardRoutes, mouseRoutes } from './input-routes.js';
import { ocrRoutes } from './ocr-routes.js';
import { recordingRoutes } from './recording-routes.js';
import { Recorder } from './recording.js';
import { debugRoutes, displayRoutes, screenshotRoutes, vncRoutes } from './screen-routes.js';
import { Desktop, parseGeometry } from './session.js';
import { desktopTools } from './tools.js';
import { windowRoutes } from './window-routes.js';

const DEFAULT_GEOMETRY = { width: 1024, height: 768, depth: 24 };

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
  const tools = desktopTools(d, join(agent.config.stateDir, 'tmp'));
  const recorder = new Recorder(d);
  if (spec && d.missing('display').length === 0) {
    d.ensure().catch((err: unknown) => logLine(`desktop: the display did not start: ${(err as Error).message}`));
  }

  return [
    ...vncRoutes(tools),
    ...screenshotRoutes(tools),
    ...mouseRoutes(tools),
    ...keyboardRoutes(tools),
    ...clipboardRoutes(tools),
    ...recordingRoutes(tools, recorder, agent.config.workspaceDir),
    ...windowRoutes(tools),
    ...displayRoutes(tools, recorder),
    ...ocrRoutes(tools),
    ...debugRoutes(tools),
  ];
}
