import { randomBytes } from 'node:crypto';
import type { SandboxSpec } from './types.js';

/**
 * A new sandbox id. Whoever boots a sandbox picks it: the services on one machine, a node's warm
 * pool in a cluster (its ready sandboxes exist before any create asks for them). 20 random
 * characters of 36 (~103 bits): ids picked on different machines do not meet.
 */
export function newSandboxId(): string {
  // Lowercase letters and digits only: it is also a hostname label, a container id and a cgroup name.
  const alphabet = 'abcdefghijklmnopqrstuvwxyz0123456789';
  const bytes = randomBytes(20);
  let s = 'sb';
  for (const b of bytes) s += alphabet[b % alphabet.length];
  return s;
}

/**
 * `spec` as the spec of sandbox `id`: what of a spec comes from the id (the container id, its
 * hostname and SANDBOX_ID). The one rule for the services' specs and a node's warm pool, which
 * boots ready sandboxes of a spec control sent without an id.
 */
export function withSandboxId(spec: SandboxSpec, id: string): SandboxSpec {
  return { ...spec, id, hostname: `sandbox-${id.slice(2, 10)}`, env: { ...spec.env, SANDBOX_ID: id } };
}
