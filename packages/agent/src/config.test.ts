import { test } from 'node:test';
import assert from 'node:assert/strict';
import { loadConfig, userBaseEnv } from './config.js';

test("user processes never see the agent's SANDBOXD_* variables", () => {
  const env = userBaseEnv({ PATH: '/x', SANDBOXD_ENV_VARS: '{}', SANDBOXD_AGENT_LISTEN_FD: '3', SANDBOX_ID: 'sb1', FOO: 'bar' });
  assert.deepEqual(env, { PATH: '/x', SANDBOX_ID: 'sb1', FOO: 'bar', HOME: '/root' });
  assert.match(userBaseEnv({}).PATH!, /\/usr\/bin/);
});

test("the template's loader variables, passed aside so that the agent never loads them, reach user processes", () => {
  const env = userBaseEnv({ PATH: '/x', SANDBOXD_LOADER_ENV: '{"LD_PRELOAD":"/usr/lib/libjemalloc.so.2"}' });
  assert.deepEqual(env, { PATH: '/x', HOME: '/root', LD_PRELOAD: '/usr/lib/libjemalloc.so.2' });
});

test('config from the env: create-time env_vars, listen fd, limits; malformed JSON is ignored', () => {
  const c = loadConfig(
    { SANDBOX_ID: 'sb1', SANDBOXD_ENV_VARS: '{"A":"1","N":2}', SANDBOXD_AGENT_LISTEN_FD: '3', SANDBOXD_LIMITS: '{"vcpu":2,"memory_mb":512}' },
    '/.sb/agent',
  );
  assert.equal(c.sandboxId, 'sb1');
  assert.deepEqual(c.createEnv, { A: '1' });
  assert.equal(c.listenFd, 3);
  assert.deepEqual(c.limits, { vcpu: 2, memoryMb: 512, diskMb: undefined });
  assert.equal(c.stateDir, '/.sb/state');
  assert.equal(c.workspaceDir, '/workspace');
  assert.equal(c.baseEnv.SANDBOXD_ENV_VARS, undefined);
  const bad = loadConfig({ SANDBOXD_ENV_VARS: 'not json', SANDBOXD_AGENT_LISTEN_FD: 'x' }, '/a');
  assert.deepEqual(bad.createEnv, {});
  assert.equal(bad.listenFd, null);
});

test("the first responder's hand-over fds: relays and the ready pipe; stdio and junk are ignored", () => {
  const c = loadConfig({ SANDBOXD_AGENT_RELAY_FDS: '5,6,x,1,7', SANDBOXD_AGENT_READY_FD: '4' }, '/a');
  assert.deepEqual(c.relayFds, [5, 6, 7]);
  assert.equal(c.readyFd, 4);
  const none = loadConfig({}, '/a');
  assert.deepEqual(none.relayFds, []);
  assert.equal(none.readyFd, null);
});

test('the output log size of background processes: KiB from the daemon, 1 MiB unless a sane number', () => {
  assert.equal(loadConfig({}, '/a').processOutputRingBytes, 1024 * 1024);
  assert.equal(loadConfig({ SANDBOXD_PROCESS_OUTPUT_RING_KB: '64' }, '/a').processOutputRingBytes, 64 * 1024);
  for (const junk of ['0', '-5', 'x', '1.5', String(2 * 1024 * 1024)]) assert.equal(loadConfig({ SANDBOXD_PROCESS_OUTPUT_RING_KB: junk }, '/a').processOutputRingBytes, 1024 * 1024, junk);
});
