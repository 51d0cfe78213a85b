// Example values, shaped as the service makes them (sandbox ids: "sb" and 20 lowercase letters or
// digits; the others a prefix and hex), and consistent from one example to the next.
export const SBX = 'sbq7k2m9x4v8t1w6z3r5np';
export const ORG = '300389842471072417226247';
export const TPL = 'tpl_af851e734adfae9a94c3'; // the built-in code-interpreter: tpl_ and sha256("builtin:code-interpreter")
export const BUILD = 'tpl_8e41c0b7d2a95f36e1c4'; // a custom template: its build id is its id
export const KEY = 'key_5b2e9f0c7a13d468';
export const REQ = '0b7e4f2a-9c1d-4e3b-8a56-2f1c7d9e4b30';
export const PROC = 'proc_7c1e9a3f5b2d8046';
export const CTX = 'ctx_2a9f4c7e1b3d5068';
const HOST = 'http://127.0.0.1:40017';
export const AT = '2025-06-02T09:14:07.512Z';
export const LATER = '2025-06-02T09:14:09.031Z';
const b64url = (o: unknown) => Buffer.from(JSON.stringify(o)).toString('base64url');
const SIGNATURE = 'eUK_kiBedbQqdEGIIGyq8I4k5RKl1QmDVZ9fK9Ctp86j82Uu9xhFfNjLClZBEHn4lTDEGL42dDYjdEUMzH6zwg';
export const SANDBOX_TOKEN = `${b64url({ alg: 'EdDSA', typ: 'JWT' })}.${b64url({ org: ORG, sub: SBX, iss: 'sandboxd', aud: 'sandbox-agent', iat: 1748855647, jti: 'k3v9q1x7', exp: 1748942047 })}.${SIGNATURE}`;
export const EVENTS_TOKEN = `${b64url({ alg: 'EdDSA', typ: 'sandboxd-events+jwt' })}.${b64url({ org: ORG, kid: KEY, use: 'events', sbx: SBX, sub: KEY, iss: 'sandboxd', aud: 'sandboxd-events', iat: 1748855700, jti: 'p2m8w4z6', exp: 1748856000 })}.${SIGNATURE}`;
export const SHA = '9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08';

export const SNAP = 'snap_4c9e1f7a2b6d8e03a5f1c7b9';

export const sandbox = {
  object: 'sandbox',
  id: SBX,
  organization_id: ORG,
  status: 'running',
  public_host: HOST,
  direct_url: HOST,
  template_name: 'code-interpreter',
  template_id: TPL,
  region: 'local',
  internet_access: true,
  timeout_seconds: 3600,
  expires_at: '2025-06-02T10:14:07.512Z',
  created_at: AT,
  updated_at: AT,
  resources: { vcpu: 2, memory_mb: 2048, disk_gb: 10, disk_mb: 10240 },
};
export const template = {
  object: 'template',
  id: TPL,
  name: 'code-interpreter',
  display_name: 'Code Interpreter',
  description: 'Python 3.11 with numpy, pandas and matplotlib; Node.js 18; Go 1.19; bash. The default template.',
  category: 'data-science',
  language: 'python',
  default_resources: { vcpu: 2, memory_mb: 2048, disk_gb: 10 },
  status: 'active',
  is_active: true,
  is_public: true,
  build_id: null,
  features: ['code_execution', 'file_operations', 'commands', 'rich_outputs'],
  tags: ['python', 'data-science', 'javascript', 'go', 'bash'],
  env: {},
  workdir: '/workspace',
  layers: ['5d1c8a0f3e2b47a69c18d0e7f2a4b6c8d9e0f1a2b3c4d5e6f708192a3b4c5d6e', 'c0ffee5e7a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5'],
  error_message: null,
  created_at: '2025-06-01T08:00:02.118Z',
  updated_at: '2025-06-01T08:00:02.118Z',
};
