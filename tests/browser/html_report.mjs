// Opens an onefix HTML report in Debian's headless chromium and says, as one JSON object on
// stdout, what a person would see: the findings shown, console errors, any network request,
// what a click on a flame graph frame and a search did. Saves a screenshot.
//
// usage: node html_report.mjs REPORT.html SCREENSHOT.png [SEARCH]
// The caller (crates/onefix/tests/reports.rs) decides what is right; this only observes.
import { chromium } from 'playwright-core';
import { pathToFileURL } from 'node:url';

const [report, screenshot, search] = process.argv.slice(2);
if (!report || !screenshot) {
  console.error('usage: node html_report.mjs REPORT.html SCREENSHOT.png [SEARCH]');
  process.exit(2);
}

const browser = await chromium.launch({
  executablePath: '/usr/bin/chromium',
  // playwright-core starts chromium headless with a fresh, empty user-data-dir of its own.
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync'],
});
const result = { consoleErrors: [], requests: [], findings: [], click: null, search: null, diff: null };
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.on('console', (msg) => { if (msg.type() === 'error') result.consoleErrors.push(msg.text()); });
  page.on('pageerror', (err) => result.consoleErrors.push(String(err)));
  const url = pathToFileURL(report).href;
  page.on('request', (req) => { if (req.url() !== url) result.requests.push(req.url()); });
  await page.goto(url);
  await page.waitForSelector('body[data-rendered="true"]', { timeout: 10000 });

  result.title = await page.title();
  // A memory recording's curves (RSS, live heap), drawn when the recording has them.
  result.memoryCurves = await page.$$eval('.timeline.memory polyline', (lines) => lines.filter((l) => l.getAttribute('points')).length);
  result.findings = await page.$$eval('#findings .finding', (cards) => cards.map((c) => ({
    loc: c.querySelector('.loc').textContent,
    share: c.querySelector('.share').textContent,
    kind: c.querySelector('.kind').textContent,
    fix: c.querySelector('.fix').textContent,
    gain: c.querySelector('.gain') ? c.querySelector('.gain').textContent : null,
    evidence: c.querySelectorAll('.evidence td').length / 3,
  })));
  result.sections = await page.$$eval('h2', (hs) => hs.map((h) => h.textContent));
  // `onefix compare --html`: the verdict sentences and the lines' change table.
  result.verdicts = await page.$$eval('#verdict .verdict', (ps) => ps.map((p) => p.textContent));
  result.changes = await page.$$eval('#verdict table.changes tr', (rows) => rows.slice(1).map((r) => Array.from(r.cells).map((c) => c.textContent)));
  result.timelineRows = await page.$$eval('.timeline .row', (rows) => rows.length);
  result.snippets = await page.$$eval('.hotline pre span.here', (spans) => spans.map((s) => s.textContent));

  // The first flame graph: click the widest frame that is not already the whole width.
  const flame = page.locator('#flamegraph .flame').first();
  const boxWidth = (await flame.boundingBox()).width;
  const frames = await flame.locator('.frame').evaluateAll((divs) => divs.map((d, i) => ({
    i, name: d.dataset.name, width: d.getBoundingClientRect().width })));
  const target = frames.filter((f) => f.width < boxWidth * 0.9 && f.width > 20).sort((a, b) => b.width - a.width)[0];
  if (target) {
    await flame.locator('.frame').nth(target.i).click();
    const after = await flame.locator('.frame.focus').evaluate((d) => ({ name: d.dataset.name, width: d.getBoundingClientRect().width }));
    const crumbs = await page.locator('#flamegraph .crumbs').first().textContent();
    result.click = { name: target.name, widthBefore: target.width, focused: after.name, widthAfter: after.width, boxWidth, crumbs };
  }
  await page.locator('#flamegraph button', { hasText: 'reset zoom' }).first().click();
  if (search) {
    await page.locator('#flamegraph input[type=search]').first().fill(search);
    result.search = {
      matches: await flame.locator('.frame.match').count(),
      text: await page.locator('#flamegraph .matched').first().textContent(),
    };
    await page.locator('#flamegraph input[type=search]').first().fill('');
  }
  // A report of two recordings also draws their differential graph.
  const diff = page.locator('#diff .flame');
  if (await diff.count()) {
    const frames = diff.locator('.frame');
    result.diff = {
      frames: await frames.count(),
      colours: await frames.evaluateAll((divs) => [...new Set(divs.map((d) => d.style.background))].length),
    };
  }
  await page.screenshot({ path: screenshot, fullPage: true });
} finally {
  await browser.close();
}
console.log(JSON.stringify(result));
