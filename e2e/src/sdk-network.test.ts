import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { ApiClient, InvalidStateError, NotFoundError, Sandbox, ValidationError, type NetworkPolicy } from '@sandboxd/sdk';
import { startServer, type TestServer } from './harness.js';
import { clientFor, describeResult, sbx, SandboxPool } from './sdk-support.js';

// Egress rules through the SDK and the CLI against a real daemon: what is sent, what comes back,
// and that a refused connection is refused (the walls themselves are tested in the server's tests).

let server: TestServer;
let client: ApiClient;
let pool: SandboxPool;
const cliMade: string[] = [];

before(async () => {
  server = await startServer({ templates: ['base'] });
  client = clientFor(server);
  pool = new SandboxPool(client);
});
after(async () => {
  for (const id of cliMade) await sbx(server, ['rm', id]).catch(() => undefined);
  await pool?.cleanup();
  await server?.stop();
});

/** The policy with its lists sorted: the service normalizes entries and need not keep their order. */
const sorted = (p: NetworkPolicy): NetworkPolicy => ({ ...p, allowOut: [...p.allowOut].sort(), denyOut: [...p.denyOut].sort() });

/** A connection from inside the sandbox to a public address that nothing here allows. */
async function connectOut(sb: Sandbox, url = 'http://1.1.1.1/'): Promise<{ exitCode: number; ms: number; stderr: string }> {
  const t0 = Date.now();
  const r = await sb.commands.run(`curl -sS -o /dev/null -m 20 ${url}`);
  return { exitCode: r.exitCode, ms: Date.now() - t0, stderr: r.stderr };
}

async function egressDeniedAtLeast(sb: Sandbox, n: number): Promise<number> {
  const deadline = Date.now() + 5000;
  for (;;) {
    const seen = (await sb.resources()).egressDenied;
    if (seen >= n || Date.now() > deadline) return seen;
    await new Promise((r) => setTimeout(r, 200));
  }
}

describe('SDK: egress rules', () => {
  test('create with allowOut and denyOut: the normalized lists come back in info, getNetwork, connect and list', async () => {
    const sb = await pool.create({ allowOut: ['Example.COM', '*.Example.org', '151.101.7.9/16', '1.0.0.1'], denyOut: ['1.1.1.1'] });
    const want = sorted({ internetAccess: true, allowOut: ['example.com', '*.example.org', '151.101.0.0/16', '1.0.0.1'], denyOut: ['1.1.1.1'] });
    assert.deepEqual(sorted(sb.info.network), want);
    assert.deepEqual(sorted(await sb.getNetwork()), want);
    assert.deepEqual(sorted((await Sandbox.connect(sb.id, { client })).info.network), want);
    const listed = (await Sandbox.list({ client }).toArray()).find((s) => s.id === sb.id);
    assert.ok(listed);
    assert.deepEqual(sorted(listed.info.network), want);
    const plain = await pool.create();
    assert.deepEqual(plain.info.network, { internetAccess: true, allowOut: [], denyOut: [] });
    const offline = await pool.create({ internetAccess: false });
    assert.deepEqual(await offline.getNetwork(), { internetAccess: false, allowOut: [], denyOut: [] });
  });

  test('a connection the rules refuse is reset at once and counted in egressDenied', async () => {
    const sb = await pool.create({ allowOut: ['example.com'] });
    const before = (await sb.resources()).egressDenied;
    const r = await connectOut(sb);
    assert.notEqual(r.exitCode, 0, 'not on the allow list');
    assert.notEqual(r.exitCode, 28, `refused, not left to time out: ${r.stderr}`);
    assert.ok(r.ms < 10_000, `refused within ${r.ms} ms`);
    assert.ok((await egressDeniedAtLeast(sb, before + 1)) >= before + 1, 'egressDenied counts it');
  });

  test('setNetwork replaces the whole policy; new connections follow it within a second', async () => {
    const sb = await pool.create({ denyOut: ['1.1.1.1'] });
    const denied = await connectOut(sb);
    assert.notEqual(denied.exitCode, 0);
    const count = await egressDeniedAtLeast(sb, 1);
    assert.ok(count >= 1, 'the deny entry refused it');

    const set = await sb.setNetwork({ allowOut: ['Example.com', '151.101.0.0/16'] });
    assert.deepEqual(sorted(set), sorted({ internetAccess: true, allowOut: ['example.com', '151.101.0.0/16'], denyOut: [] }), 'the deny list left out is emptied');
    assert.deepEqual(sb.info.network, set);
    assert.deepEqual(sorted(await sb.getNetwork()), sorted(set));

    const cleared = await sb.setNetwork({});
    assert.deepEqual(cleared, { internetAccess: true, allowOut: [], denyOut: [] });
    await new Promise((r) => setTimeout(r, 1100));
    // No rule refuses it now (this machine may have no route out, so only the count can tell).
    const before = (await sb.resources()).egressDenied;
    await sb.commands.run('curl -sS -o /dev/null -m 2 http://1.1.1.1/');
    assert.equal((await sb.resources()).egressDenied, before, 'not refused by a rule once the rules are gone');
  });

  test('refusals are typed: a bad entry is a ValidationError naming it, internet for a sandbox made without it an InvalidStateError', async () => {
    const sb = await pool.create({ allowOut: ['example.com'] });
    for (const bad of ['not a host!', '1.2.3.4/33']) {
      await assert.rejects(sb.setNetwork({ allowOut: [bad] }), (e: unknown) => e instanceof ValidationError && e.status === 400 && e.message.includes(bad), bad);
      await assert.rejects(sb.setNetwork({ denyOut: [bad] }), ValidationError, bad);
    }
    await assert.rejects(sb.setNetwork({ allowOut: Array.from({ length: 1001 }, (_, i) => `h${i}.example.com`) }), ValidationError, 'at most 1000 entries');
    assert.deepEqual(await sb.getNetwork(), { internetAccess: true, allowOut: ['example.com'], denyOut: [] }, 'a refused change changes nothing');
    const count = (await Sandbox.listPage({ client, limit: 1000 })).data.length;
    await assert.rejects(pool.create({ denyOut: ['not a host!'] }), ValidationError);
    assert.equal((await Sandbox.listPage({ client, limit: 1000 })).data.length, count, 'a refused create makes nothing');

    const offline = await pool.create({ internetAccess: false });
    await assert.rejects(offline.setNetwork({ allowOut: ['example.com'] }), InvalidStateError, 'internet access is on by default in a PUT');
    await assert.rejects(offline.setNetwork({ internetAccess: true }), InvalidStateError);
    assert.deepEqual(await offline.setNetwork({ internetAccess: false }), { internetAccess: false, allowOut: [], denyOut: [] });
    await assert.rejects(Sandbox.fromId('sbnosuchsandbox', { client }).getNetwork(), NotFoundError);
  });
});

describe('CLI: egress rules', () => {
  test('create --allow-out/--deny-out; sbx network prints, replaces (--json), refuses to empty the lists without --clear', async () => {
    const c = await sbx(server, ['create', '-q', '--template', 'base', '--timeout', '30m', '--allow-out', 'Example.com', '--allow-out', '151.101.0.0/16', '--deny-out', '1.1.1.1']);
    assert.equal(c.code, 0, describeResult(c));
    const id = c.stdout.trim();
    cliMade.push(id);

    const shown = await sbx(server, ['network', id]);
    assert.equal(shown.code, 0, describeResult(shown));
    assert.match(shown.stdout, /^internet:\s+yes$/m);
    assert.match(shown.stdout, /^allow out:\s+(example\.com, 151\.101\.0\.0\/16|151\.101\.0\.0\/16, example\.com)$/m);
    assert.match(shown.stdout, /^deny out:\s+1\.1\.1\.1$/m);
    assert.match((await sbx(server, ['get', id])).stdout, /^allow out:\s+.*example\.com/m);

    const set = await sbx(server, ['network', id, '--deny-out', '1.0.0.1', '--json']);
    assert.equal(set.code, 0, describeResult(set));
    assert.deepEqual(JSON.parse(set.stdout), { internetAccess: true, allowOut: [], denyOut: ['1.0.0.1'] });

    const wipe = await sbx(server, ['network', id, '--internet']);
    assert.equal(wipe.code, 2, describeResult(wipe));
    assert.match(wipe.stderr, /--clear/);
    const bad = await sbx(server, ['network', id, '--allow-out', 'not a host!']);
    assert.equal(bad.code, 1, describeResult(bad));
    assert.match(bad.stderr, /not a host!.*VALIDATION_ERROR, HTTP 400/);
    assert.deepEqual(JSON.parse((await sbx(server, ['network', id, '--json'])).stdout), { internetAccess: true, allowOut: [], denyOut: ['1.0.0.1'] }, 'neither changed it');

    const cleared = await sbx(server, ['network', id, '--clear']);
    assert.equal(cleared.code, 0, describeResult(cleared));
    assert.equal(cleared.stdout, 'internet:  yes\nallow out: -\ndeny out:  -\n');
    const stats = await sbx(server, ['stats', id]);
    assert.match(stats.stdout, /^egress denied:\s+\d+$/m);
    assert.equal(typeof JSON.parse((await sbx(server, ['stats', id, '--json'])).stdout).egressDenied, 'number');
  });
});
