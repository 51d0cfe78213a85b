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
  private readonly rpc: (req: IncomingMessage, res: ServerResponse) => void;

  constructor(onFault: OnEnvdFault) {
    const callOf = (ctx: HandlerContext): EnvdCall => {
      const call = ctx.values.get(CALL);
      if (!call) throw new ServiceError('INTERNAL_ERROR', 'an envd call without its sandbox');
      return call;
    };
    this.rpc = connectNodeAdapter({
      requestPathPrefix: ENVD_PREFIX,
      // E2B's clients speak the Connect protocol only: gRPC and gRPC-web would be surface nobody uses.
      grpc: false,
      grpcWeb: false,
      readMaxBytes: MAX_MESSAGE_BYTES,
      writeMaxBytes: MAX_MESSAGE_BYTES,
      contextValues: (req) => createContextValues().set(CALL, this.calls.get(req as IncomingMessage) ?? null),
      routes: (router) => {
        router.service(Process, processService(callOf, onFault));
        router.service(Filesystem, filesystemService(callOf, onFault));
      },
    });
  }

  /** Serves one Connect call (isEnvdRpc) for the sandbox `call` leads to. */
  serve(req: IncomingMessage, res: ServerResponse, call: EnvdCall): void {
    this.calls.set(req, call);
    this.rpc(req, res);
  }
}
