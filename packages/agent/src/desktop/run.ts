import { execFile, spawn } from 'node:child_process';
import { ServiceError } from '../proto.js';

/** The result of one tool run to its end. */
export interface ToolResult {
  stdout: Buffer;
  stderr: string;
}

export interface RunOptions {
  env: Record<string, string>;
  timeoutMs?: number;
  /** Written to the tool's stdin, then closed. */
  input?: string | Buffer;
  /** Largest stdout kept (a screenshot, an OCR result). */
  maxBytes?: number;
  /** Exit statuses that are not failures (xclip -o with an empty clipboard exits 1). */
  okCodes?: number[];
}

/**
 * Runs one X tool (xdotool, scrot, xclip, wmctrl, xrandr, tesseract, ...) with `args` as its argv:
 * no shell, so nothing in a request is read as shell syntax. A failure is a 500 whose detail (the
 * tool's stderr) goes to the agent's log.
 */
export function runTool(file: string, args: string[], opts: RunOptions): Promise<ToolResult> {
  return new Promise((resolve, reject) => {
    const child = execFile(
      file,
      args,
      { env: opts.env, timeout: opts.timeoutMs ?? 10_000, maxBuffer: opts.maxBytes ?? 64 * 1024 * 1024, encoding: 'buffer', killSignal: 'SIGKILL' },
      (err, stdout, stderr) => {
        const errText = stderr.toString('utf8').trim();
        if (err) {
          const code = typeof (err as { code?: unknown }).code === 'number' ? ((err as { code: number }).code) : undefined;
          if (code !== undefined && opts.okCodes?.includes(code)) return resolve({ stdout, stderr: errText });
          if ((err as { code?: unknown }).code === 'ENOENT') return reject(new ServiceError('DESKTOP_NOT_AVAILABLE', `${file} is not installed in this sandbox`, { missing: [file] }));
          const what = (err as { killed?: boolean }).killed ? `timed out after ${opts.timeoutMs ?? 10_000} ms` : `failed (${code ?? (err as { signal?: string }).signal ?? err.message})`;
          return reject(new ServiceError('INTERNAL_ERROR', `${file} ${what}${errText ? `: ${errText.split('\n').slice(-3).join(' ').slice(0, 400)}` : ''}`).withDetail(`${file} ${args.join(' ').slice(0, 500)}\n${errText}`));
        }
        resolve({ stdout, stderr: errText });
      },
    );
    if (opts.input !== undefined) child.stdin?.end(opts.input);
    else child.stdin?.end();
  });
}

/**
 * Runs a tool that forks to stay in the background (xclip serving the clipboard): waits for the
 * first process to exit, with no pipe left for the forked one to hold open.
 */
export function runForking(file: string, args: string[], opts: { env: Record<string, string>; input: string; timeoutMs?: number }): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(file, args, { env: opts.env, stdio: ['pipe', 'ignore', 'ignore'] });
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new ServiceError('INTERNAL_ERROR', `${file} timed out`));
    }, opts.timeoutMs ?? 10_000);
    child.once('error', (err) => {
      clearTimeout(timer);
      reject((err as NodeJS.ErrnoException).code === 'ENOENT' ? new ServiceError('DESKTOP_NOT_AVAILABLE', `${file} is not installed in this sandbox`, { missing: [file] }) : err);
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      if (code === 0) resolve();
      else reject(new ServiceError('INTERNAL_ERROR', `${file} failed (exit ${code})`));
    });
    child.stdin!.on('error', () => undefined);
    child.stdin!.end(opts.input);
  });
}
