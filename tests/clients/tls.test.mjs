// tls.test.mjs - `serve --tls-cert --tls-key`: HTTPS and WSS on one port,
// driven by fetch, the official openai SDK (a chat completion over https)
// and its OpenAIRealtimeWebSocket (wss:, with the API key sent as the
// `openai-insecure-api-key.KEY` subprotocol, since a WebSocket cannot carry
// an Authorization header). The certificate is self-signed and made with the
// openssl command at test time (skips without it). WebSocket clients trust it
// as their CA; fetch (undici, no CA option) runs with
// NODE_TLS_REJECT_UNAUTHORIZED=0. The chat and realtime tests need the
// stories260K model (server.mjs; skip without ../shared).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { OpenAIRealtimeWebSocket } from 'openai/realtime/websocket';
import WebSocket from 'ws';
import { omni, testModel, modelSkip, freePort } from './server.mjs';

const KEY = 'sk-tls-test';
const haveOpenssl = spawnSync('openssl', ['version']).status === 0;
const skip = !haveOpenssl ? 'the openssl command is absent (it makes the test certificate)'
  : !fs.existsSync(omni) ? `${omni} is not built` : false;
const modelSkipped = () => skip || (!testModel() ? modelSkip : false);

let dir, cert, key, ca, srv;

// The server over TLS; resolves once GET /health answers over https.
async function startTls(args = []) {
  const port = await freePort();
  const argv = ['serve', '--port', String(port), '--threads', '1', '--kv-memory', '16M',
    '--tls-cert', cert, '--tls-key', key, ...args];
  const proc = spawn(omni, argv, { stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  proc.stdout.on('data', (d) => { log += d; });
  proc.stderr.on('data', (d) => { log += d; });
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  const url = `https://127.0.0.1:${port}`;
  for (let i = 0; ; i++) {
    if (proc.exitCode !== null) throw new Error(`server exited early:\n${log}`);
    try {
      const r = await fetch(`${url}/health`);
      await r.arrayBuffer();
      if (r.status === 200) break;
    } catch { /* not listening yet */ }
    if (i > 400) throw new Error(`server did not become healthy:\n${log}`);
    await new Promise((r) => setTimeout(r, 25));
  }
  return { url, port, proc, exited, log: () => log,
    stop() { if (proc.exitCode === null) proc.kill('SIGTERM'); return exited; } };
}

before(async () => {
  if (skip) return;
  process.env.NODE_TLS_REJECT_UNAUTHORIZED = '0';   // fetch only; ws clients pass the CA
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'omni-tls-'));
  cert = path.join(dir, 'cert.pem');
  key = path.join(dir, 'key.pem');
  const r = spawnSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1',
    '-nodes', '-days', '2', '-subj', '/CN=localhost', '-addext', 'subjectAltName=DNS:localhost,IP:127.0.0.1',
    '-keyout', key, '-out', cert], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  ca = fs.readFileSync(cert);
  const model = testModel();
  srv = await startTls(['--api-key', KEY, ...(model ? ['-m', model] : [])]);
});

after(async () => {
  if (srv) {
    const { code } = await srv.stop();
    assert.equal(code, 0, srv.log().slice(-4000));
  }
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

test('https: /health over TLS; plain http on the same port gets no answer', { skip }, async () => {
  const r = await fetch(`${srv.url}/health`);
  assert.equal(r.status, 200);
  await r.arrayBuffer();
  await assert.rejects(fetch(`http://127.0.0.1:${srv.port}/health`));
  assert.match(srv.log(), /listening on https:\/\//);
});

test('startup errors name the file: missing certificate, key of another certificate', { skip }, async () => {
  const run = (args) => spawnSync(omni, ['serve', '--port', '1', ...args], { encoding: 'utf8' });
  const missing = path.join(dir, 'missing.pem');
  let r = run(['--tls-cert', missing, '--tls-key', key]);
  assert.notEqual(r.status, 0);
  assert.ok(r.stderr.includes(missing), r.stderr);
  const other = path.join(dir, 'other.pem');
  assert.equal(spawnSync('openssl', ['genpkey', '-algorithm', 'EC', '-pkeyopt', 'ec_paramgen_curve:prime256v1',
    '-out', other]).status, 0);
  r = run(['--tls-cert', cert, '--tls-key', other]);
  assert.notEqual(r.status, 0);
  assert.ok(r.stderr.includes(other), r.stderr);
  r = run(['--tls-cert', cert]);
  assert.equal(r.status, 2);
  assert.match(r.stderr, /--tls-cert and --tls-key go together/);
});

test('the official SDK: a chat completion over https', { skip: modelSkipped() }, async () => {
  const client = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: KEY, maxRetries: 0 });
  const c = await client.chat.completions.create({ model: 'stories260K', max_tokens: 8,
    messages: [{ role: 'user', content: 'Once upon a time' }] });
  assert.equal(c.object, 'chat.completion');
  assert.equal(typeof c.choices[0].message.content, 'string');
  const bad = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => e.status === 401);
});

test('wss: the key as a subprotocol, only "realtime" echoed; a wrong key gets 401', { skip: modelSkipped() }, async () => {
  const url = `wss://127.0.0.1:${srv.port}/v1/realtime`;
  const ws = new WebSocket(url, ['realtime', `openai-insecure-api-key.${KEY}`], { ca });
  const created = await new Promise((resolve, reject) => {
    ws.on('message', (d) => resolve(JSON.parse(d.toString())));
    ws.on('error', reject);
  });
  assert.equal(ws.protocol, 'realtime');
  assert.equal(created.type, 'session.created');
  ws.close();
  const status = await new Promise((resolve, reject) => {
    const w = new WebSocket(url, ['realtime', 'openai-insecure-api-key.wrong'], { ca });
    w.on('unexpected-response', (req, res) => { resolve(res.statusCode); req.destroy(); });
    w.on('open', () => reject(new Error('a wrong key was accepted')));
    w.on('error', () => {});
  });
  assert.equal(status, 401);
});

test('the official SDK: OpenAIRealtimeWebSocket over wss (apiKey, no URL rewriting)', { skip: modelSkipped() }, async () => {
  // The SDK opens `new WebSocket(url, protocols)` on the global; this one
  // is `ws` trusting the test certificate.
  const saved = globalThis.WebSocket;
  globalThis.WebSocket = class extends WebSocket {
    constructor(u, protocols) { super(u, protocols, { ca }); }
  };
  try {
    const client = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: KEY, maxRetries: 0 });
    let seenURL;
    const rt = new OpenAIRealtimeWebSocket({ model: 'stories260K', onURL: (u) => { seenURL = u.toString(); } }, client);
    assert.match(seenURL, /^wss:\/\/127\.0\.0\.1:\d+\/v1\/realtime\?model=stories260K$/);
    const seen = [];
    const done = new Promise((resolve, reject) => {
      rt.on('error', (e) => reject(new Error(JSON.stringify(e.error ?? e.message))));
      rt.on('event', (e) => seen.push(e.type));
      rt.on('session.created', () => {
        rt.send({ type: 'session.update', session: { type: 'realtime', output_modalities: ['text'], max_output_tokens: 12 } });
      });
      rt.on('session.updated', () => {
        rt.send({ type: 'conversation.item.create', item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Hello!' }] } });
        rt.send({ type: 'response.create' });
      });
      rt.on('response.done', resolve);
    });
    const d = await done;
    rt.close();
    assert.equal(d.response.object, 'realtime.response');
    assert.ok(seen.includes('response.output_text.delta'), seen.join(','));
  } finally {
    globalThis.WebSocket = saved;
  }
});
