// server.mjs - starts `omniserve serve` for the client tests: a free port on
// 127.0.0.1, the tiny stories260K model (converted from ../shared unless
// OMNI_TEST_MODEL names a GGUF), and helpers to read /metrics.
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
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
