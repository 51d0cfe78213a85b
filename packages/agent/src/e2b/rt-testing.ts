// For the tests of the /e2b/rt routes: a real agent (its HTTP server, sbx-helper, real processes) on
// a loopback port, and a reader of its frame streams. Not imported by the agent.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createAgent } from '../app.js';
import { loadConfig } from '../config.js';
import { FRAME, FRAMES_CONTENT_TYPE, FrameReader } from './frames.js';

export interface TestAgent {
  base: string;
  dir: string;
  close(): Promise<void>;
}

export async function startTestAgent(prefix: string): Promise<TestAgent> {
  const agentDir = join(dirname(fileURLToPath(import.meta.url)), '../../bundle');
  const dir = mkdtempSync(join(tmpdir(), prefix));
  const config = loadConfig(
    { SANDBOXD_AGENT_STATE_DIR: join(dir, 'state'), SANDBOXD_AGENT_WORKSPACE: join(dir, 'ws'), SANDBOXD_AGENT_PY_ZYGOTE: '0', PATH: process.env.PATH },
    agentDir,
  );
  const { server } = createAgent(config);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    base: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    dir,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export const basicAuth = (user: string) => `Basic ${Buffer.from(`${user}:`).toString('base64')}`;

/** POSTs JSON (a string body is sent as is); the status and the parsed answer. */
export async function post(base: string, path: string, body: unknown): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`${base}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: typeof body === 'string' ? body : JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, body: (text ? JSON.parse(text) : {}) as Record<string, unknown> };
}

/** One frame as a test reads it: JSON ones parsed, bytes as text, with when it came. */
export interface ReadFrame {
  kind: number;
  json?: Record<string, unknown>;
  text: string;
  ms: number;
}

/** A frame stream being read: frames as they come; abort() is the client going away. */
export interface FrameStream {
  status: number;
  frames: AsyncIterator<ReadFrame>;
  abort(): void;
}

export async function openStream(base: string, path: string, body: unknown): Promise<FrameStream> {
  const ac = new AbortController();
  const t0 = Date.now();
  const res = await fetch(`${base}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), signal: ac.signal });
  if (res.status !== 200) return { status: res.status, frames: [][Symbol.iterator]() as unknown as AsyncIterator<ReadFrame>, abort: () => ac.abort() };
  assert.equal(res.headers.get('content-type'), FRAMES_CONTENT_TYPE);
  const reader = new FrameReader();
  async function* frames(): AsyncGenerator<ReadFrame> {
    try {
      for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
        for (const f of reader.push(Buffer.from(chunk))) {
          const text = f.payload.toString('utf8');
          const json = f.kind === FRAME.json || f.kind === FRAME.error ? (JSON.parse(text) as Record<string, unknown>) : undefined;
          yield { kind: f.kind, text, ms: Date.now() - t0, ...(json ? { json } : {}) };
        }
      }
    } catch (err) {
      if (!ac.signal.aborted) throw err;
    }
    assert.equal(reader.pending, 0, 'the stream ended between frames');
  }
  return { status: 200, frames: frames(), abort: () => ac.abort() };
}

export interface ProcessRun {
  pid: number;
  stdout: string;
  stderr: string;
  pty: string;
  end?: { exit_code: number; exited: boolean; status: string; error?: string };
  frames: ReadFrame[];
}

/** Reads a process stream to its end (keepalives kept in `frames`). */
export async function collect(stream: FrameStream, onFrame?: (f: ReadFrame) => void): Promise<ProcessRun> {
  assert.equal(stream.status, 200);
  const run: ProcessRun = { pid: 0, stdout: '', stderr: '', pty: '', frames: [] };
  for (let n = await stream.frames.next(); !n.done; n = await stream.frames.next()) {
    const f = n.value;
    run.frames.push(f);
    onFrame?.(f);
    if (f.kind === FRAME.stdout) run.stdout += f.text;
    else if (f.kind === FRAME.stderr) run.stderr += f.text;
    else if (f.kind === FRAME.pty) run.pty += f.text;
    else if (f.json?.start) run.pid = (f.json.start as { pid: number }).pid;
    else if (f.json?.end) run.end = f.json.end as ProcessRun['end'];
  }
  return run;
}
