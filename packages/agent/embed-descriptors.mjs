// Build step of envd.cjs (build.mjs): protobuf file descriptors decoded at build time instead of at
// envd's first load. Generated `_pb` modules (ours in src/e2b/gen, and the well-known and gRPC
// status files Connect and protobuf bring) describe their file as `fileDesc("<base64>", imports)`:
// at run time that first builds protobuf's own descriptor.proto (a large file, to have the schema
// to decode with), then decodes each file. Here each such call becomes `embeddedFile(<the decoded
// message as a JavaScript literal>, imports)` (src/e2b/embedded-file.ts), so the bundle never
// builds descriptor.proto at all. Every literal is checked against the message it stands for.
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { fromBinary } from '@bufbuild/protobuf';
import { base64Decode } from '@bufbuild/protobuf/wire';
import { FileDescriptorProtoSchema } from '@bufbuild/protobuf/wkt';

const require = createRequire(import.meta.url);
// dist/cjs/index.js → the package directory. fileDesc's own step after decoding (json names
// restored) is not exported by the package; its module is loaded by path.
const protobufDir = join(dirname(require.resolve('@bufbuild/protobuf')), '..', '..');
const { restoreJsonNames } = await import(pathToFileURL(join(protobufDir, 'dist/esm/codegenv2/restore-json-names.js')).href);

/** The FileDescriptorProto `fileDesc(b64)` registers (before its dependencies are set). */
export function decodeFileDesc(b64) {
  const proto = fromBinary(FileDescriptorProtoSchema, base64Decode(b64));
  proto.messageType.forEach(restoreJsonNames);
  return proto;
}

/**
 * JavaScript source that evaluates to a copy of `message`: the same own properties, and for
 * messages with field defaults on a prototype (proto2's explicit presence: an own property means
 * "set"), objects of the same prototypes' contents.
 */
export function messageSource(message) {
  const prototypes = [];
  const prototypeIndex = new Map();
  const plain = (obj, seen) => {
    const parts = [];
    for (const key of Object.keys(obj)) {
      if (key === '__proto__') throw new Error('a descriptor with a __proto__ key');
      parts.push(`${JSON.stringify(key)}:${value(obj[key], seen)}`);
    }
    return `{${parts.join(',')}}`;
  };
  const value = (v, seen) => {
    if (v === undefined) return 'void 0';
    if (v === null || typeof v === 'boolean' || typeof v === 'string') return JSON.stringify(v);
    if (typeof v === 'number') return Object.is(v, -0) ? '-0' : Number.isFinite(v) ? String(v) : Number.isNaN(v) ? 'NaN' : v > 0 ? 'Infinity' : '-Infinity';
    if (typeof v === 'bigint') return `BigInt(${JSON.stringify(v.toString())})`;
    if (v instanceof Uint8Array) return `new Uint8Array([${Array.from(v).join(',')}])`;
    if (typeof v !== 'object') throw new Error(`a descriptor holds a ${typeof v}`);
    if (seen.has(v)) throw new Error('a descriptor refers to itself');
    seen.add(v);
    try {
      if (Array.isArray(v)) return `[${v.map((x) => value(x, seen)).join(',')}]`;
      const proto = Object.getPrototypeOf(v);
      if (proto === Object.prototype) return plain(v, seen);
      if (proto === null || Object.getPrototypeOf(proto) !== Object.prototype) throw new Error('a descriptor object of an unexpected prototype chain');
      let i = prototypeIndex.get(proto);
      if (i === undefined) {
        i = prototypes.length;
        prototypeIndex.set(proto, i);
        prototypes.push(plain(proto, new Set()));
      }
      return `Object.assign(Object.create(P[${i}]),${plain(v, seen)})`;
    } finally {
      seen.delete(v);
    }
  };
  const body = value(message, new Set());
  return `(()=>{const P=[${prototypes.join(',')}];return ${body};})()`;
}

/** A structure that two messages share exactly when their own and prototype properties match. */
function shape(v) {
  if (typeof v === 'bigint') return { bigint: v.toString() };
  if (v instanceof Uint8Array) return { bytes: Array.from(v) };
  if (v === undefined) return { undefined: true };
  if (v === null || typeof v !== 'object') return v;
  if (Array.isArray(v)) return v.map(shape);
  const proto = Object.getPrototypeOf(v);
  const own = Object.fromEntries(Object.keys(v).map((k) => [k, shape(v[k])]));
  return proto === Object.prototype ? { own } : { own, proto: shape(Object.assign({}, proto)) };
}

const FILE_DESC_CALL = /\bfileDesc\(\s*"([A-Za-z0-9+/=]*)"/g;

/**
 * `source` with each `fileDesc("<base64>"` replaced by `<name>(<literal>` (the rest of the call,
 * its imports, stays), and whether any was. Throws when a literal would not give back the message.
 */
export function embedFileDescCalls(source, name) {
  let count = 0;
  const out = source.replace(FILE_DESC_CALL, (_, b64) => {
    const proto = decodeFileDesc(b64);
    const literal = messageSource(proto);
    const copy = new Function(`return ${literal};`)();
    if (JSON.stringify(shape(copy)) !== JSON.stringify(shape(proto))) throw new Error(`the embedded literal of ${proto.name} differs from its descriptor`);
    count++;
    return `${name}(${literal}`;
  });
  return { source: out, count };
}

/**
 * The esbuild plugin: every bundled `_pb` module that calls `fileDesc("...")` calls
 * `embeddedFile` of `runtimeModule` with the decoded message instead.
 */
export function embeddedDescriptors(runtimeModule) {
  return {
    name: 'embedded-descriptors',
    setup(b) {
      b.onLoad({ filter: /_pb\.(js|ts)$/ }, async (args) => {
        const text = await readFile(args.path, 'utf8');
        const { source, count } = embedFileDescCalls(text, '__embeddedFile');
        if (count === 0) return undefined;
        return {
          contents: `import { embeddedFile as __embeddedFile } from ${JSON.stringify(runtimeModule)};\n${source}`,
          loader: args.path.endsWith('.ts') ? 'ts' : 'js',
          resolveDir: dirname(args.path),
        };
      });
    },
  };
}
