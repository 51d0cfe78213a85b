// Server-sent event streams of the lifecycle API, opened with a short-lived events token (an API
// key never goes into a URL), renewed before it expires and reopened after a cut.

import { eventsToken } from './api.js';

export interface StreamOptions {
  /** The stream's path (it may have a query); `token=` is added. */
  path: string;
  /** Limits the token to this sandbox (the per-sandbox streams). */
  sandboxId?: string;
  /** A handler per event name; the data is parsed JSON. */
  on: Record<string, (data: any) => void>;
  /** Connected (true) or not (false): each (re)connect says true. */
  onStatus?: (connected: boolean) => void;
}

/** Opens the stream; returns what closes it for good. */
export function openStream(o: StreamOptions): () => void {
  let source: EventSource | null = null;
  let timer: number | undefined;
  let closed = false;
  const again = (ms: number) => {
    window.clearTimeout(timer);
    timer = window.setTimeout(() => void connect().catch(() => again(5000)), ms);
  };
  const connect = async () => {
    if (closed) return;
    const t = await eventsToken(o.sandboxId);
    if (closed) return;
    const next = new EventSource(`${o.path}${o.path.includes('?') ? '&' : '?'}token=${encodeURIComponent(t.token)}`);
    next.addEventListener('open', () => o.onStatus?.(true));
    next.addEventListener('error', () => {
      o.onStatus?.(false);
      // EventSource retries by itself, with the same (perhaps expired) token; once it gives up, a new token.
      if (next.readyState === EventSource.CLOSED && source === next) again(2000);
    });
    for (const [name, fn] of Object.entries(o.on)) {
      next.addEventListener(name, (ev) => {
        let data: unknown;
        try {
          data = JSON.parse((ev as MessageEvent<string>).data);
        } catch {
          return;
        }
        fn(data);
      });
    }
    source?.close();
    source = next;
    // The stream outlives its token; a new one is fetched ahead of the next reconnect.
    again(Math.max(30_000, Date.parse(t.expires_at) - Date.now() - 60_000));
  };
  void connect().catch(() => again(5000));
  return () => {
    closed = true;
    window.clearTimeout(timer);
    source?.close();
  };
}
