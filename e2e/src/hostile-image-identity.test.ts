import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { agent, api, createSandbox, startServer, TEST_DATA_DIR, type TestServer } from './harness.js';

// Issue 8, item 13 (third bullet): bootstrapped images carried the host's /etc/hostname and
// /etc/resolv.conf (mmdebstrap copies them in). A sandbox of any bootstrapped image must show
// nothing of the host that built it.

let server: TestServer;
const HOST = hostname();

before(async () => {
  server = await startServer({
    templates: ['base', 'code-interpreter'],
    env: { SANDBOXD_REGISTRY_URL: 'none', SANDBOXD_WARM_POOL_SIZE: '0', SANDBOXD_BUILDS_PER_HOUR: '100' },
  });
});
after(async () => {
  await server?.stop();
});

async function sh(sb: { publicHost: string; authToken: string }, cmd: string): Promise<string> {
  const r = await agent(sb, 'POST', '/commands/run', { command: 'sh', args: ['-c', cmd], timeout: 60 });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return r.body.stdout;
}

/** Checks a sandbox's files and its template's bottom layer (the bootstrapped image) for host identity. */
async function assertNeutral(templateId: string, what: string): Promise<void> {
  const sb = await createSandbox(server, { template_id: templateId });
  try {
    assert.equal(await sh(sb, 'cat /etc/hostname'), 'sandbox\n', `${what}: /etc/hostname`);
    const hosts = await sh(sb, 'cat /etc/hosts');
    assert.match(hosts, /^127\.0\.0\.1\tlocalhost$/m, `${what}: /etc/hosts`);
    assert.ok(!hosts.split(/\s+/).includes(HOST), `${what}: /etc/hosts names the host: ${hosts}`);
    assert.equal(await sh(sb, 'test -e /etc/mailname && cat /etc/mailname; true'), '', `${what}: /etc/mailname`);
    // No file under /etc has a line that is the host's name (as /etc/hostname had).
    assert.equal(await sh(sb, `grep -rlxF -- '${HOST}' /etc 2>/dev/null; true`), '', `${what}: files naming the host`);
  } finally {
    await api(server, 'DELETE', `/v1/sandboxes/${sb.id}`);
  }
  // The image itself carries no resolver: resolv.conf is only the runtime's mount target.
  const tpl = await api(server, 'GET', `/v1/templates/${templateId}`);
  const bottom = tpl.body.layers[tpl.body.layers.length - 1] as string;
  const etc = join(TEST_DATA_DIR, 'layers', bottom, 'tree/etc');
  assert.equal(readFileSync(join(etc, 'resolv.conf'), 'utf8'), '', `${what}: the image's resolv.conf`);
  assert.equal(readFileSync(join(etc, 'hostname'), 'utf8'), 'sandbox\n');
}

describe('bootstrapped images show no host identity', () => {
  test('the host has an identity to leak (so the checks below mean something)', () => {
    assert.ok(HOST.length > 0);
    assert.notEqual(readFileSync('/etc/resolv.conf', 'utf8').trim(), '');
  });

  test('built-in templates: base and code-interpreter', async () => {
    for (const name of ['base', 'code-interpreter']) {
      const tpl = await api(server, 'GET', `/v1/templates/${name}`);
      assert.equal(tpl.status, 200);
      await assertNeutral(tpl.body.id, name);
    }
  });

  test('a template built from debian:11 (bootstrapped on first use)', async () => {
    const res = await api(server, 'POST', '/v1/templates/build', { alias: 'neutral-11', steps: [{ type: 'from', image: 'debian:11' }, { type: 'run', command: 'true' }] });
    assert.equal(res.status, 202, JSON.stringify(res.body));
    for (const deadline = Date.now() + 900_000; ; await new Promise((r) => setTimeout(r, 1000))) {
      const st = await api(server, 'GET', `/v1/templates/build/${res.body.build_id}/status`);
      if (st.body.status === 'active') break;
      assert.notEqual(st.body.status, 'failed', JSON.stringify(st.body));
      assert.ok(Date.now() < deadline, 'build took too long');
    }
    await assertNeutral(res.body.template_id, 'debian:11');
  });
});
