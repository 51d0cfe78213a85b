import { request, type Agent, type IncomingMessage } from 'node:http';
import { ConnectError } from '@connectrpc/connect';
import { ENVD_FRAME, isErrorCode, ServiceError, type EnvdFrameKind } from '@sandboxd/protocol';

/**
 * The gateway's calls to a sandbox's agent for E2B's envd (the agent's plain `/e2b/rt/` routes):
 * JSON in, JSON out, or a stream of frames. The protocol E2B's clients speak (Connect, protobuf)
 * ends here, in the daemon; what runs and what is kept (processes, their output, watches) stays
 * in the sandbox.
 */

/** One E2B request's way to its sandbox. */
export interface EnvdCall {
  sandboxId: string;
  /** The organization that owns it (the daemon's read budget is per organization). */
  orgId: string;
  /** The sandbox's connection pool (a DialAgent: its unix socket, or its node's relay). */
  agent: Agent;
  /** The Authorization E2B's client sent (`Basic <user:>`): the user to act as; null: the default user. */
  authorization: string | null;
  /** From the request until the agent's answer head. */
  headersMs: number;
}

/** Largest JSON answer read from the agent (a deep ListDir): more could not go out in one Connect message anyway. */
const MAX_ANSWER_BYTES = 16 * 1024 * 1024;
/** Largest frame the agent may send (its output frames are at most 1 MiB). */
const MAX_FRAME_BYTES = 4 * 1024 * 1024;

/** Longest message of the agent's passed on (to the client, to the log): the rest is the sandbox's noise. */
const MAX_MESSAGE_CHARS = 2000;

/** The kinds of frame the agent sends. */
export const FRAME = ENVD_FRAME;
export type FrameKind = EnvdFrameKind;

export interface Frame {
  kind: FrameKind;
  payload: Buffer;
}

function open(call: EnvdCall, method: string, path: string, body: unknown, signal?: AbortSignal): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    const data = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
    const req = request({
      agent: call.agent,
      method,
      path,
      headers: { host: 'agent', ...(data ? { 'content-type': 'application/json', 'content-length': data.length } : {}) },
      ...(signal ? { signal } : {}),
    });
    const headersTimer = setTimeout(() => req.destroy(new ServiceError('AGENT_UNAVAILABLE', `sandbox ${call.sandboxId} did not answer in time`)), call.headersMs);
    let settled = false;
    const settle = (fn: () => void) => {
      if (settled) return;
      settled = true;
      clearTimeout(headersTimer);
      fn();
    };
    req.once('response', (res) => settle(() => resolve(res)));
    req.once('error', (err) => settle(() => reject(agentError(err, call, signal))));
    // An upgrade nobody asked for: Node drops the socket and the request would wait forever.
    req.once('upgrade', (_res, socket) => {
      socket.destroy();
      settle(() => reject(new ServiceError('AGENT_UNAVAILABLE', `the agent of sandbox ${call.sandboxId} answered with an upgrade`)));
    });
    // Whatever else ends the request without an answer or an error.
    req.once('close', () => settle(() => reject(agentError(new Error('the connection closed before an answer'), call, signal))));
    req.end(data);
  });
}

function agentError(err: unknown, call: EnvdCall, signal?: AbortSignal): unknown {
  if (err instanceof ServiceError) return err;
  // Connect's reason (the client's deadline, its cancel) is the client's answer, not a fault of ours.
  if (signal?.aborted) return signal.reason instanceof ConnectError ? signal.reason : new ServiceError('VALIDATION_ERROR', 'the request was cancelled');
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  return new ServiceError('AGENT_UNAVAILABLE', `cannot reach the agent of sandbox ${call.sandboxId}`).withDetail(`${String(code ?? '')} ${clip(String((err as Error | undefined)?.message))}`);
}

async function readAll(res: IncomingMessage, limit: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let n = 0;
  for await (const c of res as AsyncIterable<Buffer>) {
    n += c.length;
    if (n > limit) {
      res.destroy();
      throw new ServiceError('INTERNAL_ERROR', 'the agent answered more than the gateway reads');
    }
    chunks.push(c);
  }
  return Buffer.concat(chunks);
}

/** The agent's error answer as the ServiceError it rendered. */
async function failure(res: IncomingMessage): Promise<ServiceError> {
  const text = (await readAll(res, 1024 * 1024).catch(() => Buffer.alloc(0))).toString('utf8');
  return errorFrom(text, res.statusCode ?? 502);
}

function clip(s: string): string {
  return s.length > MAX_MESSAGE_CHARS ? `${s.slice(0, MAX_MESSAGE_CHARS)}…` : s;
}

function errorFrom(text: string, status: number): ServiceError {
  let body: { code?: unknown; message?: unknown } = {};
  try {
    const parsed: unknown = JSON.parse(text);
    // `null`, a number, an array: not one of the agent's error bodies either.
    if (parsed !== null && typeof parsed === 'object' && !Array.isArray(parsed)) body = parsed as typeof body;
  } catch {
    // not one of the agent's error bodies
  }
  const message = typeof body.message === 'string' ? clip(body.message) : undefined;
  if (isErrorCode(body.code)) return new ServiceError(body.code, message);
  return new ServiceError(status >= 500 ? 'AGENT_UNAVAILABLE' : 'VALIDATION_ERROR', message ?? `the agent answered ${status}`);
}

/** A JSON call to the agent: its answer, or its error thrown as the ServiceError it was. */
export async function callAgent<T>(call: EnvdCall, method: 'GET' | 'POST', path: string, body?: unknown, signal?: AbortSignal): Promise<T> {
  const res = await open(call, method, path, body, signal);
  if (res.statusCode !== 200) throw await failure(res);
  let text: string;
  try {
    text = (await readAll(res, MAX_ANSWER_BYTES)).toString('utf8');
  } catch (err) {
    // Cut, reset, or the client went: this call's error, never a raw stream error.
    res.destroy();
    throw agentError(err, call, signal);
  }
  try {
    return JSON.parse(text) as T;
  } catch {
    throw new ServiceError('AGENT_UNAVAILABLE', `the agent of sandbox ${call.sandboxId} answered what is not JSON`);
  }
}

/**
 * A stream of frames from the agent (`[kind u8][length u32 BE][payload]`). A refusal before the
 * stream is thrown; an error frame is thrown where it comes; `signal` (the client went) ends it.
 */
export async function* agentFrames(call: EnvdCall, path: string, body: unknown, signal: AbortSignal): AsyncGenerator<Frame> {
  const res = await open(call, 'POST', path, body, signal);
  if (res.statusCode !== 200) throw await failure(res);
  // What came and is not a whole frame yet, as it came: joined once the frame is whole (a sandbox
  // dripping a large frame byte by byte must not make the gateway copy it over and over).
  let pending: Buffer[] = [];
  let have = 0;
  /** Where the frame that began in `pending` ends, once its head is there. */
  let need = 5;
  let headKnown = false;
  try {
    for await (const chunk of res as AsyncIterable<Buffer>) {
      pending.push(chunk);
      have += chunk.length;
      if (!headKnown && have >= 5) {
        if (pending[0]!.length < 5) pending = [Buffer.concat(pending, have)];
        const len = pending[0]!.readUInt32BE(1);
        if (len > MAX_FRAME_BYTES) throw new ServiceError('AGENT_UNAVAILABLE', `the agent of sandbox ${call.sandboxId} sent a frame too large`);
        need = 5 + len;
        headKnown = true;
      }
      if (have < need) continue;
      let buf = pending.length === 1 ? pending[0]! : Buffer.concat(pending, have);
      while (buf.length >= 5) {
        const len = buf.readUInt32BE(1);
        if (len > MAX_FRAME_BYTES) throw new ServiceError('AGENT_UNAVAILABLE', `the agent of sandbox ${call.sandboxId} sent a frame too large`);
        if (buf.length < 5 + len) break;
        const frame: Frame = { kind: buf[0] as FrameKind, payload: buf.subarray(5, 5 + len) };
        buf = buf.subarray(5 + len);
        if (frame.kind === FRAME.error) throw errorFrom(frame.payload.toString('utf8'), 500);
        yield frame;
      }
      // The rest: the beginning of the next frame.
      pending = buf.length > 0 ? [buf] : [];
      have = buf.length;
      headKnown = have >= 5;
      need = headKnown ? 5 + buf.readUInt32BE(1) : 5;
    }
  } catch (err) {
    if (err instanceof ServiceError) throw err;
    throw agentError(err, call, signal);
  } finally {
    res.destroy();
  }
  if (have > 0 && !signal.aborted) throw new ServiceError('AGENT_UNAVAILABLE', `the stream from the agent of sandbox ${call.sandboxId} ended inside a frame`);
}

/** A JSON frame's object. */
export function jsonFrame(f: Frame, shape: AgentShape): Record<string, unknown> {
  let v: unknown;
  try {
    v = JSON.parse(f.payload.toString('utf8'));
  } catch {
    v = undefined;
  }
  return shape.obj(v, 'a JSON frame');
}

/**
 * What the agent answered, checked where it is used: a sandbox may answer anything, and a value
 * of the wrong kind is this call's error (AGENT_UNAVAILABLE), never a TypeError, a value out of
 * its protobuf field's range, or a key of Object's prototype.
 */
export class AgentShape {
  constructor(private readonly sandboxId: string) {}

  private bad(what: string): ServiceError {
    return new ServiceError('AGENT_UNAVAILABLE', `the agent of sandbox ${this.sandboxId} answered what is not ${what}`);
  }

  obj(v: unknown, what: string): Record<string, unknown> {
    if (v === null || typeof v !== 'object' || Array.isArray(v)) throw this.bad(what);
    return v as Record<string, unknown>;
  }

  arr(v: unknown, what: string, max = 1_000_000): unknown[] {
    if (!Array.isArray(v) || v.length > max) throw this.bad(what);
    return v;
  }

  str(v: unknown, what: string): string {
    if (typeof v !== 'string') throw this.bad(what);
    return v;
  }

  optStr(v: unknown, what: string): string | undefined {
    return v === undefined ? undefined : this.str(v, what);
  }

  bool(v: unknown, what: string): boolean {
    if (typeof v !== 'boolean') throw this.bad(what);
    return v;
  }

  /** An integer in [min, max] (defaults: a uint32). */
  int(v: unknown, what: string, min = 0, max = 0xffff_ffff): number {
    if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) throw this.bad(what);
    return v;
  }

  /** A map of strings, as an object of its own keys only. */
  strings(v: unknown, what: string): Record<string, string> {
    const out: Record<string, string> = Object.create(null) as Record<string, string>;
    for (const [k, s] of Object.entries(this.obj(v, what))) out[k] = this.str(s, what);
    return out;
  }
}
