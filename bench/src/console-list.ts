// bench/console-list: the console's sandbox list with N live sandboxes (default 1,000), in Debian's
// Chromium. Measures (1) the first full render of the list after sign-in, (2) a full redraw (the
// filter cleared), and (3) per update: the time from the lifecycle event reaching the page to the
// row painted with the new state, from the API call that changed it. The baseline of (3), measured
// in the same run and the same page, is a bare EventSource on the same stream doing nothing but
// note the arrival: the ratio is what the console adds. Goal (issue 14): ≤ 100 ms per update with
// 1,000 sandboxes.
// Usage (root, after npm run build): node bench/dist/console-list.js [N=1000] [UPDATES=20]
import { performance } from 'node:perf_hooks';
import { api, startServer } from '../../e2e/dist/harness.js';
import { launchChromium } from '../../e2e/dist/browser-support.js';
import { MANY_SANDBOXES_ENV, row, summary } from './stats.js';

const N = Number(process.argv[2] ?? 1000);
const UPDATES = Number(process.argv[3] ?? 20);
const CONCURRENCY = 8;

const server = await startServer({
  templates: ['base'],
  env: MANY_SANDBOXES_ENV,
});
const browser = await launchChromium();
const ids: string[] = [];
try {
  const t0 = performance.now();
  let next = 0;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < N) {
        next++;
        const res = await api(server, 'POST', '/v1/sandboxes', { template_name: 'base', internet_access: false, timeout_seconds: 86400 });
        if (res.status !== 201) throw new Error(`create: ${res.status} ${JSON.stringify(res.body)}`);
        ids.push(res.body.id as string);
        if (ids.length % 100 === 0) console.error(`  ${ids.length}/${N} sandboxes (${Math.round((performance.now() - t0) / 1000)} s)`);
      }
    }),
  );

  const page = await (await browser.newContext({ viewport: { width: 1280, height: 900 } })).newPage();
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(e.message));
  await page.goto(`${server.baseUrl}/console`);
  await page.fill('#api-key', server.apiKey);
  const s0 = performance.now();
  await page.click('#sign-in button[type=submit]');
  await page.waitForFunction((n) => document.querySelectorAll('#sandbox-rows > [data-id]').length >= n, N, { timeout: 120_000, polling: 50 });
  const firstRender = performance.now() - s0;
  await page.locator('#live.on').waitFor({ timeout: 30_000 });

  // A full redraw: filter to nothing, then clear the filter (timed in the page).
  const redraw = await page.evaluate(() => {
    const f = document.querySelector<HTMLInputElement>('#filter')!;
    f.value = 'no-such-sandbox';
    f.dispatchEvent(new Event('input'));
    const t = performance.now();
    f.value = '';
    f.dispatchEvent(new Event('input'));
    return performance.now() - t;
  });

  // The bare listener, and an observer noting when each row changes state (both in page time).
  const token = (await api(server, 'POST', '/v1/events/token', {})).body.token as string;
  await page.evaluate((t) => {
    const w = window as unknown as { arrived: Record<string, number>; shown: Record<string, number> };
    w.arrived = {};
    w.shown = {};
    const es = new EventSource(`/v1/events?token=${encodeURIComponent(t)}`);
    for (const kind of ['paused', 'resumed']) es.addEventListener(kind, (ev) => {
      const d = JSON.parse((ev as MessageEvent<string>).data) as { id: string };
      w.arrived[`${d.id}:${kind}`] = Date.now();
    });
    new MutationObserver((records) => {
      for (const r of records) for (const n of r.addedNodes) {
        const el = n as HTMLElement;
        const id = el.getAttribute?.('data-id');
        const st = el.getAttribute?.('data-status');
        const k = `${id}:${st === 'paused' ? 'paused' : 'resumed'}`;
        // Painted: the frame after the change (style and layout of the whole table included).
        if (id && st && w.shown[k] === undefined) {
          w.shown[k] = -1;
          requestAnimationFrame(() => setTimeout(() => (w.shown[k] = Date.now()), 0));
        }
      }
    }).observe(document.querySelector('#sandbox-rows')!, { childList: true });
    return new Promise<void>((r) => es.addEventListener('open', () => r()));
  }, token);

  const perUpdate: number[] = [];
  const bare: number[] = [];
  const total: number[] = [];
  for (let i = 0; i < UPDATES; i++) {
    const id = ids[Math.floor((i * ids.length) / UPDATES)]!;
    for (const [verb, kind] of [['pause', 'paused'], ['resume', 'resumed']] as const) {
      const asked = Date.now();
      const r = await api(server, 'POST', `/v1/sandboxes/${id}/${verb}`);
      if (r.status !== 200) throw new Error(`${verb}: ${r.status} ${JSON.stringify(r.body)}`);
      const key = `${id}:${kind}`;
      await page.waitForFunction((k) => {
        const w = window as unknown as { arrived: Record<string, number>; shown: Record<string, number> };
        return w.arrived[k] !== undefined && (w.shown[k] ?? -1) > 0;
      }, key, { polling: 20, timeout: 30_000 });
      const [arrived, shown] = await page.evaluate((k) => {
        const w = window as unknown as { arrived: Record<string, number>; shown: Record<string, number> };
        return [w.arrived[k]!, w.shown[k]!];
      }, key);
      perUpdate.push(shown - arrived);
      bare.push(arrived - asked);
      total.push(shown - asked);
    }
  }
  console.log(`console list with ${N} live sandboxes (Chromium, headless); times from the API call (pause/resume) on`);
  console.log(row('first render after sign-in', [firstRender]));
  console.log(row('full redraw', [redraw]));
  console.log(row('call → row painted in the console', total, bare));
  console.log(row('  baseline: call → bare listener', bare));
  console.log(row('bare listener → row painted', perUpdate));
  const mine = summary(perUpdate);
  console.log(`goal ≤ 100 ms per update (event → painted): ${mine.p95 <= 100 ? 'met' : 'MISSED'} (p50 ${mine.p50.toFixed(1)} ms, p95 ${mine.p95.toFixed(1)} ms)`);
  if (errors.length) console.log(`page errors: ${errors.join('; ')}`);
} finally {
  await browser.close();
  let left = [...ids];
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      for (let id = left.pop(); id; id = left.pop()) await api(server, 'DELETE', `/v1/sandboxes/${id}`).catch(() => undefined);
    }),
  );
  left = [];
  await server.stop();
}
