// A desktop sandbox's screen in the console: noVNC (served inside the sandbox on port 6080) in a
// frame, through the preview of that port and its signed link, mouse and keyboard included.
// Shown only for sandboxes whose agent has a desktop (501 DESKTOP_NOT_AVAILABLE otherwise).

import { call, type AgentClient } from './api.js';
import { h } from './dom.js';

const NOVNC_PATH = '/vnc.html?autoconnect=true&resize=scale&reconnect=true';

interface VncInfo {
  novnc_port?: number;
  port?: number;
  path?: string;
}

/** The Desktop panel, or null when the sandbox has no desktop. */
export async function desktopPanel(client: AgentClient, sandboxId: string, onError: (message: string) => void): Promise<HTMLElement | null> {
  // Asked of the agent's health (its features name a display), not by calling the desktop API: a
  // sandbox without one would answer 501, an error in the browser's console for every sandbox page.
  const health = await client.call<{ features?: string[] }>('GET', '/health');
  if (!health.features?.includes('desktop')) return null;
  const status = h('span', { id: 'desktop-status', class: 'live' }, 'not open');
  const frameBox = h('div', { id: 'desktop', class: 'desktop-view' });
  const openHere = h('button', { type: 'button', id: 'desktop-open' }, 'Show the screen');
  const openTab = h('button', { type: 'button', class: 'small', id: 'desktop-tab' }, 'Open in a new tab');
  const link = async (): Promise<string> => {
    const info = await client.call<VncInfo>('POST', '/desktop/vnc/start', {});
    const port = info.novnc_port ?? info.port ?? 6080;
    const p = await call<{ url: string; signed_url?: string }>('GET', `/v1/sandboxes/${encodeURIComponent(sandboxId)}/ports/${port}`);
    const path = info.path ?? NOVNC_PATH;
    return p.signed_url ? `${p.signed_url}&next=${encodeURIComponent(path)}` : `${p.url.replace(/\/$/, '')}${path}`;
  };
  openHere.addEventListener('click', () => {
    status.textContent = 'starting VNC';
    openHere.disabled = true;
    link().then(
      (url) => {
        // The preview's signed link sets its session cookie in the frame, then lands on noVNC.
        const frame = h('iframe', { src: url, title: 'Desktop', id: 'desktop-frame', allow: 'clipboard-read; clipboard-write' });
        frameBox.replaceChildren(frame);
        status.textContent = 'live';
        openHere.disabled = false;
        openHere.textContent = 'Reconnect';
      },
      (err: unknown) => {
        status.textContent = 'could not open';
        openHere.disabled = false;
        onError(`Desktop: ${(err as Error).message}`);
      },
    );
  });
  openTab.addEventListener('click', () => {
    // Opened now, in the click, or a popup blocker stops it; pointed at the link once known.
    const tab = window.open('about:blank', '_blank');
    if (tab) tab.opener = null;
    link().then(
      (url) => {
        if (tab) tab.location.href = url;
      },
      (err: unknown) => {
        tab?.close();
        onError(`Desktop: ${(err as Error).message}`);
      },
    );
  });
  return h('section', { class: 'panel', id: 'desktop-panel' }, h('h2', {}, 'Desktop ', status), h('div', { class: 'tools-row' }, openHere, ' ', openTab), frameBox);
}
