import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm, stat } from 'node:fs/promises';
import type { IncomingMessage } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { receiveUpload } from './transfer.js';

const BOUNDARY = '----sbxtestboundary';

function part(name: string, body: Buffer | string, filename?: string): Buffer {
  const head = `--${BOUNDARY}\r\ncontent-disposition: form-data; name="${name}"${filename ? `; filename="${filename}"` : ''}\r\n${filename ? 'content-type: application/octet-stream\r\n' : ''}\r\n`;
  return Buffer.concat([Buffer.from(head), Buffer.isBuffer(body) ? body : Buffer.from(body), Buffer.from('\r\n')]);
}

/** A synthetic request: a stream with the headers busboy reads, fed in small chunks. */
function request(parts: Buffer[], opts: { cutAfter?: number } = {}): IncomingMessage {
  const body = Buffer.concat([...parts, Buffer.from(`--${BOUNDARY}--\r\n`)]);
  const req = new PassThrough() as unknown as IncomingMessage & PassThrough;
  (req as { headers: Record<string, string> }).headers = { 'content-type': `multipart/form-data; boundary=${BOUNDARY}`, 'content-length': String(body.length) };
  const end = opts.cutAfter ?? body.length;
  let off = 0;
  const pump = () => {
    if (off >= end) {
      if (opts.cutAfter !== undefined) req.destroy(new Error('client went away'));
      else req.end();
      return;
    }
    const n = Math.min(65536, end - off);
    req.write(body.subarray(off, off + n));
    off += n;
    setImmediate(pump);
  };
  setImmediate(pump);
  return req;
}

async function withDir(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'upload-'));
  try {
    await fn(dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

test('file part first, then path (real clients send this order): streamed to disk, then renamed', async () => {
  await withDir(async (dir) => {
    const data = randomBytes(3 * 1024 * 1024 + 17);
    const dest = join(dir, 'ws', 'new dir', 'ünï file.bin');
    const r = await receiveUpload(request([part('file', data, 'local.bin'), part('path', dest)]), new URL('http://a/files/upload'), join(dir, 'ws'), join(dir, 'staging'));
    assert.deepEqual(r, { success: true, path: dest, size: data.length });
    assert.equal(createHash('sha256').update(await readFile(dest)).digest('hex'), createHash('sha256').update(data).digest('hex'));
    assert.equal((await stat(dest)).mode & 0o777, 0o644);
    assert.deepEqual(await readdir(join(dir, 'staging')), [], 'no temp file left in staging');
  });
});

test('path first, relative to the workspace; an existing directory receives the file under its name', async () => {
  await withDir(async (dir) => {
    const ws = join(dir, 'ws');
    const r = await receiveUpload(request([part('path', 'sub/a.txt'), part('file', 'hello', 'x.txt')]), new URL('http://a/'), ws, join(dir, 'st'));
    assert.equal(r.path, join(ws, 'sub/a.txt'));
    assert.equal(await readFile(join(ws, 'sub/a.txt'), 'utf8'), 'hello');
    const r2 = await receiveUpload(request([part('file', 'into dir', 'named.txt'), part('path', join(ws, 'sub'))]), new URL('http://a/'), ws, join(dir, 'st'));
    assert.equal(r2.path, join(ws, 'sub', 'named.txt'));
    assert.equal(await readFile(r2.path, 'utf8'), 'into dir');
  });
});

test('missing path or file are 400; a client that goes away leaves no file behind', async () => {
  await withDir(async (dir) => {
    const ws = join(dir, 'ws');
    await assert.rejects(receiveUpload(request([part('file', 'x', 'x')]), new URL('http://a/'), ws, join(dir, 'st')), { code: 'VALIDATION_ERROR' });
    await assert.rejects(receiveUpload(request([part('path', '/x')]), new URL('http://a/'), ws, join(dir, 'st')), { code: 'VALIDATION_ERROR' });
    const big = randomBytes(2 * 1024 * 1024);
    const dest = join(ws, 'partial.bin');
    await assert.rejects(receiveUpload(request([part('path', dest), part('file', big, 'p')], { cutAfter: 1024 * 1024 }), new URL('http://a/'), ws, join(dir, 'st')));
    await assert.rejects(stat(dest), { code: 'ENOENT' });
    assert.deepEqual((await readdir(ws)).filter((n) => n.includes('sbx-')), [], 'no temp file left beside the destination');
  });
});
