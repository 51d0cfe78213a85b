import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, statSync } from 'node:fs';
import { dirname, extname, isAbsolute, join, resolve } from 'node:path';
import { ServiceError } from '../proto.js';
import { DISPLAY, type Desktop } from './session.js';

const FORMATS: Record<string, { mime: string; codec: string[] }> = {
  '.mp4': { mime: 'video/mp4', codec: ['-c:v', 'libx264', '-preset', 'ultrafast', '-pix_fmt', 'yuv420p', '-movflags', '+faststart'] },
  '.mkv': { mime: 'video/x-matroska', codec: ['-c:v', 'libx264', '-preset', 'ultrafast', '-pix_fmt', 'yuv420p'] },
  '.webm': { mime: 'video/webm', codec: ['-c:v', 'libvpx', '-deadline', 'realtime', '-cpu-used', '8', '-b:v', '1M'] },
};
const KEEP = 20;

interface Recording {
  id: string;
  file: string;
  format: string;
  startedAt: number;
  endedAt: number | null;
  proc: ChildProcess | null;
  error: string | null;
}

/** Screen recordings with ffmpeg's x11grab, one at a time; the last few are kept for download. */
export class Recorder {
  private readonly all = new Map<string, Recording>();
  private current: Recording | null = null;

  constructor(private readonly d: Desktop) {}

  get active(): boolean {
    return this.current !== null;
  }

  start(opts: { outputFile?: string; fps: number; workspace: string }): Record<string, unknown> {
    if (this.current) throw new ServiceError('INVALID_STATE', `recording ${this.current.id} is running; stop it first`, { recording_id: this.current.id });
    const id = `rec_${randomBytes(8).toString('hex')}`;
    const file = opts.outputFile ? resolve(opts.workspace, opts.outputFile) : join('/tmp/recordings', `${id}.mp4`);
    if (opts.outputFile && !isAbsolute(opts.outputFile) && !file.startsWith(opts.workspace)) throw new ServiceError('INVALID_PATH', 'output_file: a relative path must stay in the workspace');
    const ext = extname(file).toLowerCase();
    const format = FORMATS[ext];
    if (!format) throw new ServiceError('VALIDATION_ERROR', `output_file: the name must end in ${Object.keys(FORMATS).join(', ')}`, { field: 'output_file' });
    mkdirSync(dirname(file), { recursive: true });
    const args = ['-hide_banner', '-loglevel', 'error', '-y', '-f', 'x11grab', '-draw_mouse', '1', '-framerate', String(opts.fps), '-video_size', `${this.d.width}x${this.d.height}`, '-i', `${DISPLAY}.0`, ...format.codec, file];
    const proc = spawn('ffmpeg', args, { env: this.d.toolEnv(), stdio: ['pipe', 'ignore', 'pipe'] });
    const rec: Recording = { id, file, format: ext.slice(1), startedAt: Date.now(), endedAt: null, proc, error: null };
    proc.stderr!.on('data', (c: Buffer) => {
      const text = c.toString('utf8').trim();
      if (text) {
        rec.error = text.slice(-500);
        this.d.log(`ffmpeg: ${text.slice(0, 500)}`);
      }
    });
    proc.stdin!.on('error', () => undefined);
    proc.once('error', (err) => (rec.error = err.message));
    proc.once('exit', () => {
      rec.proc = null;
      rec.endedAt ??= Date.now();
      if (this.current === rec) this.current = null;
    });
    this.current = rec;
    this.all.set(id, rec);
    while (this.all.size > KEEP) this.all.delete(this.all.keys().next().value!);
    this.d.log(`recording ${id} to ${file}`);
    return { ...this.info(rec), success: true };
  }

  /** Asks ffmpeg to finish (q on stdin) so the file is complete; kills it if it does not within 10 s. */
  async stop(): Promise<Record<string, unknown>> {
    const rec = this.current;
    if (!rec) {
      const last = [...this.all.values()].pop();
      return last ? { ...this.info(last), success: true } : { recording: false, status: 'idle', success: true };
    }
    const proc = rec.proc;
    if (proc) {
      const done = new Promise<void>((r) => proc.once('exit', () => r()));
      proc.stdin!.end('q');
      const t = setTimeout(() => proc.kill('SIGINT'), 10_000);
      const t2 = setTimeout(() => proc.kill('SIGKILL'), 15_000);
      await done;
      clearTimeout(t);
      clearTimeout(t2);
    }
    rec.endedAt ??= Date.now();
    this.current = null;
    return { ...this.info(rec), success: true };
  }

  status(): Record<string, unknown> {
    const rec = this.current ?? [...this.all.values()].pop();
    if (!rec) return { recording: false, status: 'idle' };
    return this.info(rec);
  }

  fileOf(id: string): string {
    const rec = this.all.get(id);
    if (!rec) throw new ServiceError('RECORDING_NOT_FOUND', `no recording ${id}`);
    if (rec.proc) throw new ServiceError('INVALID_STATE', `recording ${id} is still running; stop it first`);
    return rec.file;
  }

  mimeOf(file: string): string {
    return FORMATS[extname(file).toLowerCase()]?.mime ?? 'application/octet-stream';
  }

  private info(rec: Recording): Record<string, unknown> {
    const running = rec.proc !== null;
    let size: number | undefined;
    try {
      size = statSync(rec.file).size;
    } catch {
      size = undefined;
    }
    const end = rec.endedAt ?? Date.now();
    return {
      recording: running,
      recording_id: rec.id,
      status: running ? 'recording' : rec.error && !size ? 'failed' : 'stopped',
      start_time: new Date(rec.startedAt).toISOString(),
      end_time: rec.endedAt ? new Date(rec.endedAt).toISOString() : undefined,
      duration: Math.round((end - rec.startedAt) / 100) / 10,
      file_path: rec.file,
      output_file: rec.file,
      file_size: size,
      format: rec.format,
      ...(rec.error && !running && !size ? { error: rec.error } : {}),
    };
  }
}
