export type * from './types.js';
export { CrunRuntime, type CrunRuntimeOptions, AGENT_LISTEN_FD, AGENT_STATE_DIR } from './crun-runtime.js';
export { seccompProfile } from './seccomp.js';
