// speech.test.mjs - speech out: `client.audio.speech.create` of the official
// `openai` package against the built-in espeak-ng voices. Every
// response_format comes back in its container at 24 kHz with a duration that
// fits the text, speed changes the duration, SSE events are well formed, bad
// voices/formats/speeds/inputs are 400 with `param`, and what the server
// says is heard back by the espeak-trained Whisper (round trip through
// /v1/audio/transcriptions; that part skips without ../shared).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import OpenAI, { toFile } from 'openai';
import { startServer, root, omni, rawSSE } from './server.mjs';

const espeak = path.join(root, '..', 'shared', 'models', 'whisper-tiny-espeak');
const haveWhisper = fs.existsSync(path.join(espeak, 'reference.json'));
const skip = !fs.existsSync(omni) ? `${omni} is not built` : false;

let srv, client;
before(async () => {
  if (skip) return;
  const args = haveWhisper
    ? ['--stt-model', path.join(espeak, 'ggml-tiny-espeak-q8_0.bin'), '--stt-threads', '1'] : [];
  srv = await startServer(args, { model: null });
  client = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'unused', maxRetries: 0 });
});
after(async () => {
  if (!srv) return;
  const { code } = await srv.stop();
  assert.equal(code, 0, srv.log());
});

const TEXT = 'The weather is nice today. We will walk to the park and play.';

async function speak(body) {
  const r = await client.audio.speech.create({ model: 'tts-1', voice: 'alloy', input: TEXT, ...body });
  return { type: r.headers.get('content-type'), bytes: Buffer.from(await r.arrayBuffer()) };
}

// Seconds of 24 kHz s16le mono.
const pcmSeconds = (b) => b.length / 2 / 24000;

// The data chunk of a WAV and its sample rate (the streamed WAV's sizes read
// "unknown": 0xFFFFFFFF, so the data runs to the end).
function wavInfo(b) {
  assert.equal(b.toString('latin1', 0, 4), 'RIFF');
  assert.equal(b.toString('latin1', 8, 12), 'WAVE');
  let off = 12, rate = 0;
  while (off + 8 <= b.length) {
    const id = b.toString('latin1', off, off + 4), size = b.readUInt32LE(off + 4);
    if (id === 'fmt ') rate = b.readUInt32LE(off + 12);
    if (id === 'data') {
      const end = size === 0xffffffff ? b.length : Math.min(b.length, off + 8 + size);
      return { rate, seconds: (end - off - 8) / 2 / rate, pcm: b.subarray(off + 8, end) };
    }
    off += 8 + size;
  }
  throw new Error('no data chunk');
}

test('every response_format in its container, at 24 kHz', { skip }, async () => {
  const pcm = await speak({ response_format: 'pcm' });
  assert.equal(pcm.type, 'audio/pcm');
  const secs = pcmSeconds(pcm.bytes);
  assert.ok(secs > 2.5 && secs < 8, `pcm: ${secs} s`);  // ~13 words at espeak's 175 wpm
  const wav = await speak({ response_format: 'wav' });
  assert.equal(wav.type, 'audio/wav');
  const w = wavInfo(wav.bytes);
  assert.equal(w.rate, 24000);
  assert.ok(Math.abs(w.seconds - secs) < 0.05, `wav ${w.seconds} s vs pcm ${secs} s`);
  const magic = {
    mp3: (b) => b.toString('latin1', 0, 3) === 'ID3' || (b[0] === 0xff && (b[1] & 0xe0) === 0xe0),
    opus: (b) => b.toString('latin1', 0, 4) === 'OggS' && b.includes('OpusHead'),
    aac: (b) => b[0] === 0xff && (b[1] & 0xf6) === 0xf0,   // ADTS sync word
    flac: (b) => b.toString('latin1', 0, 4) === 'fLaC',
  };
  const mime = { mp3: 'audio/mpeg', opus: 'audio/ogg', aac: 'audio/aac', flac: 'audio/flac' };
  for (const f of Object.keys(magic)) {
    const r = await speak({ response_format: f });
    assert.equal(r.type, mime[f], f);
    assert.ok(magic[f](r.bytes), `${f}: starts with ${r.bytes.subarray(0, 8).toString('hex')}`);
    assert.ok(r.bytes.length > 2000, `${f}: ${r.bytes.length} bytes`);
  }
  // The default format is mp3, as OpenAI's.
  const d = await client.audio.speech.create({ model: 'tts-1', voice: 'echo', input: 'Hello.' });
  assert.equal(d.headers.get('content-type'), 'audio/mpeg');
});

test('speed changes the duration; voices differ', { skip }, async () => {
  const normal = pcmSeconds((await speak({ response_format: 'pcm' })).bytes);
  const fast = pcmSeconds((await speak({ response_format: 'pcm', speed: 2 })).bytes);
  const slow = pcmSeconds((await speak({ response_format: 'pcm', speed: 0.5 })).bytes);
  assert.ok(fast > normal * 0.4 && fast < normal * 0.65, `speed 2: ${fast} s vs ${normal} s`);
  assert.ok(slow > normal * 1.6 && slow < normal * 2.5, `speed 0.5: ${slow} s vs ${normal} s`);
  const a = (await speak({ response_format: 'pcm', voice: 'onyx' })).bytes;
  const b = (await speak({ response_format: 'pcm', voice: 'shimmer' })).bytes;
  assert.notDeepEqual(a.subarray(0, 20000), b.subarray(0, 20000));
  // Voice as an object, and an espeak-ng language with a variant.
  const o = await speak({ response_format: 'pcm', voice: { id: 'de+f2' }, input: 'Guten Morgen.' });
  assert.ok(pcmSeconds(o.bytes) > 0.5);
});

test('SSE: speech.audio.delta events, then speech.audio.done with usage', { skip }, async () => {
  const { status, headers, frames } = await rawSSE(`${srv.url}/v1/audio/speech`,
    { model: 'tts-1', voice: 'nova', input: TEXT, response_format: 'pcm', stream_format: 'sse' });
  assert.equal(status, 200);
  assert.match(headers.get('content-type'), /text\/event-stream/);
  const events = frames.filter((f) => f.data).map((f) => JSON.parse(f.data));
  const deltas = events.filter((e) => e.type === 'speech.audio.delta');
  assert.ok(deltas.length >= 2, `${deltas.length} deltas`);
  const audio = Buffer.concat(deltas.map((e) => Buffer.from(e.audio, 'base64')));
  const secs = pcmSeconds(audio);
  assert.ok(secs > 2.5 && secs < 8, `${secs} s`);
  const done = events.at(-1);
  assert.equal(done.type, 'speech.audio.done');
  assert.ok(done.usage.input_tokens > 0 && done.usage.output_tokens > 0);
  assert.equal(done.usage.total_tokens, done.usage.input_tokens + done.usage.output_tokens);
  assert.equal(events.length, deltas.length + 1);
});

test('bad requests are 400 naming the parameter; voices are listed', { skip }, async () => {
  const cases = [
    [{ voice: 'no-such-voice' }, 'voice'],
    [{ response_format: 'ogg' }, 'response_format'],
    [{ speed: 4.5 }, 'speed'],
    [{ speed: 'fast' }, 'speed'],
    [{ input: 'x'.repeat(4097) }, 'input'],
    [{ input: '' }, 'input'],
    [{ stream_format: 'chunks' }, 'stream_format'],
  ];
  for (const [body, param] of cases) {
    await assert.rejects(speak(body), (e) => {
      assert.equal(e.status, 400, JSON.stringify(body));
      assert.equal(e.param, param, JSON.stringify(body));
      return true;
    });
  }
  const r = await fetch(`${srv.url}/v1/audio/voices`);
  const list = await r.json();
  const ids = list.data.map((v) => v.id);
  for (const v of ['alloy', 'ash', 'ballad', 'coral', 'echo', 'fable', 'nova', 'onyx', 'sage', 'shimmer', 'verse'])
    assert.ok(ids.includes(v), v);
  assert.ok(ids.includes('de') && ids.includes('en-us'));
  assert.ok(list.data.every((v) => v.engine === 'espeak-ng' && v.language));
});

test('a client that leaves mid-speech does not stop the server', { skip }, async () => {
  const long = Array.from({ length: 40 }, (_, i) => `This is sentence number ${i + 1} of a long text.`).join(' ');
  for (let i = 0; i < 4; i++) {
    const ac = new AbortController();
    const r = await fetch(`${srv.url}/v1/audio/speech`, {
      method: 'POST', signal: ac.signal, headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ input: long, voice: 'alloy', response_format: 'wav' }),
    });
    const reader = r.body.getReader();
    await reader.read();
    ac.abort();
  }
  const ok = await speak({ response_format: 'pcm', input: 'Still here.' });
  assert.ok(pcmSeconds(ok.bytes) > 0.3);
});

// Word error rate of what the espeak Whisper hears against what was said.
function wer(ref, hyp) {
  const words = (s) => s.toLowerCase().replace(/[^a-z0-9' ]/g, ' ').split(/\s+/).filter(Boolean);
  const r = words(ref), h = words(hyp);
  const d = Array.from({ length: r.length + 1 }, (_, i) => [i, ...Array(h.length).fill(0)]);
  for (let j = 1; j <= h.length; j++) d[0][j] = j;
  for (let i = 1; i <= r.length; i++)
    for (let j = 1; j <= h.length; j++)
      d[i][j] = Math.min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (r[i - 1] === h[j - 1] ? 0 : 1));
  return { errors: d[r.length][h.length], words: r.length };
}

test('round trip: /v1/audio/speech heard back by /v1/audio/transcriptions', { skip: skip || (!haveWhisper && 'no ../shared Whisper') }, async () => {
  const ref = JSON.parse(fs.readFileSync(path.join(espeak, 'reference.json'), 'utf8')).tests;
  const voices = ['alloy', 'echo', 'onyx', 'nova', 'ash', 'verse'];
  let errors = 0, words = 0;
  for (let i = 0; i < 6; i++) {
    const text = ref[i * 4].text.trim();
    const wav = (await speak({ response_format: 'wav', voice: voices[i], input: text })).bytes;
    const t = await client.audio.transcriptions.create({ model: 'whisper-1', file: await toFile(wav, 'speech.wav') });
    const w = wer(text, t.text);
    errors += w.errors;
    words += w.words;
  }
  assert.ok(errors / words <= 0.35, `WER ${(100 * errors / words).toFixed(1)}% (${errors}/${words})`);
});
