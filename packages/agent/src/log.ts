import { appendFileSync, renameSync, statSync } from 'node:fs';

const MAX_LOG_BYTES = 1024 * 1024;
let logFile: string | null = null;

/**
 * The agent's own diagnostics. Its stdout/stderr usually lead nowhere (the runtime starts it
 * detached), so lines also go to a small file in the state dir, readable with /files/read.
 */
export function setLogFile(path: string): void {
  logFile = path;
}

export function logLine(message: string): void {
  const line = `${new Date().toISOString()} ${message}\n`;
  process.stderr.write(`sandboxd-agent: ${line}`);
  if (!logFile) return;
  try {
    if ((statSync(logFile, { throwIfNoEntry: false })?.size ?? 0) > MAX_LOG_BYTES) renameSync(logFile, `${logFile}.1`);
    appendFileSync(logFile, line);
  } catch {
    // diagnostics must never take the agent down
  }
}
