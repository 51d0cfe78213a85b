// bench/agent: the agent interface through the gateway (what clients see), next to the same work run
// directly with `crun exec` in the same sandbox, and python3 on the host, measured in the same run.
// Usage (root, after npm run build): node bench/dist/agent.js [N=200] [BIG_ROUNDS=5]
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { createReadStream, createWriteStream, existsSync, readFileSync, statSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { pipeline } from 'node:stream/promises';
import { createSandbox, startAgentServer, stopServer, type CreatedSandbox } from '../../e2e/dist/agent-support.js';
import { row, summary } from './stats.js';

const N = Number(process.argv[2] ?? 200);
const BIG_ROUNDS = Number(process.argv[3] ?? 5);
const MiB = 1024 * 1024;

/** One keep-alive connection to the gateway, like a client SDK. */
class Client {
  private readonly agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  private readonly url: URL;
  constructor(private readonly sb: CreatedSandbox) {
    this.url = new URL(sb.publicHost);
  }

  request(method: string, path: string, body?: Buffer | string | NodeJS.ReadableStream, headers: Record<string, string | number> = {}): Promise<{ status: number; body: Buffer }> {
    return new Promise((resolve, reject) => {
      const req = http.request(
        { host: this.url.hostname, port: this.url.port, path, method, agent: this.agent, headers: { authorization: `Bearer ${this.sb.authToken}`, ...headers } },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks) }));
          res.on('error', reject);
        },
      );
      req.on('error', reject);
      if (body === undefined || typeof body === 'string' || Buffer.isBuffer(body)) req.end(body);
      else (body as NodeJS.ReadableStream).pipe(req);
    });
  }

  async json(path: string, body: unknown): Promise<any> {
    const text = JSON.stringify(body);
    const r = await this.request('POST', path, text, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
    if (r.status !== 200) throw new Error(`${path}: ${r.status} ${r.body}`);
    return JSON.parse(r.body.toString());
  }

  /** Multipart upload streamed from a file (file part first, as real clients send it). */
  async upload(localFile: string, remotePath: string): Promise<void> {
    const boundary = `----bench${randomBytes(8).toString('hex')}`;
    const head = Buffer.from(`--${boundary}\r\ncontent-disposition: form-data; name="file"; filename="f.bin"\r\ncontent-type: application/octet-stream\r\n\r\n`);
    const tail = Buffer.from(`\r\n--${boundary}\r\ncontent-disposition: form-data; name="path"\r\n\r\n${remotePath}\r\n--${boundary}--\r\n`);
    const size = statSync(localFile).size;
    const body = (async function* () {
      yield head;
      for await (const c of createReadStream(localFile, { highWaterMark: MiB })) yield c as Buffer;
      yield tail;
    })();
    const { Readable } = await import('node:stream');
    const r = await this.request('POST', '/files/upload', Readable.from(body), {
      'content-type': `multipart/form-data; boundary=${boundary}`,
      'content-length': head.length + size + tail.length,
    });
    if (r.status !== 200) throw new Error(`upload: ${r.status} ${r.body}`);
  }

  /** Streams a download and returns its sha256. */
  download(remotePath: string): Promise<string> {
    return new Promise((resolve, reject) => {
      const req = http.request(
        { host: this.url.hostname, port: this.url.port, path: `/files/download?path=${encodeURIComponent(remotePath)}`, agent: this.agent, headers: { authorization: `Bearer ${this.sb.authToken}` } },
        (res) => {
          const h = createHash('sha256');
          res.on('data', (c: Buffer) => h.update(c));
          res.on('end', () => (res.statusCode === 200 ? resolve(h.digest('hex')) : reject(new Error(`download ${res.statusCode}`))));
          res.on('error', reject);
        },
      );
      req.on('error', reject);
      req.end();
    });
  }

  close(): void {
    this.agent.destroy();
  }
}

async function sample(n: number, fn: () => Promise<unknown>): Promise<number[]> {
  for (let i = 0; i < Math.min(10, n); i++) await fn(); // warm-up
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await fn();
    out.push(performance.now() - t0);
  }
  return out;
}

/** `crun exec` into the sandbox's container: the raw baseline without agent, HTTP or gateway. */
function crunExec(root: string, id: string, argv: string[], stdin?: string, stdoutTo?: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn('crun', ['--root', root, '--cgroup-manager=cgroupfs', 'exec', id, ...argv], {
      stdio: [stdin ? 'pipe' : 'ignore', stdoutTo ? 'pipe' : 'ignore', 'ignore'],
    });
    if (stdin) void pipeline(createReadStream(stdin), child.stdin!).catch(reject);
    if (stdoutTo) void pipeline(child.stdout!, createWriteStream(stdoutTo)).catch(reject);
    child.on('error', reject);
    child.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`crun exec ${argv.join(' ')}: exit ${code}`))));
  });
}

async function writeRandom(path: string, bytes: number): Promise<void> {
  const out = createWriteStream(path);
  for (let left = bytes; left > 0; left -= 4 * MiB) {
    if (!out.write(randomBytes(Math.min(left, 4 * MiB)))) await new Promise<void>((r) => out.once('drain', () => r()));
  }
  await new Promise<void>((r, j) => out.end((e?: Error | null) => (e ? j(e) : r())));
}

function mbps(bytes: number, ms: number[]): string {
  const p50 = summary(ms).p50;
  return `${((bytes / MiB) / (p50 / 1000)).toFixed(0)} MiB/s`;
}

async function main(): Promise<void> {
  const tmp = await mkdtemp(join(tmpdir(), 'bench-agent-'));
  const server = await startAgentServer({ templates: ['code-interpreter'] });
  try {
    const sb = await createSandbox(server, { template_name: 'code-interpreter', internet_access: false });
    const client = new Client(sb);
    const root = join(server.dataDir, 'crun');
    const lines: string[] = [];
    // The distribution's interpreter (as in the sandbox), not a version manager's shim or build.
    const hostPython = existsSync('/usr/bin/python3') ? '/usr/bin/python3' : spawnSync('python3', ['-c', 'import sys; print(sys.executable)']).stdout.toString().trim() || 'python3';

    // Agent memory (what the host pays for it) after 1000 executions, from the host's view of the
    // agent process: the child of the container's init.
    const agentMemory = async (when: string): Promise<string> => {
      await new Promise((r) => setTimeout(r, 2500)); // the agent's idle collection
      const initPid = JSON.parse(execFileSync('crun', ['--root', root, 'state', sb.id], { encoding: 'utf8' })).pid as number;
      const agentPid = Number(readFileSync(`/proc/${initPid}/task/${initPid}/children`, 'utf8').trim().split(/\s+/)[0]);
      const rollup = readFileSync(`/proc/${agentPid}/smaps_rollup`, 'utf8');
      const kib = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(rollup)?.[1] ?? 0);
      // Private_Dirty is what each further sandbox's agent costs; the Node binary's text is one file
      // bind-mounted into every sandbox, shared once more than one agent runs.
      return `agent private (dirty) memory ${when}: ${(kib('Private_Dirty') / 1024).toFixed(1)} MiB (target ≤ 15 MiB after 1000 executions; Pss ${(kib('Pss') / 1024).toFixed(1)} MiB with one agent)`;
    };
    /** The kernel processes (children of the agent running sbx_kernel.py) and their memory. */
    const kernelMemory = (kernelId: string): string => {
      const initPid = JSON.parse(execFileSync('crun', ['--root', root, 'state', sb.id], { encoding: 'utf8' })).pid as number;
      const agentPid = Number(readFileSync(`/proc/${initPid}/task/${initPid}/children`, 'utf8').trim().split(/\s+/)[0]);
      const kids = readFileSync(`/proc/${agentPid}/task/${agentPid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
      const kernels = kids.filter((p) => /sbx_kernel\.py/.test(readFileSync(`/proc/${p}/cmdline`, 'utf8')));
      const rollups = kernels.map((p) => readFileSync(`/proc/${p}/smaps_rollup`, 'utf8'));
      const kib = (rollup: string, field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(rollup)?.[1] ?? 0);
      // The biggest: numpy and pandas weigh more than the default context's bare kernel.
      const newest = rollups.sort((a, b) => kib(b, 'Rss') - kib(a, 'Rss'))[0] ?? '';
      return `idle python kernel with numpy and pandas imported (${kernelId}): ${(kib(newest, 'Private_Dirty') / 1024).toFixed(1)} MiB private (dirty), Rss ${(kib(newest, 'Rss') / 1024).toFixed(1)} MiB`;
    };
    // Before anything ran: the agent's memory of an idle sandbox, which holds no kernel yet.
    lines.push(await agentMemory('idle, before any execution (no kernel)'));
    const kernelsBefore = (await client.request('GET', '/jupyter/sessions')).body.toString();
    if (kernelsBefore !== '{"sessions":[]}') throw new Error(`a kernel before the first execution: ${kernelsBefore}`);

    const py = await sample(N, () => client.json('/execute', { code: 'print(1)' }));
    const pyIsolated = await sample(N, () => client.json('/execute', { code: 'print(1)', isolated: true }));
    const pyCrun = await sample(Math.min(N, 100), () => crunExec(root, sb.id, ['python3', '-c', 'print(1)']));
    const pyHost = await sample(Math.min(N, 100), () => new Promise<void>((r) => spawn(hostPython, ['-c', 'print(1)'], { stdio: 'ignore' }).on('close', () => r())));
    lines.push(row('/execute python print(1), kernel', py, pyCrun));
    lines.push(row('/execute python print(1), isolated', pyIsolated, pyCrun));
    lines.push(row('  crun exec python3 -c print(1)', pyCrun));
    lines.push(row(`  host ${hostPython} -c print(1)`.slice(0, 34), pyHost));
    lines.push(`${''.padEnd(34)} ratio to host python: kernel ${(summary(py).p50 / summary(pyHost).p50).toFixed(2)}x, isolated ${(summary(pyIsolated).p50 / summary(pyHost).p50).toFixed(2)}x`);

    // x = 1, then x: the pair a stateful client makes.
    const pair = await sample(N, async () => {
      await client.json('/execute', { code: 'x = 1' });
      const r = await client.json('/execute', { code: 'x' });
      if (r.result !== '1') throw new Error(`x: ${JSON.stringify(r)}`);
    });
    lines.push(row('x = 1 then x (two calls)', pair, pyCrun));

    // The first execution in a new context: the kernel starts with it.
    const first: number[] = [];
    for (let i = 0; i < Math.min(N, 30); i++) {
      const ctx = await client.json('/contexts', { language: 'python' });
      const t0 = performance.now();
      await client.json('/execute', { code: 'print(1)', context_id: ctx.id });
      first.push(performance.now() - t0);
      await client.request('DELETE', `/contexts/${ctx.id}`);
    }
    lines.push(row('first execution in a new kernel', first, pyHost));

    const js = await sample(N, () => client.json('/execute', { code: 'console.log(1)', language: 'javascript' }));
    const jsIsolated = await sample(Math.min(N, 100), () => client.json('/execute', { code: 'console.log(1)', language: 'javascript', isolated: true }));
    lines.push(row('/execute js console.log(1), kernel', js, jsIsolated));
    lines.push(row('  the same, isolated (node -e)', jsIsolated));

    // One idle kernel with numpy and pandas imported: what the host pays for it.
    const pd = await client.json('/contexts', { language: 'python' });
    await client.json('/execute', { code: 'import numpy, pandas', context_id: pd.id, timeout: 120 });
    lines.push(kernelMemory(pd.kernel_id));
    await client.request('DELETE', `/contexts/${pd.id}`);

    const bash = await sample(N, () => client.json('/execute', { code: 'echo hi', language: 'bash' }));
    const bashCrun = await sample(Math.min(N, 100), () => crunExec(root, sb.id, ['bash', '-c', 'echo hi']));
    lines.push(row('/execute bash echo hi', bash, bashCrun));

    const cmd = await sample(N, () => client.json('/commands/run', { command: 'true' }));
    const trueCrun = await sample(Math.min(N, 100), () => crunExec(root, sb.id, ['true']));
    lines.push(row('/commands/run true', cmd, trueCrun));

    for (let i = 3 * N; i < 1000; i++) await client.json('/execute', { code: 'print(1)' });
    lines.push(await agentMemory(`after ${Math.max(1000, 3 * N)} executions`));

    for (const [label, bytes, rounds] of [
      ['1 MiB', MiB, Math.min(N, 50)],
      ['100 MiB', 100 * MiB, BIG_ROUNDS],
    ] as const) {
      const local = join(tmp, `${bytes}.bin`);
      await writeRandom(local, bytes);
      const back = join(tmp, `${bytes}.back`);
      const up = await sample(rounds, () => client.upload(local, `/workspace/bench-${bytes}.bin`));
      const down = await sample(rounds, () => client.download(`/workspace/bench-${bytes}.bin`));
      const upCrun = await sample(rounds, () => crunExec(root, sb.id, ['sh', '-c', `cat > /workspace/crun-${bytes}.bin`], local));
      const downCrun = await sample(rounds, () => crunExec(root, sb.id, ['cat', `/workspace/crun-${bytes}.bin`], undefined, back));
      const localHash = createHash('sha256').update(readFileSync(local)).digest('hex');
      if ((await client.download(`/workspace/bench-${bytes}.bin`)) !== localHash) throw new Error(`${label}: sha256 differs`);
      lines.push(row(`upload ${label} (write)`, up, upCrun) + `   ${mbps(bytes, up)} vs ${mbps(bytes, upCrun)}`);
      lines.push(row(`download ${label} (read)`, down, downCrun) + `   ${mbps(bytes, down)} vs ${mbps(bytes, downCrun)}`);
    }
    lines.push(await agentMemory(`after the 100 MiB transfers`));
    client.close();
    console.log(`agent interface through the gateway vs crun exec in the same sandbox (code-interpreter), N=${N}`);
    for (const l of lines) console.log(l);
  } finally {
    await stopServer(server);
    await rm(tmp, { recursive: true, force: true });
  }
}

await main();
