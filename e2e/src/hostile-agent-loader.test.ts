// Root in a sandbox gets its own code loaded into the agent through the dynamic loader's files,
// which inside the sandbox are the sandbox's own: an NSS module named in /etc/nsswitch.conf (libc
// dlopens it from the sandbox's /lib when the agent resolves a callback's host name), or
// /etc/ld.so.preload (read at the agent's next start), or an OpenSSL configuration (Node reads
// /etc/ssl/openssl.cnf at start; it can load provider libraries), or a template's LD_PRELOAD or
// NODE_OPTIONS (--require), or a module in the sandbox's node_modules that the agent's WebSocket
// library asked for at run time. Before the fix each of them ran the tenant's code
// in the agent's process, with its listening socket (fd 3) in hand: the code beside the agent
// could answer for it, and a template doing so ran code in warm-pool sandboxes that count for no
// organization. Each test also shows, as the control, that the same library is loaded by the
// sandbox's ordinary programs, so the attack itself works.
import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import WebSocket from 'ws';
import { agent, api, createSandbox, startServer, type CreatedSandbox, type TestServer } from './harness.js';

let server: TestServer;
const scratch = mkdtempSync(join(tmpdir(), 'sbd-loader-'));

before(async () => {
  server = await startServer();
});
after(async () => {
  await server?.stop();
  rmSync(scratch, { recursive: true, force: true });
});

/** A library whose constructor appends "<pid> <exe> <what fd 3 is>" to `marker`. */
const LIB_C = (marker: string) => `
#include <stdio.h>
#include <unistd.h>
__attribute__((constructor)) static void loaded(void) {
  char exe[256] = {0}, fd3[256] = {0};
  readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (readlink("/proc/self/fd/3", fd3, sizeof fd3 - 1) < 0) fd3[0] = '-';
  FILE *f = fopen("${marker}", "a");
  if (f) { fprintf(f, "%d %s %s\\n", getpid(), exe, fd3); fclose(f); }
}
`;

/** Appended to the marker by every node that starts with NODE_OPTIONS=--require of it. */
const REQUIRE_JS = `require('fs').appendFileSync('/tpl-marker', process.pid + ' ' + process.execPath + ' js\\n');\n`;

async function sh(sb: CreatedSandbox, command: string): Promise<string> {
  const r = await agent(sb, 'POST', '/commands/run', { command: 'bash', args: ['-c', command], timeout: 120 });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.equal(r.body.exit_code, 0, `${command}: ${r.body.stderr}`);
  return r.body.stdout as string;
}

/** Lines of the marker written by the agent: pid 2 (PID 1 is catatonit). */
const agentLines = (marker: string) => marker.split('\n').filter((l) => l.startsWith('2 '));

describe("the agent loads nothing from the sandbox's files", { timeout: 600_000 }, () => {
  test('an NSS module planted by root in the sandbox is not loaded by the agent resolving a callback host', async () => {
    const sb = await createSandbox(server, { template_name: 'code-interpreter', timeout_seconds: 600 });
    writeFileSync(join(scratch, 'nss.c'), LIB_C('/nss-marker'));
    await agent(sb, 'POST', '/files/write', { path: '/tmp/nss.c', content: readFileSync(join(scratch, 'nss.c'), 'utf8') });
    await sh(sb, "gcc -shared -fPIC -o /lib/x86_64-linux-gnu/libnss_red.so.2 /tmp/nss.c && sed -i 's/^hosts:.*/hosts: red files dns/' /etc/nsswitch.conf");
    // The sandbox's own programs load it (control)...
    await sh(sb, 'getent hosts localhost >/dev/null || true');
    const control = await sh(sb, 'cat /nss-marker');
    assert.match(control, /getent/, 'a program in the sandbox loads the planted module');
    // ...the agent, resolving the callback's host name, does not.
    const r = await agent(sb, 'POST', '/execute/async', { code: 'print(1)', language: 'python', callback_url: 'http://callback-host.invalid/hook' });
    assert.equal(r.status, 202, JSON.stringify(r.body));
    await new Promise((res) => setTimeout(res, 3000));
    const after = await sh(sb, 'cat /nss-marker');
    assert.deepEqual(agentLines(after), [], `the agent loaded the module:\n${after}`);
    assert.equal((await agent(sb, 'POST', '/execute', { code: 'print(6*7)', language: 'python' })).body.stdout, '42\n');
    await api(server, 'DELETE', `/v1/sandboxes/${sb.id}`);
  });

  test('/etc/ld.so.preload written by root in the sandbox is not loaded by the agent at the next start', async () => {
    const sb = await createSandbox(server, { template_name: 'code-interpreter', timeout_seconds: 600 });
    writeFileSync(join(scratch, 'pre.c'), LIB_C('/preload-marker'));
    await agent(sb, 'POST', '/files/write', { path: '/tmp/pre.c', content: readFileSync(join(scratch, 'pre.c'), 'utf8') });
    await sh(sb, 'gcc -shared -fPIC -o /usr/lib/libred.so /tmp/pre.c && echo /usr/lib/libred.so > /etc/ld.so.preload');
    assert.equal((await api(server, 'POST', `/v1/sandboxes/${sb.id}/stop`)).status, 200);
    assert.equal((await api(server, 'POST', `/v1/sandboxes/${sb.id}/start`)).status, 200);
    const marker = await sh(sb, 'cat /preload-marker');
    assert.match(marker, /bash/, 'programs in the sandbox load it (control)');
    assert.deepEqual(agentLines(marker), [], `the agent loaded /etc/ld.so.preload:\n${marker}`);
    await sh(sb, 'rm /etc/ld.so.preload');
    await api(server, 'DELETE', `/v1/sandboxes/${sb.id}`);
  });

  test("an OpenSSL configuration written by root in the sandbox (nodejs_conf loading a provider module) is not read by the agent at the next start", async () => {
    // Node reads the nodejs_conf section of OPENSSLDIR/openssl.cnf (/etc/ssl: the sandbox's) at
    // start, and a provider module is a shared library loaded by absolute path.
    const sb = await createSandbox(server, { template_name: 'code-interpreter', timeout_seconds: 600 });
    writeFileSync(join(scratch, 'ossl.c'), LIB_C('/ossl-marker'));
    await agent(sb, 'POST', '/files/write', { path: '/tmp/ossl.c', content: readFileSync(join(scratch, 'ossl.c'), 'utf8') });
    const conf = ['nodejs_conf = nodejs_init', '[nodejs_init]', 'providers = prov_sect', '[prov_sect]', 'red = red_sect', '[red_sect]', 'module = /usr/lib/libredssl.so', 'activate = 1', ''].join('\n');
    await agent(sb, 'POST', '/files/write', { path: '/tmp/node.cnf', content: conf });
    await sh(sb, "gcc -shared -fPIC -o /usr/lib/libredssl.so /tmp/ossl.c && { echo 'nodejs_conf = nodejs_init'; grep -v '^nodejs_conf' /etc/ssl/openssl.cnf; tail -n +2 /tmp/node.cnf; } > /tmp/new.cnf && mv /tmp/new.cnf /etc/ssl/openssl.cnf");
    await sh(sb, 'node -e 1 2>/dev/null || true');
    assert.match(await sh(sb, 'cat /ossl-marker'), /node/, "the image's node loads the module (control)");
    assert.equal((await api(server, 'POST', `/v1/sandboxes/${sb.id}/stop`)).status, 200);
    const started = await api(server, 'POST', `/v1/sandboxes/${sb.id}/start`);
    assert.equal(started.status, 200, `the agent did not start: ${JSON.stringify(started.body)}`);
    const marker = await sh(sb, 'cat /ossl-marker');
    assert.deepEqual(agentLines(marker), [], `the agent loaded the OpenSSL module:\n${marker}`);
    await api(server, 'DELETE', `/v1/sandboxes/${sb.id}`);
  });

  test("modules planted in the sandbox's node_modules directories are not required by the agent at its first WebSocket", async () => {
    // ws asks for optional native modules (bufferutil, utf-8-validate); left to run-time resolution
    // they were found in /node_modules, /.sb/node_modules or ~/.node_modules, all the sandbox's.
    const sb = await createSandbox(server, { template_name: 'code-interpreter', timeout_seconds: 600 });
    const plant = `const fs = require('fs'); let fd3 = '-'; try { fd3 = fs.readlinkSync('/proc/self/fd/3'); } catch {} fs.appendFileSync('/ws-marker', process.pid + ' ' + fd3 + ' ' + __filename + '\\n');\n`;
    for (const dir of ['/node_modules', '/.sb/node_modules', '/root/.node_modules', '/root/.node_libraries']) {
      for (const mod of ['bufferutil', 'utf-8-validate']) {
        await agent(sb, 'POST', '/files/write', { path: `${dir}/${mod}/index.js`, content: plant });
      }
    }
    await sh(sb, "cd / && node -e \"require('bufferutil')\"");
    assert.match(await sh(sb, 'cat /ws-marker'), /bufferutil/, 'node in the sandbox finds the planted module (control)');
    const ws = new WebSocket(`${sb.publicHost.replace(/^http/, 'ws')}/files/watch?path=%2Ftmp&ack=1`, { headers: { authorization: `Bearer ${sb.authToken}` } });
    const first = await new Promise<string>((resolve, reject) => {
      ws.once('message', (m) => resolve(String(m)));
      ws.once('error', reject);
    });
    assert.match(first, /watching/);
    ws.send(JSON.stringify({ action: 'watch', path: '/workspace' }));
    await new Promise((r) => setTimeout(r, 300));
    ws.close();
    const marker = await sh(sb, 'cat /ws-marker');
    assert.deepEqual(agentLines(marker), [], `the agent required a planted module:\n${marker}`);
    await api(server, 'DELETE', `/v1/sandboxes/${sb.id}`);
  });

  test("a template's /etc/ld.so.preload, ENV LD_PRELOAD and ENV NODE_OPTIONS reach its programs, not its agents (warm pool included)", async () => {
    writeFileSync(join(scratch, 'tpl.c'), LIB_C('/tpl-marker'));
    execFileSync('gcc', ['-shared', '-fPIC', '-Os', '-s', '-o', join(scratch, 'tpl.so'), join(scratch, 'tpl.c')]);
    const so = readFileSync(join(scratch, 'tpl.so')).toString('base64');
    const build = await api(server, 'POST', '/v1/templates/build', {
      alias: 'preloading',
      steps: [
        { type: 'from', image: 'debian:11' },
        { type: 'run', command: `echo ${so} | base64 -d > /usr/lib/libtpl.so && cp /usr/lib/libtpl.so /usr/lib/libtpl2.so && echo /usr/lib/libtpl.so > /etc/ld.so.preload` },
        { type: 'env', key: 'LD_PRELOAD', value: '/usr/lib/libtpl2.so' },
        { type: 'run', command: `echo ${Buffer.from(REQUIRE_JS).toString('base64')} | base64 -d > /opt/red.js` },
        { type: 'env', key: 'NODE_OPTIONS', value: '--require=/opt/red.js' },
        // The build's own steps loaded the libraries too: start the template without their lines.
        { type: 'run', command: 'rm -f /tpl-marker' },
      ],
    });
    assert.equal(build.status, 202, JSON.stringify(build.body));
    let status = 'building';
    for (let i = 0; i < 300 && status === 'building'; i++) {
      await new Promise((r) => setTimeout(r, 1000));
      status = (await api(server, 'GET', `/v1/templates/build/${build.body.build_id}/status`)).body.status;
    }
    assert.equal(status, 'active');
    // The first create makes the pool boot more of this template; the second is likely one of them.
    for (let n = 0; n < 2; n++) {
      const sb = await createSandbox(server, { template_name: 'preloading', timeout_seconds: 600 });
      if (n === 0) await new Promise((r) => setTimeout(r, 3000));
      assert.equal(await sh(sb, 'printf %s "$LD_PRELOAD"'), '/usr/lib/libtpl2.so', "the template's LD_PRELOAD is in its programs' env");
      // JavaScript runs on the agent's node here (the image has none): NODE_OPTIONS reaches it.
      assert.equal((await agent(sb, 'POST', '/execute', { code: 'console.log(1)', language: 'javascript' })).body.stdout, '1\n');
      const marker = await sh(sb, 'cat /tpl-marker');
      assert.match(marker, /bash/, 'programs load the libraries (control)');
      assert.match(marker, / js$/m, "user JavaScript gets the template's NODE_OPTIONS (control)");
      assert.deepEqual(agentLines(marker), [], `the agent loaded the template's code:\n${marker}`);
      await api(server, 'DELETE', `/v1/sandboxes/${sb.id}`);
    }
    await api(server, 'DELETE', '/v1/templates/preloading');
  });
});
