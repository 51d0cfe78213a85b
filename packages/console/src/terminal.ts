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

export async function openTerminal(container: HTMLElement, agent: AgentClient, onStatus: (text: string) => void): Promise<() => void> {
  nonceStyles();
  const [{ Terminal }, { FitAddon }] = await Promise.all([import('@xterm/xterm'), import('@xterm/addon-fit')]);
  const term = new Terminal({ cursorBlink: true, fontSize: 13, fontFamily: 'ui-monospace, SFMono-Regular, Menlo, Consolas, monospace', scrollback: 5000 });
  const fit = new FitAddon();
  term.loadAddon(fit);
  term.open(container);
  fit.fit();
  const credential = await agent.credential();
  const url = new URL('/terminal', agentBase(agent.publicHost));
  url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
  url.searchParams.set('cols', String(term.cols));
  url.searchParams.set('rows', String(term.rows));
  const ws = new WebSocket(url, ['sandboxd', `sandboxd.auth.${credential.token ?? apiKey()}`]);
  onStatus('connecting…');
  const send = (frame: object) => {
    if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify(frame));
  };
  ws.addEventListener('open', () => {
    onStatus('connected');
    term.focus();
  });
  ws.addEventListener('message', (ev) => {
    let frame: { type?: string; data?: unknown; code?: unknown; error?: unknown };
    try {
      frame = JSON.parse(String(ev.data));
    } catch {
      return;
    }
    if (frame.type === 'output' && typeof frame.data === 'string') term.write(frame.data);
    else if (frame.type === 'exit') {
      term.write(`\r\n[the shell exited with code ${Number(frame.code)}]\r\n`);
      onStatus('exited');
    } else if (frame.type === 'error') onStatus(`error: ${String(frame.error).slice(0, 200)}`);
  });
  ws.addEventListener('close', () => onStatus('disconnected'));
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
    observer.disconnect();
    input.dispose();
    resize.dispose();
    ws.close();
    term.dispose();
  };
}
