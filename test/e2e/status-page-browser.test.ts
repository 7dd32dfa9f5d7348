/**
 * The status page in a real browser (Debian's chromium, driven by playwright-core; no browser download):
 * it renders under its own CSP with no console errors, the four outcomes are distinguishable, a hostile
 * target's evidence holding <script> and <img onerror> renders as text and runs nothing, and a foreign Host
 * (a DNS-rebinding page) is refused.
 *
 * Needs `chromium` (scripts/setup-test-env.sh installs it) and the `playwright-core` package.
 */
import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeFinding } from '../../prober/src/probe/findings.js';
import type { Outcome, ProbeRun } from '../../prober/src/probe/result.js';
import { startServiceServer, type ServiceServer } from '../../prober/src/service/server.js';
import { openStore, type Store } from '../../prober/src/service/store.js';

const CHROMIUM = process.env['KVCANARY_CHROMIUM'] ?? '/usr/bin/chromium';
const HOSTILE = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">';

/** The few playwright-core calls used here (imported by name at run time: it is a test-only dependency). */
interface Page {
  on(event: 'console', fn: (m: { type(): string; text(): string }) => void): void;
  on(event: 'pageerror', fn: (e: Error) => void): void;
  goto(url: string): Promise<{ status(): number } | null>;
  evaluate<T>(fn: string): Promise<T>;
  textContent(selector: string): Promise<string | null>;
  click(selector: string): Promise<void>;
  isVisible(selector: string): Promise<boolean>;
  setViewportSize(size: { width: number; height: number }): Promise<void>;
}
interface Browser { newPage(): Promise<Page>; close(): Promise<void> }
interface PlaywrightCore { chromium: { launch(o: { executablePath: string; args: string[]; headless: boolean }): Promise<Browser> } }

async function loadPlaywright(): Promise<PlaywrightCore> {
  const name = 'playwright-core';
  try {
    return (await import(name)) as PlaywrightCore;
  } catch {
    throw new Error('the status-page browser test needs the npm package playwright-core (devDependency): npm install --save-dev playwright-core');
  }
}

function run(target: string, outcome: Outcome, at: string): ProbeRun {
  const findings = outcome === 'fail'
    ? [makeFinding('cross-request-leak', 'abort-race', { match: 'kvcanary-aaaaaaaaaaaaaaaaaaaaaaaaaa', excerpt: `leak ${HOSTILE} end` }, 1e-30)]
    : [];
  return {
    runId: `cycle-${target}`, target, baseUrl: 'http://127.0.0.1:1', model: 'm', startedAt: at, finishedAt: at, outcome, up: true, capacity: {},
    scenarios: [{ name: 'abort-race', outcome, findings, requests: [], notes: [`note ${HOSTILE}`, ...(outcome === 'inconclusive' ? ['second note', 'third note', 'why: 14 of 29 race windows answered'] : [])], tokens: { sent: 1, billed: 1 }, durationMs: 1 }],
  };
}

describe('the status page in chromium', () => {
  let store: Store;
  let server: ServiceServer;
  let browser: Browser;
  const port = (): string => new URL(server.url).port;

  beforeAll(async () => {
    if (!existsSync(CHROMIUM)) throw new Error(`chromium not found at ${CHROMIUM}: run scripts/setup-test-env.sh (apt-get install chromium) or set KVCANARY_CHROMIUM`);
    const pw = await loadPlaywright();
    const dir = mkdtempSync(path.join(tmpdir(), 'kvc-browser-'));
    store = openStore({ path: path.join(dir, 'kvc.sqlite'), retentionMs: 86_400_000 });
    const at = new Date().toISOString();
    // A dozen healthy replicas recorded first: the leak must still be what the page opens on.
    for (let i = 0; i < 12; i++) store.recordRun(run(`healthy-${i}`, 'pass', at));
    for (const o of ['pass', 'fail', 'inconclusive', 'not-applicable'] as const) store.recordRun(run(`t-${o}`, o, at));
    server = await startServiceServer({ host: '127.0.0.1', port: 0, registry: new Registry(), store });
    browser = await pw.chromium.launch({
      executablePath: CHROMIUM,
      headless: true,
      args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update',
        '--disable-sync', '--host-resolver-rules=MAP rebind.attacker.test 127.0.0.1'],
    });
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    await server?.close();
    store?.close();
  });

  it('renders under its CSP with no console errors; outcomes distinguishable; hostile evidence is text', async () => {
    const page = await browser.newPage();
    const errors: string[] = [];
    page.on('console', (m) => { if (m.type() === 'error' || m.type() === 'warning') errors.push(m.text()); });
    page.on('pageerror', (e) => errors.push(e.message));
    const res = await page.goto(server.url);
    expect(res?.status()).toBe(200);
    expect(errors).toEqual([]);
    // Each outcome has its own badge: different text and a different colour.
    const badges = await page.evaluate<Array<{ cls: string; text: string; bg: string }>>(`
      ['pass', 'fail', 'inconclusive', 'not-applicable'].map((cls) => {
        const el = document.querySelector('section .badge.' + cls);
        return { cls, text: el ? el.textContent.trim() : '', bg: el ? getComputedStyle(el).backgroundColor : '' };
      })`);
    for (const b of badges) expect(b.text, b.cls).not.toBe('');
    expect(new Set(badges.map((b) => b.text)).size).toBe(4);
    expect(new Set(badges.map((b) => b.bg)).size).toBe(4);
    // The hostile evidence is on the page as text, and ran nothing.
    expect(await page.evaluate<unknown>('window.__pwned')).toBeUndefined();
    expect(await page.evaluate<number>('document.querySelectorAll("img, script").length')).toBe(0);
    expect(await page.textContent('body')).toContain('<img src=x onerror=');
  });

  it('opens on the critical finding with what to do, in the first screen; every note is a click away', async () => {
    const page = await browser.newPage();
    await page.setViewportSize({ width: 1280, height: 720 });
    await page.goto(server.url);
    const first = await page.evaluate<{ top: number; text: string }>(`(() => {
      const row = document.querySelector('#attention tbody tr');
      return { top: row ? row.getBoundingClientRect().top : 1e9, text: row ? row.textContent : '' };
    })()`);
    expect(first.top).toBeLessThan(720);
    expect(first.text).toContain('CRITICAL');
    expect(first.text).toContain('t-fail');
    expect(first.text).toContain('What to do:');
    expect(await page.evaluate<string>(`document.querySelector('section[id^="target-"] h2').textContent`)).toMatch(/^t-fail /);
    // The third note is on the page but folded; one click on its summary shows it.
    const notes = '#target-t-inconclusive details';
    expect(await page.isVisible(`${notes} li:nth-child(4)`)).toBe(false);
    await page.click(`${notes} summary`);
    expect(await page.isVisible(`${notes} li:nth-child(4)`)).toBe(true);
    expect(await page.textContent(`${notes} li:nth-child(4)`)).toBe('why: 14 of 29 race windows answered');
  });

  it('refuses a foreign Host (a DNS-rebinding page reading 127.0.0.1)', async () => {
    const page = await browser.newPage();
    const res = await page.goto(`http://rebind.attacker.test:${port()}/api/findings`);
    expect(res?.status()).toBe(421);
    expect(await page.textContent('body')).not.toContain('kvcanary-aaaa');
  });
});
