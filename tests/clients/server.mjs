// server.mjs - starts `omniserve serve` for the client tests: a free port on
// 127.0.0.1, the tiny stories260K model (converted from ../shared unless
// OMNI_TEST_MODEL names a GGUF), and helpers to read /metrics.
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
export const root = path.resolve(here, '..', '..');
// OMNI: the binary, relative to the repository root (the Makefile's
// OMNI=build/omniserve) or else to the working directory.
export const omni = (() => {
  const o = process.env.OMNI;
  if (!o) return path.join(root, 'build', 'omniserve');
  const fromRoot = path.resolve(root, o);
  return fs.existsSync(fromRoot) ? fromRoot : path.resolve(o);
})();

let cachedModel;
// Path of a small GGUF, or null (tests then skip) with the reason in modelSkip.
export let modelSkip = '';
export function testModel() {
  if (cachedModel !== undefined) return cachedModel;
  cachedModel = null;
  if (process.env.OMNI_TEST_MODEL) {
    cachedModel = process.env.OMNI_TEST_MODEL;
    return cachedModel;
  }
  if (!fs.existsSync(omni)) {
    modelSkip = `${omni} is not built`;
    return null;
  }
  const built = path.join(root, 'build', 'models', 'stories260K.gguf');
  if (fs.existsSync(built)) return (cachedModel = built);
  const src = path.join(root, '..', 'shared', 'models', 'stories260K');
  if (!fs.existsSync(path.join(src, 'stories260K.bin'))) {
    modelSkip = `no model: ${src} is absent and OMNI_TEST_MODEL is not set`;
    return null;
  }
  const out = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'omni-clients-')), 'stories260K.gguf');
  const py = process.env.PYTHON || 'python3';
  const r = spawnSync(py, [path.join(root, 'tools', 'llama2c_to_gguf'), path.join(src, 'stories260K.bin'),
    path.join(src, 'tok512.bin'), out], { encoding: 'utf8' });
  if (r.status !== 0) {
    modelSkip = `cannot convert stories260K: ${(r.stderr || r.error || '').toString().trim()}`;
    return null;
  }
  return (cachedModel = out);
}

export function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.unref();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Start a server; model: a path, or null for a server without one.
export async function startServer(args = [], { model = testModel(), expectHealth = 200 } = {}) {
  const port = await freePort();
  const argv = ['serve', '--port', String(port), '--threads', '1', '--kv-memory', '16M', ...args];
  if (model) argv.push('-m', model);
  const proc = spawn(omni, argv, { stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  proc.stdout.on('data', (d) => { log += d; });
  proc.stderr.on('data', (d) => { log += d; });
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; ; i++) {
    if (proc.exitCode !== null) throw new Error(`server exited early:\n${log}`);
    try {
      const r = await fetch(`${url}/health`);
      await r.arrayBuffer();
      if (r.status === expectHealth) break;
    } catch { /* not listening yet */ }
    if (i > 200) throw new Error(`server did not become healthy:\n${log}`);
    await sleep(25);
  }
  return {
    url, port, proc, exited,
    log: () => log,
    async stop() {
      if (proc.exitCode === null) proc.kill('SIGTERM');
      return exited;
    },
  };
}

// One gauge or counter value from /metrics (labels as written, e.g. '{route="/health",...}').
export async function metric(url, name, headers = {}) {
  const text = await (await fetch(`${url}/metrics`, { headers })).text();
  const line = text.split('\n').find((l) => l.startsWith(name + ' ') || l.startsWith(name + '{'));
  return line ? Number(line.slice(line.lastIndexOf(' ') + 1)) : undefined;
}

export async function waitFor(fn, what, ms = 5000) {
  const t0 = Date.now();
  for (;;) {
    if (await fn()) return;
    if (Date.now() - t0 > ms) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

// Raw SSE frames of a streamed POST: [{event, data}], comments as {comment}.
export async function rawSSE(url, body, headers = {}) {
  const r = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
  const text = await r.text();
  const frames = [];
  for (const block of text.split('\n\n')) {
    if (!block) continue;
    const f = {};
    for (const line of block.split('\n')) {
      if (line.startsWith(':')) f.comment = line.slice(1).trim();
      else if (line.startsWith('event: ')) f.event = line.slice(7);
      else if (line.startsWith('data: ')) f.data = (f.data ? f.data + '\n' : '') + line.slice(6);
    }
    frames.push(f);
  }
  return { status: r.status, headers: r.headers, frames };
}

// A JSON POST through node:http, for bodies whose upload must be known to be
// complete: { sent: resolves once the whole body is on the socket,
// done: resolves to { status, text, ms } (ms from the end of the upload),
// abort() }.
export function postJSON(url, route, body) {
  let sentAt = 0, settle, fail, markSent;
  const done = new Promise((res, rej) => { settle = res; fail = rej; });
  const sent = new Promise((res) => { markSent = res; });
  const req = http.request(`${url}${route}`, {
    method: 'POST', agent: false,
    headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
  }, (res) => {
    let text = '';
    res.setEncoding('utf8');
    res.on('data', (d) => { text += d; });
    res.on('end', () => settle({ status: res.statusCode, text, ms: performance.now() - sentAt }));
    res.on('error', fail);
  });
  req.on('error', fail);
  req.end(body, () => { sentAt = performance.now(); markSent(); });
  return { sent, done, abort: () => req.destroy() };
}

// One request on a new connection, as a kubelet or load balancer probes
// (a pooled keep-alive socket may be closed under it when the server drains):
// { status, text }.
export function probe(url, route, method = 'GET') {
  return new Promise((resolve, reject) => {
    const req = http.request(`${url}${route}`, { method, agent: false }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { text += d; });
      res.on('end', () => resolve({ status: res.statusCode, text }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}

export const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? (s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2) : NaN;
};
