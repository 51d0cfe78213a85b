import { randomBytes } from 'node:crypto';

/** Data the SDK can upload: bytes, text, a Blob, a web or Node stream, or any async iterable of chunks. */
export type UploadSource =
  | string
  | Uint8Array
  | ArrayBuffer
  | Blob
  | ReadableStream<Uint8Array>
  | NodeJS.ReadableStream
  | AsyncIterable<Uint8Array | string>;

const encoder = new TextEncoder();

function isWebStream(v: unknown): v is ReadableStream<Uint8Array> {
  return !!v && typeof (v as ReadableStream).getReader === 'function';
}

/** Whether the same source can be read again (so the request can be repeated). */
export function isReplayable(src: UploadSource): boolean {
  return typeof src === 'string' || src instanceof Uint8Array || src instanceof ArrayBuffer || (typeof Blob !== 'undefined' && src instanceof Blob);
}

/** Chunks of a source as Uint8Array. */
export async function* chunksOf(src: UploadSource): AsyncGenerator<Uint8Array, void, undefined> {
  if (typeof src === 'string') {
    yield encoder.encode(src);
  } else if (src instanceof Uint8Array) {
    yield src;
  } else if (src instanceof ArrayBuffer) {
    yield new Uint8Array(src);
  } else if (typeof Blob !== 'undefined' && src instanceof Blob) {
    yield* chunksOf(src.stream() as unknown as ReadableStream<Uint8Array>);
  } else if (isWebStream(src)) {
    const reader = src.getReader();
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return;
        yield value;
      }
    } finally {
      reader.releaseLock();
    }
  } else {
    for await (const c of src as AsyncIterable<Uint8Array | string>) {
      yield typeof c === 'string' ? encoder.encode(c) : c;
    }
  }
}

/** A web ReadableStream pulling from an async iterable (ReadableStream.from is Node 20+). */
export function streamFrom(iterable: AsyncIterable<Uint8Array>): ReadableStream<Uint8Array> {
  const it = iterable[Symbol.asyncIterator]();
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        // An empty chunk must not end this pull without an enqueue: the stream would not pull again.
        for (;;) {
          const { done, value } = await it.next();
          if (done) {
            controller.close();
            return;
          }
          if (value.byteLength) {
            controller.enqueue(value);
            return;
          }
        }
      } catch (err) {
        controller.error(err);
      }
    },
    async cancel(reason) {
      await it.return?.(reason);
    },
  });
}

/** Counts bytes as they pass. */
export async function* counted(
  chunks: AsyncIterable<Uint8Array>,
  onProgress: ((bytes: number) => void) | undefined,
): AsyncGenerator<Uint8Array, void, undefined> {
  let n = 0;
  for await (const c of chunks) {
    n += c.byteLength;
    yield c;
    onProgress?.(n);
  }
}

function quote(v: string): string {
  return v.replace(/[\r\n"\\]/g, (ch) => (ch === '"' ? '%22' : ch === '\\' ? '\\\\' : ''));
}

export interface MultipartFile {
  field: string;
  filename: string;
  contentType: string;
  chunks: () => AsyncIterable<Uint8Array>;
}

/**
 * A streamed `multipart/form-data` body. Text fields go first so that a streaming server knows the
 * destination before the file's bytes arrive.
 */
export function multipart(fields: Record<string, string>, file: MultipartFile): { contentType: string; body: () => ReadableStream<Uint8Array> } {
  const boundary = `----sandboxd${randomBytes(12).toString('hex')}`;
  let head = '';
  for (const [name, value] of Object.entries(fields)) {
    head += `--${boundary}\r\nContent-Disposition: form-data; name="${quote(name)}"\r\n\r\n${value}\r\n`;
  }
  head +=
    `--${boundary}\r\nContent-Disposition: form-data; name="${quote(file.field)}"; filename="${quote(file.filename)}"\r\n` +
    `Content-Type: ${file.contentType}\r\n\r\n`;
  const tail = `\r\n--${boundary}--\r\n`;
  async function* parts(): AsyncGenerator<Uint8Array, void, undefined> {
    yield encoder.encode(head);
    yield* file.chunks();
    yield encoder.encode(tail);
  }
  return { contentType: `multipart/form-data; boundary=${boundary}`, body: () => streamFrom(parts()) };
}
