import { describeCause } from '@sandboxd/protocol';
import type { NodeCaller } from './remote-call.js';

/** OOM kills the node reports, over one event stream kept open (reopened after a failure). */
export function watchOomEvents(node: NodeCaller, log: (msg: string) => void, onKill: (id: string, kills: number) => void): () => void {
  const ac = new AbortController();
  const loop = async () => {
    for (let delay = 500; !ac.signal.aborted; delay = Math.min(delay * 2, 10_000)) {
      try {
        const res = await fetch(
          new URL('/node/v1/oom-events', node.base),
          node.init({
            headers: { authorization: `Bearer ${await node.token()}` },
            signal: ac.signal,
          }),
        );
        if (!res.ok || !res.body) throw new Error(`answered ${res.status}`);
        delay = 500;
        let buf = '';
        for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
          buf += Buffer.from(chunk).toString('utf8');
          let i: number;
          while ((i = buf.indexOf('\n\n')) >= 0) {
            const event = buf.slice(0, i);
            buf = buf.slice(i + 2);
            const data = /^data: (.*)$/m.exec(event)?.[1];
            if (!data) continue;
            try {
              const e = JSON.parse(data) as { id?: unknown; kills?: unknown };
              if (typeof e.id === 'string' && typeof e.kills === 'number') onKill(e.id, e.kills);
            } catch {
              /* not an event of ours */
            }
          }
          if (buf.length > 64 * 1024) buf = '';
        }
      } catch (err) {
        if (ac.signal.aborted) return;
        log(`node ${node.id}: oom events: ${describeCause(err)}; again in ${delay} ms`);
      }
      await new Promise((r) => setTimeout(r, delay));
    }
  };
  void loop();
  return () => ac.abort();
}
