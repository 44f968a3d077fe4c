// web_routes.test.mjs - the playground's routes without a browser: the files
// embedded in the binary (types, ETag and 304, CSP), /web/info, --no-web, and
// --web-root serving a folder without letting a path or a symlink out of it.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { startServer, omni } from '../clients/server.mjs';

const skip = fs.existsSync(omni) ? false : `${omni} is not built`;
const servers = [];
after(async () => { for (const s of servers) await s.stop(); });

async function serve(args) {
  const s = await startServer(args, { model: null });
  servers.push(s);
  return s;
}

// A raw request, for paths fetch would normalise ("..", "%2e").
function raw(port, target) {
  return new Promise((resolve, reject) => {
    const c = net.connect(port, '127.0.0.1', () => {
      c.write(`GET ${target} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nConnection: close\r\n\r\n`);
    });
    let buf = '';
    c.on('data', (d) => { buf += d; });
    c.on('end', () => resolve({ status: Number(buf.split(' ')[1]), text: buf }));
    c.on('error', reject);
  });
}

test('embedded files: types, ETag revalidation, CSP, HEAD', { skip }, async () => {
  const s = await serve([]);
  const index = await fetch(`${s.url}/`);
  assert.equal(index.status, 200);
  assert.equal(index.headers.get('content-type'), 'text/html; charset=utf-8');
  const html = await index.text();
  assert.match(html, /<script type="module" src="\/web\/app.js">/);
  assert.doesNotMatch(html, /<script>|<script [^>]*>[^<]|style=|on(click|load)=/i, 'no inline script or style');
  const csp = index.headers.get('content-security-policy');
  assert.match(csp, /default-src 'self'/);
  assert.match(csp, /frame-ancestors 'none'/);
  assert.equal(index.headers.get('x-content-type-options'), 'nosniff');
  assert.equal(index.headers.get('cache-control'), 'no-cache');

  const types = { 'app.js': 'text/javascript; charset=utf-8', 'app.css': 'text/css; charset=utf-8',
    'icon.svg': 'image/svg+xml', 'markdown.js': 'text/javascript; charset=utf-8',
    'mic-worklet.js': 'text/javascript; charset=utf-8', 'audio.js': 'text/javascript; charset=utf-8' };
  for (const [f, type] of Object.entries(types)) {
    const r = await fetch(`${s.url}/web/${f}`);
    assert.equal(r.status, 200, f);
    assert.equal(r.headers.get('content-type'), type, f);
    const body = await r.arrayBuffer();
    const etag = r.headers.get('etag');
    assert.match(etag, /^"[0-9a-f]{16}"$/);
    const again = await fetch(`${s.url}/web/${f}`, { headers: { 'if-none-match': etag } });
    assert.equal(again.status, 304, `${f} revalidates`);
    assert.equal((await again.arrayBuffer()).byteLength, 0);
    const weak = await fetch(`${s.url}/web/${f}`, { headers: { 'if-none-match': `"x", W/${etag}` } });
    assert.equal(weak.status, 304, 'weak comparison, lists');
    const head = await fetch(`${s.url}/web/${f}`, { method: 'HEAD' });
    assert.equal(head.status, 200);
    assert.equal(Number(head.headers.get('content-length')), body.byteLength, 'HEAD: the GET length');
  }
  const same = await fetch(`${s.url}/web/index.html`);
  assert.equal(same.headers.get('etag'), index.headers.get('etag'));
  await same.arrayBuffer();

  for (const bad of ['/web/nope.js', '/web/.hidden', '/web/a//b', '/web/sub/', '/web/a b']) {
    const r = await fetch(`${s.url}${bad}`);
    assert.equal(r.status, 404, bad);
    assert.match((await r.json()).error.message, /no file|no route/, bad);
  }
  const nul = await raw(s.port, '/web/x%00y');
  assert.ok(nul.status === 400 || nul.status === 404, nul.text);
  const post = await fetch(`${s.url}/`, { method: 'POST', body: '{}', headers: { 'content-type': 'application/json' } });
  assert.equal(post.status, 405);
  await post.arrayBuffer();
});

test('/web/info tells the page what the server has', { skip }, async () => {
  const s = await serve([]);
  const info = await (await fetch(`${s.url}/web/info`)).json();
  assert.deepEqual(info, { key_ok: true, model: null, vision: false, stt: false, vad: false, tts: true });

  const k = await serve(['--api-key', 'sekret', '--no-tts']);
  const page = await fetch(`${k.url}/`);
  assert.equal(page.status, 200, 'the page itself needs no key');
  await page.arrayBuffer();
  assert.deepEqual(await (await fetch(`${k.url}/web/info`)).json(), { key_ok: false });
  const ok = await (await fetch(`${k.url}/web/info`, { headers: { authorization: 'Bearer sekret' } })).json();
  assert.equal(ok.key_ok, true);
  assert.equal(ok.tts, false);
  const models = await fetch(`${k.url}/v1/models`);
  assert.equal(models.status, 401, 'the API still wants the key');
  await models.arrayBuffer();
});

test('--no-web: no playground', { skip }, async () => {
  const s = await serve(['--no-web']);
  for (const p of ['/', '/web/app.js', '/web/info']) {
    const r = await fetch(`${s.url}${p}`);
    assert.equal(r.status, 404, p);
    assert.match((await r.json()).error.message, /--no-web/);
  }
  const h = await fetch(`${s.url}/health`);
  assert.equal(h.status, 200, 'the API is unchanged');
  await h.arrayBuffer();
});

test('--web-root DIR: files from DIR and nothing outside it', { skip }, async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'omni-web-'));
  const outside = fs.mkdtempSync(path.join(os.tmpdir(), 'omni-secret-'));
  fs.writeFileSync(path.join(outside, 'secret.txt'), 'SECRET');
  fs.writeFileSync(path.join(dir, 'index.html'), '<!doctype html><title>mine</title>');
  fs.mkdirSync(path.join(dir, 'sub'));
  fs.writeFileSync(path.join(dir, 'sub', 'x.css'), 'body{}');
  fs.writeFileSync(path.join(dir, '.env'), 'HIDDEN');
  fs.symlinkSync(path.join(outside, 'secret.txt'), path.join(dir, 'link.txt'));
  fs.symlinkSync(outside, path.join(dir, 'linkdir'));
  const s = await serve(['--web-root', dir]);

  const index = await fetch(`${s.url}/`);
  assert.equal(await index.text(), '<!doctype html><title>mine</title>');
  const css = await fetch(`${s.url}/web/sub/x.css`);
  assert.equal(css.headers.get('content-type'), 'text/css; charset=utf-8');
  assert.equal(await css.text(), 'body{}');
  const etag = css.headers.get('etag');
  const again = await fetch(`${s.url}/web/sub/x.css`, { headers: { 'if-none-match': etag } });
  assert.equal(again.status, 304);
  await again.arrayBuffer();
  fs.writeFileSync(path.join(dir, 'sub', 'x.css'), 'body{color:red}');
  const changed = await fetch(`${s.url}/web/sub/x.css`, { headers: { 'if-none-match': etag } });
  assert.equal(changed.status, 200, 'an edited file is served again');
  assert.equal(await changed.text(), 'body{color:red}');

  const refused = {
    '/web/link.txt': 403, '/web/linkdir/secret.txt': 403, '/web/.env': 404, '/web/sub': 403,
    '/web/missing.js': 404, '/web/sub/../../x': 404, '/web/%2e%2e/secret.txt': 404,
    '/web/..%2f..%2fetc%2fpasswd': 404,
  };
  for (const [p, status] of Object.entries(refused)) {
    const r = await raw(s.port, p);
    assert.equal(r.status, status, `${p}: ${r.text.slice(0, 200)}`);
    assert.doesNotMatch(r.text, /SECRET|HIDDEN|root:/, p);
  }
  const dotdot = await raw(s.port, '/web/../../etc/passwd');
  assert.doesNotMatch(dotdot.text, /root:/);
});

test('--web-root that is not a folder: a clear error', { skip }, async () => {
  const { spawnSync } = await import('node:child_process');
  const r = spawnSync(omni, ['serve', '--port', '1', '--web-root', '/nonexistent/dir'], { encoding: 'utf8' });
  assert.notEqual(r.status, 0);
  assert.match(r.stderr, /--web-root '\/nonexistent\/dir'/);
});
