// outetts.test.mjs - neural voices (OuteTTS 1.0 + the DAC codec) through the
// official `openai` package: `serve --tts-model --tts-codec --voices-dir`
// with a tiny random-weight model with the OuteTTS tokens and a tiny DAC
// (tools/random_outetts.py, tools/random_dac.py --shape tiny-1024; made here
// with $PYTHON and numpy). The speaker files of the voices directory are
// listed beside espeak's voices; speech comes back as valid WAV/PCM at
// 24 kHz, streamed or not, whose length is what whole code frames decode to
// (the tiny codec: 40 * frames - 4 samples per sentence); SSE events are
// well formed; an unknown voice is a 400.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import OpenAI from 'openai';
import { startServer, root, omni, rawSSE } from './server.mjs';

const python = process.env.PYTHON || 'python3';
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'outetts-'));
const lm = path.join(tmp, 'lm.gguf'), codec = path.join(tmp, 'dac.gguf');
const voices = path.join(tmp, 'voices');

function make() {
  const a = spawnSync(python, [path.join(root, 'tools', 'random_outetts.py'), '-o', lm], { encoding: 'utf8' });
  const b = spawnSync(python, [path.join(root, 'tools', 'random_dac.py'), '--shape', 'tiny-1024', '-o', codec],
    { encoding: 'utf8' });
  if (a.status !== 0 || b.status !== 0) return `cannot make the tiny models: ${a.stderr}${b.stderr}`;
  fs.mkdirSync(voices);
  fs.copyFileSync(path.join(root, 'tests', 'fixtures', 'outetts', 'speaker_tiny.json'), path.join(voices, 'alice.json'));
  return false;
}

const skip = !fs.existsSync(omni) ? `${omni} is not built` : make();

let srv, client;
before(async () => {
  if (skip) return;
  srv = await startServer(['--tts-model', lm, '--tts-codec', codec, '--voices-dir', voices, '--threads', '2'],
    { model: null });
  client = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  // the loader adds the voices after the server is up
  for (let i = 0; i < 200; i++) {
    const r = await fetch(`${srv.url}/v1/audio/voices`);
    const v = await r.json();
    if ((v.voices || v.data || []).some((x) => x.id === 'alice')) break;
    await new Promise((res) => setTimeout(res, 50));
  }
});
after(async () => {
  if (srv) {
    const { code } = await srv.stop();
    assert.equal(code, 0, srv.log());
  }
  fs.rmSync(tmp, { recursive: true, force: true });
});

// samples of one sentence: 0 or 40 * frames - 4 (the tiny codec's hop 40, its odd stride)
const wholeFrames = (n) => n === 0 || (n + 4) % 40 === 0;

function wavData(b) {
  assert.equal(b.toString('latin1', 0, 4), 'RIFF');
  let off = 12, rate = 0;
  while (off + 8 <= b.length) {
    const id = b.toString('latin1', off, off + 4), size = b.readUInt32LE(off + 4);
    if (id === 'fmt ') rate = b.readUInt32LE(off + 12);
    if (id === 'data') {
      const end = size === 0xffffffff ? b.length : Math.min(b.length, off + 8 + size);
      return { rate, samples: (end - off - 8) / 2 };
    }
    off += 8 + size;
  }
  throw new Error('no data chunk');
}

test('the speaker files are voices beside espeak', { skip }, async () => {
  const v = await (await fetch(`${srv.url}/v1/audio/voices`)).json();
  const list = v.voices || v.data;
  const alice = list.find((x) => x.id === 'alice'), own = list.find((x) => x.id === 'outetts');
  assert.ok(alice && own, JSON.stringify(list.slice(-3)));
  assert.equal(alice.engine, 'outetts');
  assert.equal(alice.sample_rate, 24000);
  assert.ok(list.some((x) => x.id === 'alloy'), 'espeak voices still listed');
});

test('wav and pcm, whole or streamed: 24 kHz, whole code frames', { skip }, async () => {
  let total = 0;
  for (const body of [{ response_format: 'wav' }, { response_format: 'pcm' }, { response_format: 'wav', stream_format: 'audio' }]) {
    const r = await client.audio.speech.create({ model: 'tts-1', voice: 'alice', input: 'Good morning to you.', ...body });
    const bytes = Buffer.from(await r.arrayBuffer());
    const n = body.response_format === 'pcm' ? bytes.length / 2 : wavData(bytes).samples;
    if (body.response_format === 'wav') assert.equal(wavData(bytes).rate, 24000);
    assert.ok(Number.isInteger(n) && wholeFrames(n), `${JSON.stringify(body)}: ${n} samples`);
    total += n;
  }
  assert.ok(total > 0, 'the tiny model wrote no code pair at all');   // it favours code tokens
});

test('sse: deltas then done', { skip }, async () => {
  const r = await rawSSE(`${srv.url}/v1/audio/speech`,
    { model: 'tts-1', voice: 'outetts', input: 'Hi.', stream_format: 'sse', response_format: 'pcm' });
  assert.equal(r.status, 200);
  const events = r.frames.filter((f) => f.data).map((f) => JSON.parse(f.data));
  assert.equal(events.at(-1).type, 'speech.audio.done');
  let bytes = 0;
  for (const e of events.slice(0, -1)) {
    assert.equal(e.type, 'speech.audio.delta');
    bytes += Buffer.from(e.audio, 'base64').length;
  }
  assert.ok(wholeFrames(bytes / 2), `${bytes / 2} samples`);
});

test('an unknown voice is a 400', { skip }, async () => {
  const r = await fetch(`${srv.url}/v1/audio/speech`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'tts-1', voice: 'bob', input: 'Hi.' }),
  });
  assert.equal(r.status, 400);
});
