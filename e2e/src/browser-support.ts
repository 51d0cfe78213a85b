// The browser tests' shared pieces: Debian's Chromium driven by playwright-core, a page's errors,
// where screenshots go.
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { mkdirSync } from 'node:fs';
import { after, before } from 'node:test';
import { REPO_ROOT, startServer, type TestServer } from './harness.js';

export const SCREENSHOTS = join(REPO_ROOT, 'e2e/dist/screenshots');

/** Debian's Chromium (scripts/test-packages.txt). */
export async function launchChromium(): Promise<Browser> {
  const executablePath = execFileSync('sh', ['-c', 'command -v chromium'], { encoding: 'utf8' }).trim();
  // As root, Chromium's own sandbox cannot start; the pages it opens here are the service's own.
  return chromium.launch({ executablePath, headless: true, args: ['--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu'] });
}

/**
 * Chromium ends every request in flight with this when the host's interfaces change, loopback
 * included, and sandboxes coming and going (the tests' own, the warm pool's) add and remove veths
 * all the time: the test host's doing, not the page's. What the page then shows is still checked.
 */
const NETWORK_CHANGED = 'net::ERR_NETWORK_CHANGED';

/** Fails the test on anything the page logs as an error (CSP violations included) or throws. */
export function watchErrors(page: Page): string[] {
  const errors: string[] = [];
  page.on('console', (m) => {
    if (m.type() === 'error' && !m.text().includes(NETWORK_CHANGED)) errors.push(`console: ${m.text()}`);
  });
  page.on('pageerror', (e) => errors.push(`page: ${e.message}`));
  page.on('requestfailed', (r) => {
    // A request the page itself ended (an event stream closed on reload or sign-out) is no failure.
    const why = r.failure()?.errorText;
    if (why !== 'net::ERR_ABORTED' && why !== NETWORK_CHANGED) errors.push(`request failed: ${r.url()} ${why ?? ''}`);
  });
  page.on('response', (r) => {
    if (r.status() >= 400) errors.push(`HTTP ${r.status()}: ${r.url()}`);
  });
  return errors;
}


/** A daemon (template base) and Chromium for one test file, started before its tests and stopped after. */
export function browserEnv(): { server: TestServer; browser: Browser } {
  const env = {} as { server: TestServer; browser: Browser };
  before(async () => {
    env.server = await startServer({ templates: ['base'] });
    env.browser = await launchChromium();
    mkdirSync(SCREENSHOTS, { recursive: true });
  });
  after(async () => {
    await env.browser?.close();
    await env.server?.stop();
  });
  return env;
}
