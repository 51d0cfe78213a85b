import type { CellSpec } from './kernel-cell.js';

// What the agent and a kernel say to each other on the kernel's control socket (fd 3): one JSON
// object a line.

/** Longest line a kernel may write on its control socket (an answer carries a result of up to 1 MiB). */
export const MAX_CONTROL_LINE = 4 * 1024 * 1024;

export interface Answer {
  exit_code: number;
  interrupted: boolean;
  result?: string;
}

/** A line from the kernel: it is ready, or a cell (by its nonce) ended with `answer`. */
export type ControlMessage = { ready: true } | { cell: unknown; answer: Answer };

/** One line from a kernel's control socket, checked (it is the sandbox's code talking); null when it is not a message. */
export function parseControlLine(text: string): ControlMessage | null {
  let m: unknown;
  try {
    m = JSON.parse(text);
  } catch {
    return null;
  }
  if (typeof m !== 'object' || m === null || Array.isArray(m)) return null;
  const msg = m as { ready?: unknown; cell?: unknown; exit_code?: unknown; interrupted?: unknown; result?: unknown };
  if (msg.ready === true) return { ready: true };
  const code = Number(msg.exit_code);
  return {
    cell: msg.cell,
    answer: {
      exit_code: Number.isInteger(code) && code >= 0 && code <= 255 ? code : 1,
      interrupted: msg.interrupted === true,
      ...(typeof msg.result === 'string' ? { result: msg.result.slice(0, 1024 * 1024) } : {}),
    },
  };
}

/** The line that runs a cell, `nonce` its name in the answer and in the end markers. */
export function cellLine(nonce: string, spec: CellSpec): string {
  return `${JSON.stringify({ cell: nonce, code: spec.code, out_dir: spec.outDir, cwd: spec.cwd, env: spec.env, stdin: spec.stdin ? spec.stdin.toString('base64') : null })}\n`;
}

/** The line that interrupts the cell `nonce`. */
export function interruptLine(nonce: string): string {
  return `${JSON.stringify({ interrupt: nonce })}\n`;
}
