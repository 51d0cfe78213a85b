/** The `from` images a template may start from (service-spec.md, build step objects). */
export const ALLOWED_BASE_IMAGES = [
  'ubuntu:22.04',
  'ubuntu:20.04',
  'ubuntu:18.04',
  'debian:11',
  'debian:10',
  'alpine:3.18',
  'alpine:3.17',
  'python:3.11',
  'python:3.10',
  'python:3.9',
  'node:18',
  'node:20',
] as const;

export interface ImageRef {
  /** Registry host[:port], or undefined for the configured default registry. */
  domain?: string;
  /** Repository path as the registry API names it (`library/ubuntu` for an official image). */
  repository: string;
  tag: string;
  /** `sha256:<hex>` when pinned. */
  digest?: string;
  /** Short, familiar form used as the image store's key (`ubuntu:22.04`, `me/app:1`, `host:5000/x:y`). */
  familiar: string;
}

const COMPONENT = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$/;
const TAG = /^[\w][\w.-]{0,127}$/;

/** Parses a Docker-style reference; the implicit default registry keeps official images under `library/`. */
export function parseImageRef(ref: string): ImageRef {
  let rest = ref.trim();
  let digest: string | undefined;
  const at = rest.indexOf('@');
  if (at >= 0) {
    digest = rest.slice(at + 1);
    rest = rest.slice(0, at);
    if (!/^sha256:[0-9a-f]{64}$/.test(digest)) throw new Error(`invalid digest in image reference: ${ref}`);
  }
  let tag = 'latest';
  const slash = rest.lastIndexOf('/');
  const colon = rest.lastIndexOf(':');
  if (colon > slash) {
    tag = rest.slice(colon + 1);
    rest = rest.slice(0, colon);
  }
  const parts = rest.split('/');
  let domain: string | undefined;
  if (parts.length > 1 && (/[.:]/.test(parts[0]!) || parts[0] === 'localhost')) domain = parts.shift();
  if (parts.length === 0 || !parts.every((p) => COMPONENT.test(p))) throw new Error(`invalid image reference: ${ref}`);
  if (!TAG.test(tag)) throw new Error(`invalid tag in image reference: ${ref}`);
  const repository = domain === undefined && parts.length === 1 ? `library/${parts[0]}` : parts.join('/');
  const shortRepo = domain === undefined ? repository.replace(/^library\//, '') : `${domain}/${repository}`;
  const familiar = `${shortRepo}:${tag}${digest ? `@${digest}` : ''}`;
  return { domain, repository, tag, digest, familiar };
}
