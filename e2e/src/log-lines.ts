// What daemons write to their logs while a test watches: the JSON events at info and above that
// each appends over a window (a quiet service should append next to none).
import { readFileSync, statSync } from 'node:fs';

export interface LogEvent {
  level: string;
  msg: string;
  [field: string]: unknown;
}

/** The events at info or above appended to each file during `ms`, and the lines that are not JSON. */
export async function loggedDuring(files: string[], ms: number): Promise<Array<{ file: string; events: LogEvent[]; plain: string[] }>> {
  const from = files.map((f) => statSync(f).size);
  await new Promise((r) => setTimeout(r, ms));
  return files.map((file, i) => {
    const lines = readFileSync(file).subarray(from[i]).toString('utf8').split('\n').filter(Boolean);
    const events = lines.filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as LogEvent);
    return { file, events: events.filter((e) => e.level !== 'debug' && e.level !== 'trace'), plain: lines.filter((l) => !l.startsWith('{')) };
  });
}

/** An event as a failure message shows it. */
export const shown = (e: LogEvent): string => `${e.level} ${e.msg} ${JSON.stringify({ ...e, level: undefined, msg: undefined, time: undefined, service: undefined })}`;
