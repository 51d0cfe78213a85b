// envd's descriptors decoded at build time (embed-descriptors.mjs, embedded-file.ts): each
// generated file's embedded literal gives the same descriptor as `fileDesc` does at run time, and
// messages encode and decode through it the same way, JSON and binary.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { create, fromBinary, fromJson, toBinary, toJson, type DescFile } from '@bufbuild/protobuf';
import { FileDescriptorProtoSchema, file_google_protobuf_timestamp } from '@bufbuild/protobuf/wkt';
import { embeddedFile } from './embedded-file.js';
import { file_process_process, StartRequestSchema } from './gen/process/process_pb.js';
import { file_filesystem_filesystem, EntryInfoSchema } from './gen/filesystem/filesystem_pb.js';

const agentDir = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const srcGen = join(agentDir, 'src', 'e2b', 'gen');

interface Embedder {
  embedFileDescCalls(source: string, name: string): { source: string; count: number };
  messageSource(message: unknown): string;
}
const embedder = (await import(pathToFileURL(join(agentDir, 'embed-descriptors.mjs')).href)) as Embedder;

/** The call expression starting at `start` ("NAME(...)"), to its closing parenthesis (strings skipped). */
function callAt(text: string, start: number): string {
  let depth = 0;
  for (let i = text.indexOf('(', start); i < text.length; i++) {
    const c = text[i]!;
    if (c === '"') {
      for (i++; text[i] !== '"'; i++) if (text[i] === '\\') i++;
    } else if (c === '(' || c === '[' || c === '{') depth++;
    else if (c === ')' || c === ']' || c === '}') {
      depth--;
      if (depth === 0) return text.slice(start, i + 1);
    }
  }
  throw new Error('unbalanced call');
}

/** The generated module's file descriptor made the build's way: its source's call, embedded, evaluated. */
function embeddedOf(source: string, imports: DescFile[]): DescFile {
  const { source: out, count } = embedder.embedFileDescCalls(source, 'EMBED');
  assert.equal(count, 1, 'one fileDesc call per generated file');
  assert.doesNotMatch(out, /fileDesc\("/, 'no call left');
  const call = callAt(out, out.indexOf('EMBED('));
  // The call's second argument names the imported files; they are given in order.
  const names = /, \[([^\]]*)\]\)$/.exec(call)?.[1]?.split(',').map((n) => n.trim()) ?? [];
  assert.equal(names.length, imports.length);
  return new Function('EMBED', ...names, `return ${call};`)((proto: Parameters<typeof embeddedFile>[0], deps?: DescFile[]) => embeddedFile(proto, deps), ...imports) as DescFile;
}

const files: Array<[string, DescFile, DescFile[]]> = [
  ['process/process_pb.ts', file_process_process, []],
  ['filesystem/filesystem_pb.ts', file_filesystem_filesystem, [file_google_protobuf_timestamp]],
];

for (const [path, runtime, imports] of files) {
  test(`${path}: the embedded descriptor is the one fileDesc decodes`, () => {
    const embedded = embeddedOf(readFileSync(join(srcGen, path), 'utf8'), imports);
    assert.deepEqual(toBinary(FileDescriptorProtoSchema, embedded.proto), toBinary(FileDescriptorProtoSchema, runtime.proto));
    assert.deepEqual(embedded.proto.dependency, runtime.proto.dependency);
    const names = (f: DescFile) => f.messages.map((m) => [m.typeName, m.fields.map((x) => `${x.name}/${x.jsonName}/${x.fieldKind}/${x.presence}`)]);
    assert.deepEqual(names(embedded), names(runtime));
    assert.deepEqual(
      embedded.services.map((s) => [s.typeName, s.methods.map((m) => `${m.name}:${m.methodKind}:${m.input.typeName}->${m.output.typeName}`)]),
      runtime.services.map((s) => [s.typeName, s.methods.map((m) => `${m.name}:${m.methodKind}:${m.input.typeName}->${m.output.typeName}`)]),
    );
  });
}

test('messages encode and decode the same through either descriptor (JSON and binary, oneofs, maps, optionals)', () => {
  const processEmbedded = embeddedOf(readFileSync(join(srcGen, 'process/process_pb.ts'), 'utf8'), []);
  const startEmbedded = processEmbedded.messages.find((m) => m.typeName === 'process.StartRequest')!;
  const json = { process: { cmd: '/bin/bash', args: ['-l', '-c', 'echo hi'], envs: { A: '1' }, cwd: '/home/user' }, pty: { size: { cols: 80, rows: 24 } }, tag: 't', stdin: true };
  const a = fromJson(StartRequestSchema, json);
  const b = fromJson(startEmbedded, json);
  assert.deepEqual(toBinary(startEmbedded, b), toBinary(StartRequestSchema, a));
  assert.deepEqual(toJson(startEmbedded, fromBinary(startEmbedded, toBinary(StartRequestSchema, a))), toJson(StartRequestSchema, a));

  const fsEmbedded = embeddedOf(readFileSync(join(srcGen, 'filesystem/filesystem_pb.ts'), 'utf8'), [file_google_protobuf_timestamp]);
  const entryEmbedded = fsEmbedded.messages.find((m) => m.typeName === 'filesystem.EntryInfo')!;
  const entry = create(EntryInfoSchema, { name: 'a', path: '/a', size: 3n, mode: 0o644, symlinkTarget: '/b', metadata: { k: 'v' }, modifiedTime: { seconds: 5n, nanos: 7 } });
  assert.deepEqual(toJson(entryEmbedded, fromBinary(entryEmbedded, toBinary(EntryInfoSchema, entry))), toJson(EntryInfoSchema, entry));
});

test("a literal keeps proto2's presence: defaults stay on the prototype, set fields are own", () => {
  const proto = FileDescriptorProtoSchema;
  const msg = create(proto, { name: 'x.proto', syntax: 'proto3' });
  const copy = new Function(`return ${embedder.messageSource(msg)};`)() as typeof msg;
  assert.deepEqual(Object.keys(copy).sort(), Object.keys(msg).sort());
  assert.equal(copy.edition, msg.edition);
  assert.equal(Object.hasOwn(copy, 'package'), Object.hasOwn(msg, 'package'));
  assert.deepEqual(toBinary(proto, copy), toBinary(proto, msg));
});
