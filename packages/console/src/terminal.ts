// A real terminal emulator (xterm.js, loaded only when a terminal is opened) on the agent's
// /terminal WebSocket. A browser's WebSocket cannot send headers: the sandbox's token is offered
// as a subprotocol (sandboxd.auth.<token>), which the gateway takes off before the agent sees it.

import { agentBase, apiKey, type AgentClient } from './api.js';

let nonceSet = false;
/**
 * xterm adds <style> elements of its own; the page's CSP lets styles in only from this origin or
 * with the page's nonce, so those get the nonce.
 */
function nonceStyles(): void {
  if (nonceSet) return;
  nonceSet = true;
  const nonce = document.querySelector<HTMLMetaElement>('meta[name="style-nonce"]')?.content;
  if (!nonce) return;
  const create = document.createElement.bind(document);
  document.createElement = ((tag: string, options?: ElementCreationOptions) => {
    const el = create(tag, options);
    if (tag.toLowerCase() === 'style') el.setAttribute('nonce', nonce);
    return el;
  }) as typeof document.createElement;
}

/** Times in a row a terminal's socket is opened again after it closed without the shell's exit. */
const MAX_RECONNECTS = 5;
/** A socket not open this long after it was made (a handshake that stalls on the way) is closed and made again. */
const OPEN_TIMEOUT_MS = 10_000;

export async function openTerminal(container: HTMLElement, agent: AgentClient, onStatus: (text: string) => void): Promise<() => void> {
  nonceStyles();
  const [{ Terminal }, { FitAddon }] = await Promise.all([import('@xterm/xterm'), import('@xterm/addon-fit')]);
  const term = new Terminal({ cursorBlink: true, fontSize: 13, fontFamily: 'ui-monospace, SFMono-Regular, Menlo, Consolas, monospace', scrollback: 5000 });
  const fit = new FitAddon();
  term.loadAddon(fit);
  term.open(container);
  fit.fit();
  // One socket at a time. A socket that closes without the shell's exit (a connection that never
  // opened, or was cut: the host's network changing, a daemon restart) is opened again, with a
  // growing pause, a few times in a row; each opening is a new shell.
  let ws: WebSocket | null = null;
  let disposed = false;
  let failures = 0;
  let retry: ReturnType<typeof setTimeout> | undefined;
  const connect = async () => {
    const credential = await agent.credential();
    if (disposed) return;
    const url = new URL('/terminal', agentBase(agent.publicHost));
    url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
    url.searchParams.set('cols', String(term.cols));
    url.searchParams.set('rows', String(term.rows));
    const sock = new WebSocket(url, ['sandboxd', `sandboxd.auth.${credential.token ?? apiKey()}`]);
    ws = sock;
    let opened = false;
    let exited = false;
    onStatus(failures === 0 ? 'connecting…' : 'reconnecting…');
    // Closing a socket still connecting fires its close event: the retry below takes it from there.
    const stalled = setTimeout(() => sock.readyState === WebSocket.CONNECTING && sock.close(), OPEN_TIMEOUT_MS);
    sock.addEventListener('open', () => {
      clearTimeout(stalled);
      opened = true;
      if (failures > 0) term.write('\r\n[reconnected: a new shell]\r\n');
      failures = 0;
      onStatus('connected');
      term.focus();
    });
    sock.addEventListener('message', (ev) => {
      let frame: { type?: string; data?: unknown; code?: unknown; error?: unknown };
      try {
        frame = JSON.parse(String(ev.data));
      } catch {
        return;
      }
      if (frame.type === 'output' && typeof frame.data === 'string') term.write(frame.data);
      else if (frame.type === 'exit') {
        exited = true;
        term.write(`\r\n[the shell exited with code ${Number(frame.code)}]\r\n`);
        onStatus('exited');
      } else if (frame.type === 'error') onStatus(`error: ${String(frame.error).slice(0, 200)}`);
    });
    sock.addEventListener('close', () => {
      clearTimeout(stalled);
      if (disposed || exited || ws !== sock) return;
      failures = opened ? 1 : failures + 1;
      if (failures > MAX_RECONNECTS) {
        onStatus('disconnected');
        return;
      }
      onStatus('reconnecting…');
      retry = setTimeout(() => void connect().catch(() => onStatus('disconnected')), Math.min(500 * 2 ** (failures - 1), 5000));
    });
  };
  await connect();
  const send = (frame: object) => {
    if (ws?.readyState === WebSocket.OPEN) ws.send(JSON.stringify(frame));
  };
  const input = term.onData((data) => send({ type: 'input', data }));
  const resize = term.onResize(({ cols, rows }) => send({ type: 'resize', cols, rows }));
  const observer = new ResizeObserver(() => {
    try {
      fit.fit();
    } catch {
      // hidden: nothing to fit
    }
  });
  observer.observe(container);
  return () => {
    disposed = true;
    clearTimeout(retry);
    observer.disconnect();
    input.dispose();
    resize.dispose();
    ws?.close();
    term.dispose();
  };
}
