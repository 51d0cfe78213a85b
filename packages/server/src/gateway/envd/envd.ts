import type { IncomingMessage, ServerResponse } from 'node:http';
import { createContextKey, createContextValues, type HandlerContext } from '@connectrpc/connect';
import { connectNodeAdapter } from '@connectrpc/connect-node';
import { ServiceError } from '@sandboxd/protocol';
import type { EnvdCall } from './agent-call.js';
import type { OnEnvdFault } from './errors.js';
import { filesystemService } from './filesystem-service.js';
import { Filesystem } from './gen/filesystem/filesystem_pb.js';
import { Process } from './gen/process/process_pb.js';
import { processService } from './process-service.js';

/** Where E2B's in-sandbox daemon port (49983) is served: the sandbox's route and E2B's base URL both lead here. */
export const ENVD_PREFIX = '/e2b/envd';
/** Largest Connect message either way (SendInput data, a ListDir answer). */
const MAX_MESSAGE_BYTES = 16 * 1024 * 1024;
/** Largest message of a request whose length is not given (a client stream: StreamInput's pieces of stdin). */
const MAX_STREAMED_MESSAGE_BYTES = 1024 * 1024;
/**
 * Request bytes the daemon may be reading for one organization's envd calls at once, and for all:
 * Connect reads a message whole before the call sees it, so N calls in flight hold N messages.
 */
export const ORG_READ_BUDGET_BYTES = 64 * 1024 * 1024;
export const TOTAL_READ_BUDGET_BYTES = 256 * 1024 * 1024;
const RPC_PATH = /^\/e2b\/envd\/(?:process\.Process|filesystem\.Filesystem)\//;

/** Whether a request to a sandbox is one of envd's Connect calls (its /files and /health are the agent's). */
export function isEnvdRpc(url: string | undefined): boolean {
  return url !== undefined && RPC_PATH.test(url);
}

/** Whether a request names the agent's plain E2B routes, which only the gateway calls (agent-call.ts). */
export function isEnvdWire(url: string | undefined): boolean {
  if (url === undefined || !/rt/i.test(url)) return false;
  // The path as the agent will read it (URL parsing resolves dot segments, encoded ones too).
  try {
    return /^\/e2b\/rt(?:\/|$)/.test(new URL(url, 'http://agent').pathname);
  } catch {
    return false;
  }
}

const CALL = createContextKey<EnvdCall | null>(null, { description: 'the sandbox an envd call is for' });

/**
 * E2B's in-sandbox daemon protocol (Connect, JSON and binary, unary and streaming:
 * process.Process and filesystem.Filesystem) served by the gateway, once for every sandbox: each
 * call becomes plain calls to the sandbox's agent (agent-call.ts), which runs the processes and
 * touches the files. A sandbox loads nothing of it, and the code is compiled once, in the daemon.
 */
export class EnvdHost {
  private readonly calls = new WeakMap<IncomingMessage, EnvdCall>();
  /** For requests that say their length, read up to MAX_MESSAGE_BYTES; for those that do not, less. */
  private readonly rpc: (req: IncomingMessage, res: ServerResponse) => void;
  private readonly streamedRpc: (req: IncomingMessage, res: ServerResponse) => void;
  /** Request bytes being read, per organization and in all (what each request reserved). */
  private readonly reading = new Map<string, number>();
  private readingTotal = 0;

  constructor(onFault: OnEnvdFault) {
    const callOf = (ctx: HandlerContext): EnvdCall => {
      const call = ctx.values.get(CALL);
      if (!call) throw new ServiceError('INTERNAL_ERROR', 'an envd call without its sandbox');
      return call;
    };
    const adapter = (readMaxBytes: number) =>
      connectNodeAdapter({
        requestPathPrefix: ENVD_PREFIX,
        // E2B's clients speak the Connect protocol only: gRPC and gRPC-web would be surface nobody uses.
        grpc: false,
        grpcWeb: false,
        readMaxBytes,
        writeMaxBytes: MAX_MESSAGE_BYTES,
        contextValues: (req) => createContextValues().set(CALL, this.calls.get(req as IncomingMessage) ?? null),
        routes: (router) => {
          router.service(Process, processService(callOf, onFault));
          router.service(Filesystem, filesystemService(callOf, onFault));
        },
      });
    this.rpc = adapter(MAX_MESSAGE_BYTES);
    this.streamedRpc = adapter(MAX_STREAMED_MESSAGE_BYTES);
  }

  /**
   * Serves one Connect call (isEnvdRpc) for the sandbox `call` leads to. Throws (429
   * QUOTA_EXCEEDED, nothing answered) when its organization's calls, or everyone's, are already
   * sending the daemon as many bytes as it reads at once.
   */
  serve(req: IncomingMessage, res: ServerResponse, call: EnvdCall): void {
    const declared = req.headers['content-length'];
    const length = declared !== undefined && /^\d{1,12}$/.test(declared) ? Number(declared) : undefined;
    const reserve = length !== undefined ? Math.min(length, MAX_MESSAGE_BYTES + 5) : MAX_STREAMED_MESSAGE_BYTES;
    const org = this.reading.get(call.orgId) ?? 0;
    if (org + reserve > ORG_READ_BUDGET_BYTES || this.readingTotal + reserve > TOTAL_READ_BUDGET_BYTES) {
      throw new ServiceError('QUOTA_EXCEEDED', 'too many E2B calls are sending the daemon their bodies at once; retry shortly', { retry_after: 1 });
    }
    this.reading.set(call.orgId, org + reserve);
    this.readingTotal += reserve;
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      this.readingTotal -= reserve;
      const left = (this.reading.get(call.orgId) ?? reserve) - reserve;
      if (left > 0) this.reading.set(call.orgId, left);
      else this.reading.delete(call.orgId);
    };
    // Read once the request's body is in (a long stream holds nothing after it), or gone.
    req.once('end', release);
    req.once('close', release);
    res.once('close', release);
    this.calls.set(req, call);
    (length !== undefined ? this.rpc : this.streamedRpc)(req, res);
  }

  /** Request bytes being read for `orgId`'s calls (tests). */
  readingFor(orgId: string): number {
    return this.reading.get(orgId) ?? 0;
  }
}
