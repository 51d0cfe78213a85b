import { randomBytes } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { rm, stat } from 'node:fs/promises';
import { basename } from 'node:path';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { AgentClient } from './agent.js';
import { chunksOf, counted, isReplayable, multipart, type UploadSource } from './body.js';
import type { CallOptions } from './client.js';
import { Commands } from './commands.js';
import { NotFoundError, SandboxdError, ValidationError } from './errors.js';
import { bodyError, type Sent } from './http.js';
import { tarStream } from './tar.js';
import { extractTar } from './untar.js';
import type { CommandResult, FileEntry, WriteResult } from './types.js';
import { FileWatcher, type WatchOptions } from './watch.js';
import { toFileEntry } from './wire.js';

export interface WriteOptions extends CallOptions {
  /** Octal file mode, e.g. `"0755"`. */
  mode?: string;
}

export interface TransferOptions extends CallOptions {
  /** Called with the number of bytes sent or received so far. */
  onProgress?: (bytes: number) => void;
}

/** No deadline by default for transfers: big files take as long as they take. Pass `requestTimeoutMs` or a signal to bound them. */
const TRANSFER_TIMEOUT_MS = 0;

/** The sandbox's filesystem, through the agent. Paths are paths inside the sandbox. */
export class Files {
  constructor(private readonly agent: AgentClient) {}

  /**
   * Watches a directory, recursively: resolves once the watch is in place, then yields every change
   * below it (created, modified, deleted, renamed). `break` or `close()` ends it.
   */
  watch(path = '/workspace', options: WatchOptions = {}): Promise<FileWatcher> {
    return FileWatcher.open(this.agent, path, options);
  }

  /** A text file's content. Binary or large files are refused by the agent; use `download()`. */
  async read(path: string, options: CallOptions = {}): Promise<string> {
    const body = await this.agent.http.json<{ content?: unknown }>({
      method: 'GET',
      path: '/files/read',
      query: { path },
      signal: options.signal,
      timeoutMs: options.requestTimeoutMs,
      what: `read ${path}`,
    });
    return typeof body.content === 'string' ? body.content : '';
  }

  /** Writes text or bytes (sent as base64), creating parent directories. Use `upload()` for big or streamed data. */
  async write(path: string, content: string | Uint8Array, options: WriteOptions = {}): Promise<WriteResult> {
    const json: Record<string, unknown> =
      typeof content === 'string' ? { path, content } : { path, content: Buffer.from(content).toString('base64'), encoding: 'base64' };
    if (options.mode) json.mode = options.mode;
    const body = await this.agent.http.json<{ path?: string; size?: number }>({
      method: 'POST',
      path: '/files/write',
      json,
      signal: options.signal,
      timeoutMs: options.requestTimeoutMs,
      what: `write ${path}`,
    });
    return { path: body.path ?? path, size: body.size ?? (typeof content === 'string' ? Buffer.byteLength(content) : content.byteLength) };
  }

  async list(path = '/workspace', options: CallOptions = {}): Promise<FileEntry[]> {
    const body = await this.agent.http.json<{ files?: unknown[] }>({
      method: 'GET',
      path: '/files/list',
      query: { path },
      signal: options.signal,
      timeoutMs: options.requestTimeoutMs,
      what: `list ${path}`,
    });
    return (body.files ?? []).filter((f) => f && typeof f === 'object').map(toFileEntry);
  }

  async exists(path: string, options: CallOptions = {}): Promise<boolean> {
    return (await this.probe(path, options)).exists === true;
  }

  /** Whether the path is a directory (false when it is missing or anything else). One cheap request. */
  async isDirectory(path: string, options: CallOptions = {}): Promise<boolean> {
    return (await this.probe(path, options)).is_dir === true;
  }

  private probe(path: string, options: CallOptions): Promise<{ exists?: unknown; is_dir?: unknown }> {
    return this.agent.http.json<{ exists?: unknown; is_dir?: unknown }>({
      method: 'GET',
      path: '/files/exists',
      query: { path },
      signal: options.signal,
      timeoutMs: options.requestTimeoutMs,
      what: `exists ${path}`,
    });
  }

  /** Removes a file or a directory with its content. */
  async remove(path: string, options: CallOptions = {}): Promise<void> {
    await this.agent.http.json({
      method: 'DELETE',
      path: '/files/remove',
      query: { path },
      signal: options.signal,
      timeoutMs: options.requestTimeoutMs,
      what: `remove ${path}`,
    });
  }

  /** Creates a directory and its parents. */
  async mkdir(path: string, options: CallOptions = {}): Promise<void> {
    await this.agent.http.json({
      method: 'POST',
      path: '/files/mkdir',
      json: { path },
      signal: options.signal,
      timeoutMs: options.requestTimeoutMs,
      what: `mkdir ${path}`,
    });
  }

  /**
   * Streams data into a file in the sandbox (multipart upload; never buffered whole on either side).
   * Streams are sent once; bytes, strings and Blobs are re-sent if the token had to be refreshed.
   */
  async upload(path: string, data: UploadSource, options: TransferOptions = {}): Promise<WriteResult> {
    const form = multipart(
      { path },
      { field: 'file', filename: basename(path) || 'file', contentType: 'application/octet-stream', chunks: () => counted(chunksOf(data), options.onProgress) },
    );
    return this.sendUpload(path, form, isReplayable(data), options);
  }

  /** Uploads a local file, streamed from disk. */
  async uploadFile(localPath: string, path: string, options: TransferOptions = {}): Promise<WriteResult> {
    const st = await stat(localPath);
    if (!st.isFile()) throw new Error(`${localPath} is not a regular file`);
    const form = multipart(
      { path },
      {
        field: 'file',
        filename: basename(localPath),
        contentType: 'application/octet-stream',
        chunks: () => counted(createReadStream(localPath), options.onProgress),
      },
    );
    return this.sendUpload(path, form, true, options);
  }

  private async sendUpload(
    path: string,
    form: ReturnType<typeof multipart>,
    replayable: boolean,
    options: TransferOptions,
  ): Promise<WriteResult> {
    const body = await this.agent.http.json<{ path?: string; size?: number }>({
      method: 'POST',
      path: '/files/upload',
      body: replayable ? form.body : form.body(),
      contentType: form.contentType,
      signal: options.signal,
      timeoutMs: options.requestTimeoutMs ?? TRANSFER_TIMEOUT_MS,
      what: `upload ${path}`,
    });
    return { path: body.path ?? path, size: body.size ?? 0 };
  }

  private open(path: string, options: CallOptions): Promise<Sent> {
    return this.agent.http.send(
      {
        method: 'GET',
        path: '/files/download',
        query: { path },
        accept: '*/*',
        signal: options.signal,
        timeoutMs: options.requestTimeoutMs ?? 60_000,
        what: `download ${path}`,
      },
      'stream',
    );
  }

  /** A file's bytes, in memory. For big files use `downloadStream()` or `downloadFile()`. */
  async download(path: string, options: CallOptions = {}): Promise<Uint8Array> {
    const sent = await this.open(path, options);
    try {
      return new Uint8Array(await sent.res.arrayBuffer());
    } catch (err) {
      throw bodyError(err, sent);
    } finally {
      sent.done();
    }
  }

  /** A file's bytes as a Node stream, read from the network as you consume it. */
  async downloadStream(path: string, options: TransferOptions = {}): Promise<Readable> {
    const sent = await this.open(path, options);
    if (!sent.res.body) {
      sent.done();
      return Readable.from([]);
    }
    let n = 0;
    const web = Readable.fromWeb(sent.res.body as import('node:stream/web').ReadableStream<Uint8Array>);
    const out = new Transform({
      transform(chunk: Buffer, _enc, cb) {
        n += chunk.byteLength;
        options.onProgress?.(n);
        cb(null, chunk);
      },
    });
    web.on('error', (err) => out.destroy(bodyError(err, sent) as Error));
    web.pipe(out);
    out.on('close', () => sent.done());
    return out;
  }

  /** Streams a file from the sandbox to a local path; a partial file is removed on failure. */
  async downloadFile(path: string, localPath: string, options: TransferOptions = {}): Promise<{ path: string; size: number }> {
    let size = 0;
    const stream = await this.downloadStream(path, {
      ...options,
      onProgress: (n) => {
        size = n;
        options.onProgress?.(n);
      },
    });
    try {
      await pipeline(stream, createWriteStream(localPath));
    } catch (err) {
      await rm(localPath, { force: true });
      throw err;
    }
    return { path: localPath, size };
  }

  /**
   * Copies a local directory (files, subdirectories, symlinks; modes and times) into the sandbox:
   * it goes up as one streamed tar archive, staged in the sandbox's /tmp and unpacked with the
   * image's `tar` into `remoteDir`, which is created, or merged into when it exists.
   */
  async uploadDirectory(localDir: string, remoteDir: string, options: TransferOptions = {}): Promise<{ path: string; size: number }> {
    const st = await stat(localDir);
    if (!st.isDirectory()) throw new ValidationError(`${localDir} is not a directory`, { code: 'NOT_A_DIRECTORY' });
    const staging = `/tmp/.sbx-upload-${randomBytes(8).toString('hex')}.tar`;
    const sent = await this.upload(staging, tarStream(localDir, ['.']), options);
    const r = await this.sh(
      'mkdir -p -- "$1" && tar -xf "$2" -C "$1"; s=$?; rm -f -- "$2"; exit $s',
      [remoteDir, staging],
      options,
    );
    if (r.exitCode !== 0) throw unpackError(`unpacking into ${remoteDir} failed`, r);
    return { path: remoteDir, size: sent.size };
  }

  /**
   * Copies a directory of the sandbox to a local directory (created, or merged into): packed with
   * the image's `tar` into the sandbox's /tmp, streamed down and unpacked here. Entries that would
   * land outside `localDir` (absolute names, `..`, writes through symlinks) are refused.
   */
  async downloadDirectory(remoteDir: string, localDir: string, options: TransferOptions = {}): Promise<{ path: string; files: number; size: number }> {
    const staging = `/tmp/.sbx-download-${randomBytes(8).toString('hex')}.tar`;
    const r = await this.sh(
      'if [ ! -e "$1" ]; then exit 3; elif [ ! -d "$1" ]; then exit 4; fi; tar -cf "$2" -C "$1" .',
      [remoteDir, staging],
      options,
    );
    try {
      if (r.exitCode === 3) throw new NotFoundError(`Directory not found: ${remoteDir}`, { code: 'FILE_NOT_FOUND', status: 404, body: { path: remoteDir } });
      if (r.exitCode === 4) throw new ValidationError(`${remoteDir} is not a directory`, { code: 'NOT_A_DIRECTORY', status: 400, body: { path: remoteDir } });
      if (r.exitCode !== 0) throw unpackError(`packing ${remoteDir} failed`, r);
      const stream = await this.downloadStream(staging, options);
      const done = await extractTar(stream, localDir);
      return { path: localDir, files: done.files, size: done.bytes };
    } finally {
      await this.remove(staging).catch(() => undefined);
    }
  }

  /** Runs a fixed shell script with arguments (never the caller's text as code). */
  private sh(script: string, args: string[], options: CallOptions): Promise<CommandResult> {
    return new Commands(this.agent).run('sh', { args: ['-c', script, 'sh', ...args], timeout: 3600, signal: options.signal, requestTimeoutMs: options.requestTimeoutMs });
  }
}

function unpackError(what: string, r: CommandResult): SandboxdError {
  const why = r.exitCode === 127 ? 'the image has no tar' : r.stderr.trim().split('\n').slice(-3).join('; ') || `exit ${r.exitCode}`;
  return new SandboxdError(`${what}: ${why}`, { code: 'COMMAND_FAILED', body: { exit_code: r.exitCode, stderr: r.stderr } });
}
