import { request } from 'node:http';

/** One GET to the agent over its unix socket; resolves with the status and parsed JSON body. */
export function agentGet(socketPath: string, path: string, timeoutMs: number): Promise<{ status: number; body: unknown }> {
  return agentJson(socketPath, 'GET', path, undefined, timeoutMs);
}

/** Waits until the agent answers /health, retrying while the socket is not there yet. */
export async function waitForAgent(socketPath: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (let delay = 1; Date.now() < deadline; delay = Math.min(delay * 2, 20)) {
    try {
      const { status } = await agentGet(socketPath, '/health', Math.max(1, deadline - Date.now()));
      if (status === 200) return;
      lastError = new Error(`agent /health answered ${status}`);
    } catch (err) {
      lastError = err;
    }
    await new Promise((r) => setTimeout(r, delay));
  }
  throw new Error(`agent not ready after ${timeoutMs} ms: ${lastError instanceof Error ? lastError.message : String(lastError)}`);
}

/** One request to the agent over its unix socket, with an optional JSON body. */
export function agentJson(socketPath: string, method: string, path: string, body: unknown, timeoutMs: number): Promise<{ status: number; body: unknown }> {
  return new Promise((resolve, reject) => {
    const text = body === undefined ? undefined : JSON.stringify(body);
    const headers: Record<string, string | number> = { host: 'agent' };
    if (text !== undefined) Object.assign(headers, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
    const req = request({ socketPath, path, method, timeout: timeoutMs, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const raw = Buffer.concat(chunks).toString('utf8');
        let parsed: unknown = raw;
        try {
          parsed = JSON.parse(raw);
        } catch {
          /* not JSON: keep the text */
        }
        resolve({ status: res.statusCode ?? 0, body: parsed });
      });
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error(`agent did not answer ${path} within ${timeoutMs} ms`)));
    req.on('error', reject);
    req.end(text);
  });
}
