import { createFileRegistry, type DescFile } from '@bufbuild/protobuf';
import type { FileDescriptorProto } from '@bufbuild/protobuf/wkt';

/**
 * A generated file's descriptor from its FileDescriptorProto already decoded: what the generated
 * `fileDesc(base64, imports)` returns, without decoding. In envd's bundle, build.mjs replaces each
 * `fileDesc("<base64>", ...)` of the bundled `_pb` modules with a call of this on the message the
 * base64 decodes to (embed-descriptors.mjs), decoded at build time. Decoding at run time needs
 * protobuf's own descriptor.proto built first, then a binary decode of each file: the largest part
 * of envd's first load. `proto` is as `fileDesc` has it before registering (json names restored),
 * without its dependencies, which are the files of `imports`, as there.
 */
export function embeddedFile(proto: FileDescriptorProto, imports?: DescFile[]): DescFile {
  proto.dependency = imports?.map((f) => f.proto.name) ?? [];
  const registry = createFileRegistry(proto, (name) => imports?.find((f) => f.proto.name === name));
  const file = registry.getFile(proto.name);
  if (!file) throw new Error(`embedded descriptor ${proto.name} did not register`);
  return file;
}
