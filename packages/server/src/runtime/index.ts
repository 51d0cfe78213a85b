export type * from './types.js';
export { CrunRuntime, type CrunRuntimeOptions, AGENT_STATE_DIR } from './crun-runtime.js';
export { AGENT_LISTEN_FD } from './agent-socket.js';
export { seccompProfile } from './seccomp.js';
