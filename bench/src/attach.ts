// bench/attach: following a background process's output (GET /processes/{id}/attach, server-sent
// events) through the gateway, as a client sees it, while the process prints 10,000 lines/s; and the
// agent's memory with 10 processes each holding a full output log. Same-run baseline: a plain GET
// of the process's record (/execute/processes/{id}) over a fresh connection.
// Usage (root, after npm run build): node bench/dist/attach.js [ATTACHES=50] [LAG_SECONDS=5]
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import { performance } from 'node:perf_hooks';
import { agent, createSandbox, startAgentServer, stopServer, type CreatedSandbox, type TestServer } from '../../e2e/dist/agent-support.js';
import { row, summary } from './stats.js';

const ATTACHES = Number(process.argv[2] ?? 50);
const LAG_SECONDS = Number(process.argv[3] ?? 5);
const MiB = 1024 * 1024;

/** Prints `<µs since the epoch> <n>` 10,000 times a second, one write per line. */
const PRODUCER = `
import time, sys
start = time.time(); i = 0
w = sys.stdout.write
while True:
    due = int((time.time() - start) * 10000)
    while i < due:
        w("%d %d\\n" % (time.time_ns() // 1000, i)); i += 1
    time.sleep(0.0002)
`;

const nowUs = () => (performance.timeOrigin + performance.now()) * 1000;

/** Opens a fresh connection; resolves with the ms until the first byte of the body and the response. */
function firstByte(sb: CreatedSandbox, path: string, match: (text: string) => boolean): Promise<number> {
  const url = new URL(sb.publicHost);
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const req = http.request({ host: url.hostname, port: url.port, path, agent: false, headers: { authorization: `Bearer ${sb.authToken}` } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (s: string) => {
        text += s;
        if (match(text)) {
          const ms = performance.now() - t0;
          res.destroy();
          resolve(ms);
        }
      });
      res.on('end', () => reject(new Error(`${path}: ended before the first byte wanted (${res.statusCode} ${text.slice(0, 200)})`)));
    });
    req.on('error', reject);
    req.end();
  });
}

/** Attaches from `since` and collects, per line, how long after it was printed it arrived. */
function liveLag(sb: CreatedSandbox, id: string, since: number, seconds: number): Promise<number[]> {
  const url = new URL(sb.publicHost);
  return new Promise((resolve, reject) => {
    const lags: number[] = [];
    let buf = '';
    let partial = '';
    const req = http.request({ host: url.hostname, port: url.port, path: `/processes/${id}/attach?since=${since}`, agent: false, headers: { authorization: `Bearer ${sb.authToken}` } }, (res) => {
      res.setEncoding('utf8');
      res.on('data', (s: string) => {
        const arrived = nowUs();
        buf += s;
        let i: number;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          if (!block.includes('event: output')) continue;
          const data = /^data: (.*)$/m.exec(block)?.[1];
          if (!data) continue;
          const text = partial + (JSON.parse(data) as { data: string }).data;
          const lines = text.split('\n');
          partial = lines.pop() ?? '';
          for (const line of lines) {
            const printed = Number(line.split(' ')[0]);
            if (printed > 0) lags.push((arrived - printed) / 1000);
          }
        }
      });
      res.on('error', () => undefined);
      setTimeout(() => {
        res.destroy();
        resolve(lags);
      }, seconds * 1000);
    });
    req.on('error', reject);
    req.end();
  });
}

/** The agent (the child of the container's init) seen from the host: Rss and private dirty, MiB. */
function agentMemory(server: TestServer, sb: CreatedSandbox): { rss: number; priv: number } {
  const initPid = JSON.parse(execFileSync('crun', ['--root', `${server.dataDir}/crun`, 'state', sb.id], { encoding: 'utf8' })).pid as number;
  const agentPid = Number(readFileSync(`/proc/${initPid}/task/${initPid}/children`, 'utf8').trim().split(/\s+/)[0]);
  const rollup = readFileSync(`/proc/${agentPid}/smaps_rollup`, 'utf8');
  const kib = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(rollup)?.[1] ?? 0);
  return { rss: kib('Rss') / 1024, priv: kib('Private_Dirty') / 1024 };
}

async function background(sb: CreatedSandbox, body: Record<string, unknown>, path = '/execute/background'): Promise<string> {
  const r = await agent(sb, 'POST', path, body);
  if (r.status !== 200) throw new Error(`${path}: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body.process_id as string;
}

async function main(): Promise<void> {
  const server = await startAgentServer({ templates: ['code-interpreter'] });
  const lines: string[] = [];
  try {
    const sb = await createSandbox(server, { template_name: 'code-interpreter', internet_access: false });
    const idle = agentMemory(server, sb);
    const id = await background(sb, { code: PRODUCER, language: 'python' });
    // Let it fill its log (~25 bytes a line: 1 MiB in ~4 s).
    await new Promise((r) => setTimeout(r, 5000));
    const lastLine = async (): Promise<number> => {
      const end = (await agent(sb, 'GET', `/processes/${id}/output?max_bytes=1`)).body;
      if (end.status !== 'running') throw new Error(`the producer is ${end.status}`);
      const tail = await agent(sb, 'GET', `/processes/${id}/output?since=${Math.max(0, end.end_offset - 200)}`);
      const text = (tail.body.chunks as Array<{ data: string }>).map((c) => c.data).join('').split('\n');
      return Number(text.at(-2)?.split(' ')[1]);
    };
    const n0 = await lastLine();
    const t0 = performance.now();
    await new Promise((r) => setTimeout(r, 1000));
    const rate = ((await lastLine()) - n0) / ((performance.now() - t0) / 1000);

    // attach → the first replayed byte, and the baseline (the process's record), alternated.
    const attach: number[] = [];
    const plain: number[] = [];
    for (let i = 0; i < ATTACHES; i++) {
      plain.push(await firstByte(sb, `/execute/processes/${id}`, (t) => t.length > 0));
      attach.push(await firstByte(sb, `/processes/${id}/attach?since=0`, (t) => t.includes('event: output')));
    }

    const end = (await agent(sb, 'GET', `/processes/${id}/output?max_bytes=1`)).body.end_offset as number;
    const lags = await liveLag(sb, id, end, LAG_SECONDS);
    const lag = summary(lags);
    await agent(sb, 'POST', `/execute/kill/${id}`);

    // Memory: 10 processes, each having written far more than its log keeps on both streams, then waiting.
    await new Promise((r) => setTimeout(r, 6000)); // the agent's idle collection
    const before = agentMemory(server, sb);
    const fill = `head -c ${4 * MiB} /dev/zero | tr '\\0' 'o'; head -c ${4 * MiB} /dev/zero | tr '\\0' 'e' >&2; sleep 600`;
    const fillers: string[] = [];
    for (let i = 0; i < 10; i++) fillers.push(await background(sb, { command: fill }, '/commands/background'));
    for (const f of fillers) {
      for (;;) {
        const o = await agent(sb, 'GET', `/processes/${f}/output?max_bytes=1`);
        if (o.body.end_offset >= 8 * MiB) break;
        await new Promise((r) => setTimeout(r, 200));
      }
    }
    await new Promise((r) => setTimeout(r, 6000));
    const full = agentMemory(server, sb);
    for (const f of fillers) await agent(sb, 'POST', `/execute/kill/${f}`);
    await new Promise((r) => setTimeout(r, 6000));
    const after = agentMemory(server, sb);

    lines.push(`producer: ${rate.toFixed(0)} lines/s (goal 10,000)`);
    lines.push(row('GET /execute/processes/{id} (TTFB)', plain));
    lines.push(row('attach → first replayed output', attach, plain));
    lines.push(`live lag (printed → arrived at the client): p50 ${lag.p50.toFixed(2)} ms  p95 ${lag.p95.toFixed(2)} ms  p99 ${lag.p99.toFixed(2)} ms  (n=${lag.n} lines)`);
    lines.push(`agent memory idle: Rss ${idle.rss.toFixed(1)} MiB, private ${idle.priv.toFixed(1)} MiB`);
    lines.push(`agent memory before the 10 logs: Rss ${before.rss.toFixed(1)} MiB, private ${before.priv.toFixed(1)} MiB`);
    lines.push(`agent memory with 10 running processes, each log full (1 MiB stdout + 1 MiB stderr): Rss ${full.rss.toFixed(1)} MiB, private ${full.priv.toFixed(1)} MiB (+${(full.priv - before.priv).toFixed(1)} MiB; the logs hold 20 MiB)`);
    lines.push(`after they were killed (finished logs kept up to 8 MiB in all): Rss ${after.rss.toFixed(1)} MiB, private ${after.priv.toFixed(1)} MiB`);
  } finally {
    await stopServer(server);
  }
  console.log(lines.join('\n'));
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
