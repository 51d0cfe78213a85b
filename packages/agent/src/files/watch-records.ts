// What sbx-helper watch reports, shared by the agent's watch socket and E2B's watch API.

/** Directories one watch follows (inotify watches are a per-user kernel resource). */
export const MAX_WATCHED_DIRS = 8192;

export interface WatchRecord {
  event: string;
  isDir: boolean;
  path: string;
  oldPath: string;
}

/** Splits sbx-helper watch's output (four NUL-terminated fields per record) into records. */
export class WatchRecordParser {
  private fields: string[] = [];
  private partial: Buffer[] = [];

  push(chunk: Buffer): WatchRecord[] {
    const out: WatchRecord[] = [];
    let start = 0;
    for (let i = chunk.indexOf(0); i !== -1; i = chunk.indexOf(0, start)) {
      this.partial.push(chunk.subarray(start, i));
      this.fields.push(Buffer.concat(this.partial).toString('utf8'));
      this.partial = [];
      start = i + 1;
      if (this.fields.length === 4) {
        const [event, kind, path, oldPath] = this.fields as [string, string, string, string];
        out.push({ event, isDir: kind === 'd', path, oldPath });
        this.fields = [];
      }
    }
    if (start < chunk.length) this.partial.push(Buffer.from(chunk.subarray(start)));
    return out;
  }
}
