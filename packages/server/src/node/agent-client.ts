import { request, type RequestOptions } from 'node:http';
import type { Duplex } from 'node:stream';

/**
 * Where an agent is: the path of its unix socket on this machine, or a way to open a connection to
 * it wherever it runs (Runtime.dialAgent: relayed by the node that holds it).
 */
export type AgentTarget = string | ((timeoutMs: number) => Promise<Duplex>);

/** The connection options of one request to `target`. */
export function agentConnection(target: AgentTarget, timeoutMs: number): Pick<RequestOptions, 'socketPath' | 'createConnection'> {
  if (typeof target === 'string') return { socketPath: target };
  return {
    createConnection: (_opts, callback) => {
      target(timeoutMs).then(
        (sock) => callback(null, sock),
        (err: Error) => callback(err, undefined as unknown as Duplex),
      );
      return undefined as unknown as Duplex;
    },
  };
}

/**
 * The most the daemon reads of one answer of an agent to its own calls (health, env): they are a
 * few hundred bytes. An agent is inside a sandbox, so its answers are hostile input: a bigger or
 * never-ending body is refused, not buffered.
 */
export const AGENT_ANSWER_MAX_BYTES = 64 * 1024;

/** One GET to the agent over its unix socket; resolves with the status and parsed JSON body. */
export function agentGet(socketPath: AgentTarget, path: string, timeoutMs: number, headers: Record<string, string> = {}): Promise<{ status: number; body: unknown }> {
  return agentJson(socketPath, 'GET', path, undefined, timeoutMs, AGENT_ANSWER_MAX_BYTES, headers);
}

/**
 * The header of the boot probe: a GET /health with it is answered by the agent's first responder
 * (packages/agent/native/sbx-first.c) while Node starts, and means "the agent's process is up and
 * holds its listening socket": requests sent from then on are served once Node is up, never
 * refused. Node answers it like any /health.
 */
export const BOOT_PROBE_HEADER = { 'x-sandboxd-probe': 'boot' };

/**
 * Waits until the agent answers /health, retrying while the socket is not there yet. With `probe`,
 * the boot probe (BOOT_PROBE_HEADER): answered before Node has started.
 */
export async function waitForAgent(socketPath: AgentTarget, timeoutMs: number, probe = false): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (let delay = 1; Date.now() < deadline; delay = Math.min(delay * 2, 20)) {
    try {
      const { status } = await agentGet(socketPath, '/health', Math.max(1, deadline - Date.now()), probe ? BOOT_PROBE_HEADER : {});
      if (status === 200) return;
      lastError = new Error(`agent /health answered ${status}`);
    } catch (err) {
      lastError = err;
    }
    await new Promise((r) => setTimeout(r, delay));
  }
  throw new Error(`agent not ready after ${timeoutMs} ms: ${lastError instanceof Error ? lastError.message : String(lastError)}`);
}

/**
 * Waits until the agent answers, then, unless `prime` says a create waits for this very boot,
 * readies it for the create it is booted for: a PUT that merges nothing into its env set (a change
 * of nothing, which the agent does not write) runs the way a create's PUT of its env_vars goes
 * through the agent once, ahead of the create. The first such request of an agent takes about
 * twice as long as the ones after it (measured: 3.2 ms, then 1.6), and a create taking a ready
 * sandbox waits for it; one that waits for the boot itself would wait for both.
 *
 * A boot a create waits for is done at the boot probe (its agent's process is up; Node may still
 * be starting, and what is sent meanwhile waits for it): resolves 'probed' then, 'answered' when
 * Node itself answered. A boot that no create waits for any more is waited for until Node answers.
 */
export async function waitForAgentPrimed(target: AgentTarget, timeoutMs: number, prime: () => boolean = () => true): Promise<'probed' | 'answered'> {
  const started = Date.now();
  const probe = !prime();
  await waitForAgent(target, timeoutMs, probe);
  if (!prime()) return probe ? 'probed' : 'answered';
  if (probe) await waitForAgent(target, Math.max(1000, timeoutMs - (Date.now() - started)));
  const res = await agentJson(target, 'PUT', '/env', { env_vars: {}, merge: true }, Math.max(1000, timeoutMs - (Date.now() - started)));
  if (res.status !== 200) throw new Error(`agent answered ${res.status} to an empty merge of its env set`);
  return 'answered';
}

/**
 * One request to the agent over its unix socket, with an optional JSON body. The whole exchange,
 * body included, ends within `timeoutMs`, and at most `maxBytes` of the answer are read: past
 * either, the request is destroyed and the promise rejects. Never throws synchronously.
 */
export function agentJson(
  socketPath: AgentTarget,
  method: string,
  path: string,
  body: unknown,
  timeoutMs: number,
  maxBytes = AGENT_ANSWER_MAX_BYTES,
  extraHeaders: Record<string, string> = {},
): Promise<{ status: number; body: unknown }> {
  return new Promise((resolve, reject) => {
    let settled = false;
    const text = body === undefined ? undefined : JSON.stringify(body);
    const headers: Record<string, string | number> = { ...extraHeaders, host: 'agent' };
    if (text !== undefined) Object.assign(headers, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
    const req = request({ ...agentConnection(socketPath, timeoutMs), path, method, headers });
    const fail = (err: Error) => {
      if (settled) return;
      settled = true;
      clearTimeout(deadline);
      req.destroy();
      reject(err);
    };
    const deadline = setTimeout(() => fail(new Error(`agent did not answer ${path} within ${timeoutMs} ms`)), timeoutMs);
    req.on('response', (res) => {
      res.on('error', (err) => fail(err));
      const declared = Number(res.headers['content-length']);
      if (Number.isFinite(declared) && declared > maxBytes) {
        fail(new Error(`agent answered ${path} with ${declared} bytes; at most ${maxBytes} are read`));
        return;
      }
      const chunks: Buffer[] = [];
      let size = 0;
      res.on('data', (c: Buffer) => {
        size += c.length;
        if (size > maxBytes) fail(new Error(`agent answered ${path} with more than ${maxBytes} bytes`));
        else chunks.push(c);
      });
      res.on('end', () => {
        if (settled) return;
        settled = true;
        clearTimeout(deadline);
        const raw = Buffer.concat(chunks).toString('utf8');
        let parsed: unknown = raw;
        try {
          parsed = JSON.parse(raw);
        } catch {
          /* not JSON: keep the text */
        }
        resolve({ status: res.statusCode ?? 0, body: parsed });
      });
    });
    req.on('error', (err) => fail(err));
    req.end(text);
  });
}
