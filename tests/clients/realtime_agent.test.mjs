// realtime_agent.test.mjs - Realtime conversations (the voice agent) on
// GET /v1/realtime without intent: stories260K as the chat model, the
// espeak-trained Whisper and Silero VAD from ../shared hearing the user,
// espeak-ng speaking the replies. Raw `ws` clients speak the GA and beta
// shapes; the official SDK's OpenAIRealtimeWebSocket drives one session
// (over ws://: the SDK always builds a wss: URL, its onURL hook turns it
// back, since the server has no TLS). Assertions follow event order, never
// timing; the end-of-speech -> first audio delta times are only logged.
// Skips without ../shared.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';
import { OpenAIRealtimeWebSocket } from 'openai/realtime/websocket';
import WebSocket from 'ws';
import { startServer, root, omni, testModel, modelSkip, metric, waitFor } from './server.mjs';

const shared = path.join(root, '..', 'shared');
const espeak = path.join(shared, 'models', 'whisper-tiny-espeak');
const vadModel = path.join(shared, 'models', 'silero-vad', 'silero-v6.2.0-ggml.bin');
const kitchen = path.join(shared, 'audio', 'turn-on-the-kitchen-lights.wav');
const weather = path.join(shared, 'audio', 'what-is-the-weather-like-today.wav');
const skip = !fs.existsSync(path.join(espeak, 'reference.json')) ? `${espeak} is absent`
  : !fs.existsSync(omni) ? `${omni} is not built` : !testModel() ? modelSkip : false;

let srv, client;
before(async () => {
  if (skip) return;
  srv = await startServer(['--stt-model', path.join(espeak, 'ggml-tiny-espeak-q8_0.bin'),
    '--stt-threads', '1', '--stt-workers', '2', '--vad-model', vadModel]);
  client = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'unused', maxRetries: 0 });
});
after(async () => {
  if (!srv) return;
  const { code } = await srv.stop();
  assert.equal(code, 0, srv.log().slice(-4000));
});

function wavPcm(file) {
  const b = fs.readFileSync(file);
  let off = 12;
  while (off + 8 <= b.length) {
    const id = b.toString('ascii', off, off + 4), len = b.readUInt32LE(off + 4);
    if (id === 'data') return b.subarray(off + 8, off + 8 + len);
    off += 8 + len + (len & 1);
  }
  throw new Error(`no data chunk in ${file}`);
}

function wavOf(pcm, rate) {
  const h = Buffer.alloc(44);
  h.write('RIFF', 0); h.writeUInt32LE(36 + pcm.length, 4); h.write('WAVE', 8); h.write('fmt ', 12);
  h.writeUInt32LE(16, 16); h.writeUInt16LE(1, 20); h.writeUInt16LE(1, 22); h.writeUInt32LE(rate, 24);
  h.writeUInt32LE(rate * 2, 28); h.writeUInt16LE(2, 32); h.writeUInt16LE(16, 34); h.write('data', 36);
  h.writeUInt32LE(pcm.length, 40);
  return Buffer.concat([h, pcm]);
}

// A raw client: every event in order (with its arrival time), and next(type)
// taking the next one of that type not taken yet.
function open(url, { query = '', headers = {} } = {}) {
  const ws = new WebSocket(`${url.replace('http', 'ws')}/v1/realtime${query}`, { headers });
  const all = [], taken = new Set(), waiters = [];
  const pump = () => {
    for (const w of [...waiters]) {
      const i = all.findIndex((e, k) => !taken.has(k) && w.match(e));
      if (i >= 0) { taken.add(i); waiters.splice(waiters.indexOf(w), 1); w.resolve(all[i]); }
    }
  };
  ws.on('message', (d) => { const e = JSON.parse(d.toString()); e._t = performance.now(); all.push(e); pump(); });
  const closed = new Promise((resolve) => ws.on('close', resolve));
  const opened = new Promise((resolve, reject) => { ws.on('open', resolve); ws.on('error', reject); });
  return {
    ws, all, closed, opened,
    send: (o) => ws.send(JSON.stringify(o)),
    next(match, ms = 60000) {
      const m = typeof match === 'string' ? (e) => e.type === match : match;
      return new Promise((resolve, reject) => {
        const w = { match: m, resolve };
        waiters.push(w);
        pump();
        setTimeout(() => reject(new Error(`no ${typeof match === 'string' ? match : 'matching event'}; got ${all.map((e) => e.type).join(',')}`)), ms).unref();
      });
    },
    types: () => all.map((e) => e.type),
    close: () => { ws.close(); return closed; },
  };
}

// Appends pcm (16 kHz) in 100 ms chunks, then silence for the VAD to end the
// turn; all at once, or paced at real time (resolves after the last chunk).
async function speak(s, pcm, silenceMs = 1000, { realtime = false } = {}) {
  const all = Buffer.concat([pcm, Buffer.alloc(32 * silenceMs)]);
  for (let at = 0; at < all.length; at += 3200) {
    s.send({ type: 'input_audio_buffer.append', audio: all.subarray(at, at + 3200).toString('base64') });
    if (realtime) await new Promise((r) => setTimeout(r, 100));
  }
}

const gaSession = (extra = {}) => ({ type: 'session.update', session: {
  type: 'realtime', instructions: 'You tell short stories.', max_output_tokens: 40,
  audio: { input: { format: { type: 'audio/pcm', rate: 16000 }, transcription: { model: 'whisper-1', language: 'en' },
    turn_detection: { type: 'server_vad', threshold: 0.5, silence_duration_ms: 200, create_response: true, interrupt_response: true } },
  output: { format: { type: 'audio/pcm', rate: 24000 }, voice: 'alloy' } }, ...extra } });

// Collects one response's events: text, audio bytes, transcript, the done.
async function response(s) {
  const created = await s.next('response.created');
  const id = created.response.id;
  const done = await s.next((e) => e.type === 'response.done' && e.response.id === id, 120000);
  const evs = s.all.filter((e) => e.response_id === id);
  const audio = Buffer.concat(evs.filter((e) => e.type === 'response.output_audio.delta' || e.type === 'response.audio.delta')
    .map((e) => Buffer.from(e.delta, 'base64')));
  const cat = (t) => evs.filter((e) => t.includes(e.type)).map((e) => e.delta).join('');
  return { created, done, evs, audio,
    text: cat(['response.output_text.delta', 'response.text.delta']),
    transcript: cat(['response.output_audio_transcript.delta', 'response.audio_transcript.delta']) };
}

const words = (s) => s.toLowerCase().replace(/[^a-z' ]/g, ' ').split(/\s+/).filter(Boolean);

// Log energy of 20 ms frames of pcm16 at 24 kHz.
function loudness(pcm) {
  const n = pcm.length >> 1, fr = 480, out = [];
  for (let f = 0; f + fr <= n; f += fr) {
    let e = 0;
    for (let i = f; i < f + fr; i++) e += pcm.readInt16LE(2 * i) ** 2;
    out.push(Math.log10(e / fr + 100));
  }
  return out;
}

function pearson(a, b) {
  const n = a.length, ma = a.reduce((s, v) => s + v, 0) / n, mb = b.reduce((s, v) => s + v, 0) / n;
  let ab = 0, aa = 0, bb = 0;
  for (let i = 0; i < n; i++) { ab += (a[i] - ma) * (b[i] - mb); aa += (a[i] - ma) ** 2; bb += (b[i] - mb) ** 2; }
  return aa && bb ? ab / Math.sqrt(aa * bb) : -1;
}

// How well contour a follows contour b: each second of a is correlated with
// b at the best shift within 300 ms (the two drift apart a little as the
// synthesizer's timing jitters), and the correlations are averaged.
function contourMatch(a, b, seg = 50, maxShift = 15) {
  const cs = [];
  for (let s = 0; s + seg / 2 < a.length; s += seg) {
    const x = a.slice(s, s + seg);
    let best = -1;
    for (let d = -maxShift; d <= maxShift; d++)
      if (s + d >= 0 && s + d + x.length <= b.length) best = Math.max(best, pearson(x, b.slice(s + d, s + d + x.length)));
    cs.push(best);
  }
  return cs.reduce((t, v) => t + v, 0) / cs.length;
}

test('text-only conversation: items, response events, history from the prefix cache', { skip }, async () => {
  const s = open(srv.url);
  const created = await s.next('session.created');
  assert.equal(created.session.type, 'realtime');
  assert.equal(created.session.object, 'realtime.session');
  s.send({ type: 'session.update', session: { type: 'realtime', output_modalities: ['text'], max_output_tokens: 24,
    instructions: 'You are a storyteller.', audio: { input: { turn_detection: null } } } });
  const up = await s.next('session.updated');
  assert.deepEqual(up.session.output_modalities, ['text']);
  assert.equal(up.session.audio.input.turn_detection, null);
  const hits0 = await metric(srv.url, 'omniserve_prefix_cache_hit_tokens_total');
  const turns = [];
  for (const say of ['Once upon a time there was a little girl.', 'What did she do next?', 'And then?']) {
    s.send({ type: 'conversation.item.create', item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: say }] } });
    const added = await s.next((e) => e.type === 'conversation.item.added' && e.item.role === 'user');
    assert.equal(added.item.content[0].text, say);
    await s.next((e) => e.type === 'conversation.item.done' && e.item.id === added.item.id);
    s.send({ type: 'response.create', event_id: 'c_resp' });
    const r = await response(s);
    const order = ['response.created', 'response.output_item.added', 'response.content_part.added',
      'response.output_text.delta', 'response.output_text.done', 'response.content_part.done',
      'response.output_item.done', 'response.done'];
    const seq = s.all.filter((e) => order.includes(e.type) && (e.response_id === r.created.response.id || e.response?.id === r.created.response.id)).map((e) => e.type);
    assert.deepEqual([...new Set(seq)], order, seq.join(','));
    assert.equal(r.done.response.status === 'completed' || r.done.response.status === 'incomplete', true, r.done.response.status);
    assert.equal(r.done.response.output[0].content[0].type, 'output_text');
    assert.equal(r.done.response.output[0].content[0].text, r.text);
    assert.ok(r.text.length > 0);
    assert.ok(r.done.response.usage.output_tokens > 0 && r.done.response.usage.input_tokens > 0);
    assert.equal(r.audio.length, 0);
    turns.push(r.done.response.usage);
  }
  // turn N reuses turn N-1's prompt from the engine's prefix cache
  for (const u of turns.slice(1)) assert.ok(u.input_token_details.cached_tokens >= 16, JSON.stringify(u));
  const hits1 = await metric(srv.url, 'omniserve_prefix_cache_hit_tokens_total');
  if (hits0 !== undefined) assert.ok(hits1 > hits0, `prefix-cache hit tokens ${hits0} -> ${hits1}`);
  console.log(`# cached prompt tokens per turn: ${turns.map((u) => `${u.input_token_details.cached_tokens}/${u.input_tokens}`).join(', ')}`);
  await s.close();
});

test('a spoken turn gets a spoken answer; its audio says its transcript', { skip }, async () => {
  const s = open(srv.url);
  await s.next('session.created');
  s.send(gaSession());
  await s.next('session.updated');
  const t0 = performance.now();
  const spoken = speak(s, wavPcm(kitchen), 1000, { realtime: true });
  const started = await s.next('input_audio_buffer.speech_started');
  const stopped = await s.next('input_audio_buffer.speech_stopped');
  const committed = await s.next('input_audio_buffer.committed');
  assert.equal(committed.item_id, started.item_id);
  const user = await s.next((e) => e.type === 'conversation.item.added' && e.item.role === 'user');
  assert.equal(user.item.content[0].type, 'input_audio');
  const heard = await s.next('conversation.item.input_audio_transcription.completed');
  assert.equal(heard.transcript, 'turn on the kitchen lights.');
  const r = await response(s);
  assert.equal(r.done.response.status === 'completed' || r.done.response.status === 'incomplete', true);
  const first = r.evs.find((e) => e.type === 'response.output_audio.delta');
  assert.ok(first, r.evs.map((e) => e.type).join(','));
  // the clip (its speech to its last sample) went out at real time from t0
  const clipMs = wavPcm(kitchen).length / 32;
  const at = (e) => `${(e._t - stopped._t).toFixed(0)}`;
  const firstText = r.evs.find((e) => e.type === 'response.output_audio_transcript.delta');
  console.log(`# end of speech -> first audio delta: ${at(first)} ms after speech_stopped, ${(first._t - t0 - clipMs).toFixed(0)} ms after the clip's last sample was sent (transcript at ${at(heard)}, response.created ${at(r.created)}, first text ${at(firstText)} ms)`);
  await spoken;
  const order = ['response.output_item.added', 'response.content_part.added', 'response.output_audio_transcript.delta',
    'response.output_audio.delta', 'response.output_audio.done', 'response.output_audio_transcript.done',
    'response.content_part.done', 'response.output_item.done'];
  const types = r.evs.map((e) => e.type);
  for (const t of order) assert.ok(types.includes(t), `${t} in ${types.join(',')}`);
  assert.ok(types.indexOf('response.output_audio.done') > types.lastIndexOf('response.output_audio.delta'));
  assert.ok(s.types().includes('output_audio_buffer.started'));
  const tdone = r.evs.find((e) => e.type === 'response.output_audio_transcript.done');
  assert.equal(tdone.transcript, r.transcript);
  assert.equal(r.audio.length % 2, 0);
  // pcm16 at 24 kHz: the transcript spoken. espeak-ng carries state from
  // one utterance to the next (its pitch and wave phase: the same text never
  // gives the same samples twice), and stories260K babbles words that the
  // espeak-trained Whisper mishears chaotically, so neither bytes nor
  // transcripts compare. What does: the loudness contour. The agent's audio
  // must follow the contour of its transcript spoken by /v1/audio/speech
  // (same voice, same synthesizer) second by second, and a control - the
  // same words in reverse order, the same sounds in another sequence - must
  // not.
  const ms = r.audio.length / 48;
  assert.ok(ms > 300, `${ms} ms of audio`);
  const speech = async (text) => Buffer.from(await (await client.audio.speech.create({ model: 'tts-1', voice: 'alloy', input: text, response_format: 'pcm' })).arrayBuffer());
  const ref = await speech(r.transcript);
  assert.ok(Math.abs(ref.length - r.audio.length) <= ref.length * 0.05, `${r.audio.length} vs ${ref.length} bytes`);
  const agent = loudness(r.audio);
  const same = contourMatch(agent, loudness(ref));
  const reversed = r.transcript.split(/\s+/).filter(Boolean).reverse().join(' ');
  const control = contourMatch(agent, loudness(await speech(reversed)));
  console.log(`# agent said: ${JSON.stringify(r.transcript)} (${ms.toFixed(0)} ms); contour match with /v1/audio/speech ${same.toFixed(2)}, with the reversed words ${control.toFixed(2)}`);
  assert.ok(same >= 0.75, `the agent's audio does not follow its transcript spoken by /v1/audio/speech (match ${same.toFixed(2)})`);
  assert.ok(control < 0.75, `the control matches too (${control.toFixed(2)}): the check cannot tell texts apart`);
  await s.close();
});

// The reply starts on the early transcript (the turn's likely end, before
// the VAD is sure): the speech up to just past its end, then nothing until
// the server logs that it started the reply, then the rest. The response
// that the final transcript starts adopts it: one complete spoken response,
// its events in the usual order, nothing of it before the transcript.
test('a reply started on the early transcript is adopted when the turn ends there', { skip }, async () => {
  const s = open(srv.url);
  const created = await s.next('session.created');
  s.send(gaSession());
  await s.next('session.updated');
  const pcm = wavPcm(kitchen);
  const cut = 32 * 1400; // speech ends at 1.31 s; the VAD needs 200 ms more to be sure
  for (let at = 0; at < cut; at += 3200)
    s.send({ type: 'input_audio_buffer.append', audio: pcm.subarray(at, Math.min(at + 3200, cut)).toString('base64') });
  await s.next('input_audio_buffer.speech_started');
  const started = `${created.session.id}: reply started on turn 1's early transcript`;
  await waitFor(() => srv.log().includes(started), 'the speculative reply', 60000);
  assert.ok(!s.types().some((t) => t.startsWith('response.')), s.types().join(','));
  speak(s, pcm.subarray(cut), 1000);
  await s.next('input_audio_buffer.speech_stopped');
  const heard = await s.next('conversation.item.input_audio_transcription.completed');
  assert.equal(heard.transcript, 'turn on the kitchen lights.');
  const r = await response(s);
  assert.ok(s.all.indexOf(heard) < s.all.indexOf(r.created));
  assert.ok(['completed', 'incomplete'].includes(r.done.response.status), r.done.response.status);
  const tdone = r.evs.find((e) => e.type === 'response.output_audio_transcript.done');
  assert.equal(tdone.transcript, r.transcript);
  assert.ok(r.transcript.length > 0 && r.audio.length > 0);
  assert.ok(r.done.response.usage.output_tokens > 0);
  await waitFor(() => srv.log().includes(`${r.created.response.id}: ${r.done.response.status}`), 'the response log line');
  const line = srv.log().split('\n').find((l) => l.includes(`${r.created.response.id}: ${r.done.response.status}`));
  assert.ok(line.includes('started on the early transcript'), line);
  await s.close();
});

test('barge-in: speech over the reply cancels it and truncates it to what was heard', { skip }, async () => {
  const s = open(srv.url);
  await s.next('session.created');
  s.send(gaSession({ max_output_tokens: 'inf' }));
  await s.next('session.updated');
  speak(s, wavPcm(kitchen));
  await s.next('input_audio_buffer.speech_stopped');
  const created = await s.next('response.created');
  const firstAudio = await s.next('response.output_audio.delta');
  const item = firstAudio.item_id;
  speak(s, wavPcm(weather));   // the user talks over the reply
  await s.next('input_audio_buffer.speech_started');
  const done = await s.next((e) => e.type === 'response.done' && e.response.id === created.response.id, 120000);
  const trunc = await s.next('conversation.item.truncated');
  assert.equal(trunc.item_id, item);
  const sentMs = s.all.filter((e) => e.type === 'response.output_audio.delta' && e.item_id === item)
    .reduce((n, e) => n + Buffer.from(e.delta, 'base64').length / 48, 0);
  assert.ok(trunc.audio_end_ms <= sentMs + 1, `${trunc.audio_end_ms} <= ${sentMs}`);
  console.log(`# barge-in: response ${done.response.status} (${done.response.status_details?.reason}), cut at ${trunc.audio_end_ms} ms of ${sentMs.toFixed(0)} ms sent`);
  if (done.response.status === 'cancelled') assert.equal(done.response.status_details.reason, 'turn_detected');
  // the conversation goes on with the truncated text
  s.send({ type: 'conversation.item.retrieve', item_id: item });
  const got = await s.next('conversation.item.retrieved');
  const full = s.all.filter((e) => e.type === 'response.output_audio_transcript.delta' && e.item_id === item).map((e) => e.delta).join('');
  const kept = got.item.content[0].transcript;
  assert.ok(kept.length <= full.length, `${kept} / ${full}`);
  assert.ok(words(full).join(' ').startsWith(words(kept).join(' ')), `${JSON.stringify(kept)} is not a prefix of ${JSON.stringify(full)}`);
  // the user's new turn is answered
  const heard = await s.next('conversation.item.input_audio_transcription.completed');
  const heard2 = await s.next('conversation.item.input_audio_transcription.completed');
  assert.match(heard2.transcript, /weather/, heard.transcript);
  const next = await s.next((e) => e.type === 'response.created' && e.response.id !== created.response.id);
  await s.next((e) => e.type === 'response.done' && e.response.id === next.response.id, 120000);
  // the client truncates by itself too: errors name the param, then a good one
  s.send({ type: 'conversation.item.truncate', item_id: item, content_index: 0, audio_end_ms: 1e9 });
  assert.equal((await s.next('error')).error.param, 'audio_end_ms');
  s.send({ type: 'conversation.item.truncate', item_id: item, content_index: 0, audio_end_ms: 0 });
  assert.equal((await s.next('conversation.item.truncated')).audio_end_ms, 0);
  await s.close();
});

test('push-to-talk: commit + response.create, G.711 mu-law out', { skip }, async () => {
  const s = open(srv.url);
  await s.next('session.created');
  s.send(gaSession({ audio: { input: { format: { type: 'audio/pcm', rate: 16000 }, turn_detection: null },
    output: { format: { type: 'audio/pcmu' }, voice: 'echo' } } }));
  const up = await s.next('session.updated');
  assert.equal(up.session.audio.input.turn_detection, null);
  assert.deepEqual(up.session.audio.output.format, { type: 'audio/pcmu' });
  s.send({ type: 'input_audio_buffer.commit' });
  assert.equal((await s.next('error')).error.code, 'input_audio_buffer_commit_empty');
  speak(s, wavPcm(kitchen), 200);
  s.send({ type: 'input_audio_buffer.commit' });
  s.send({ type: 'response.create' });   // waits for the transcript
  const committed = await s.next('input_audio_buffer.committed');
  const heard = await s.next('conversation.item.input_audio_transcription.completed');
  assert.equal(heard.item_id, committed.item_id);
  assert.equal(heard.transcript, 'turn on the kitchen lights.');
  const r = await response(s);
  assert.ok(s.all.indexOf(heard) < s.all.indexOf(r.created), 'the response starts after the transcript');
  assert.ok(!s.types().includes('input_audio_buffer.speech_started'), 'no VAD events in push-to-talk');
  // mu-law at 8 kHz: one byte a sample; the silence code is 0xFF/0x7F, speech is not
  const ms = r.audio.length / 8;
  assert.ok(ms > 300, `${ms} ms`);
  assert.ok(r.audio.some((b) => b !== 0xff && b !== 0x7f));
  // a user item made of audio: transcribed, then answered
  s.send({ type: 'conversation.item.create', item: { type: 'message', role: 'user',
    content: [{ type: 'input_audio', audio: wavPcm(weather).toString('base64') }] } });
  const added = await s.next((e) => e.type === 'conversation.item.added' && e.item.role === 'user' && e.item.id !== committed.item_id);
  assert.equal(added.item.content[0].transcript, null);
  s.send({ type: 'response.create', response: { output_modalities: ['text'] } });
  const heard2 = await s.next((e) => e.type === 'conversation.item.input_audio_transcription.completed' && e.item_id === added.item.id);
  assert.match(heard2.transcript, /weather/);
  const r2 = await response(s);
  assert.ok(s.all.indexOf(heard2) < s.all.indexOf(r2.created));
  assert.ok(r2.text.length > 0 && r2.audio.length === 0);
  await s.close();
});

test('a function call round trip', { skip }, async () => {
  const s = open(srv.url);
  await s.next('session.created');
  const tools = [{ type: 'function', name: 'set_lights', description: 'Switch the lights of a room',
    parameters: { type: 'object', properties: { room: { enum: ['kitchen', 'bedroom'] }, on: { type: 'boolean' } }, required: ['room', 'on'] } }];
  s.send({ type: 'session.update', session: { type: 'realtime', output_modalities: ['text'], tools,
    tool_choice: { type: 'function', name: 'set_lights' }, max_output_tokens: 200 } });
  const up = await s.next('session.updated');
  assert.equal(up.session.tools[0].name, 'set_lights');
  s.send({ type: 'conversation.item.create', item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Turn on the kitchen lights.' }] } });
  s.send({ type: 'response.create' });
  const r = await response(s);
  const call = r.done.response.output.find((o) => o.type === 'function_call');
  assert.ok(call, JSON.stringify(r.done.response.output));
  assert.equal(call.name, 'set_lights');
  const args = JSON.parse(call.arguments);
  assert.ok(['kitchen', 'bedroom'].includes(args.room) && typeof args.on === 'boolean', call.arguments);
  const deltas = r.evs.filter((e) => e.type === 'response.function_call_arguments.delta').map((e) => e.delta).join('');
  assert.equal(deltas, call.arguments);
  const adone = r.evs.find((e) => e.type === 'response.function_call_arguments.done');
  assert.equal(adone.arguments, call.arguments);
  assert.equal(adone.call_id, call.call_id);
  // the output goes back, and the model answers in words (tools off for it)
  s.send({ type: 'conversation.item.create', item: { type: 'function_call_output', call_id: call.call_id, output: '{"ok":true}' } });
  const out = await s.next((e) => e.type === 'conversation.item.added' && e.item.type === 'function_call_output');
  assert.equal(out.item.call_id, call.call_id);
  assert.equal(out.previous_item_id, call.id);
  s.send({ type: 'response.create', response: { tool_choice: 'none', max_output_tokens: 20 } });
  const r2 = await response(s);
  assert.equal(r2.done.response.output[0].type, 'message');
  assert.ok(r2.text.length > 0);
  assert.ok(r2.done.response.usage.input_token_details.cached_tokens > 0);
  await s.close();
});

test('out-of-band responses, cancel, delete, bad events', { skip }, async () => {
  const s = open(srv.url);
  await s.next('session.created');
  s.send({ type: 'session.update', session: { type: 'realtime', output_modalities: ['text'], max_output_tokens: 16 } });
  await s.next('session.updated');
  s.send({ type: 'response.create' });
  assert.match((await s.next('error')).error.message, /empty/);
  s.send({ type: 'conversation.item.create', item: { id: 'u1', type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Hello.' }] } });
  await s.next('conversation.item.done');
  s.send({ type: 'response.create', response: { conversation: 'none', metadata: { topic: 'x' },
    input: [{ type: 'item_reference', id: 'u1' }, { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Say hi.' }] }] } });
  const oob = await response(s);
  assert.equal(oob.done.response.conversation_id, null);
  assert.deepEqual(oob.done.response.metadata, { topic: 'x' });
  assert.ok(!s.all.some((e) => e.type === 'conversation.item.added' && e.item.role === 'assistant'), 'out-of-band items stay out');
  s.send({ type: 'response.cancel' });
  assert.equal((await s.next('error')).error.code, 'response_cancel_not_active');
  s.send({ type: 'conversation.item.delete', item_id: 'u1' });
  assert.equal((await s.next('conversation.item.deleted')).item_id, 'u1');
  const bad = [
    [{ type: 'conversation.item.create', item: { type: 'message', role: 'wizard', content: [] } }, 'item.role'],
    [{ type: 'conversation.item.create', item: { type: 'function_call_output', output: 'x' } }, 'item.call_id'],
    [{ type: 'conversation.item.delete', item_id: 'nope' }, 'item_id'],
    [{ type: 'session.update', session: { type: 'realtime', audio: { output: { voice: 'no-such-voice' } } } }, 'voice'],
    [{ type: 'session.update', session: { type: 'realtime', audio: { output: { format: { type: 'audio/pcm', rate: 16000 } } } } }, 'audio.output.format'],
    [{ type: 'session.update', session: { type: 'realtime', output_modalities: ['video'] } }, 'output_modalities'],
    [{ type: 'session.update', session: { type: 'realtime', max_output_tokens: -3 } }, 'max_output_tokens'],
    [{ type: 'session.update', session: { type: 'transcription' } }, 'session.type'],
    [{ type: 'response.create', response: { conversation: 'maybe' } }, 'response.conversation'],
    [{ type: 'input_audio_buffer.append', audio: '!!' }, 'audio'],
    [{ type: 'nope' }, 'type'],
  ];
  for (const [ev, param] of bad) {
    s.send(ev);
    const e = await s.next('error');
    assert.equal(e.error.param, param, JSON.stringify(e));
  }
  s.ws.send('not json');
  assert.equal((await s.next('error')).error.code, 'invalid_json');
  await s.close();
});

test('beta shapes: OpenAI-Beta header, flat session, beta event names', { skip }, async () => {
  const s = open(srv.url, { headers: { 'OpenAI-Beta': 'realtime=v1' } });
  const created = await s.next('session.created');
  assert.ok(created.session.modalities && !created.session.type, JSON.stringify(created.session));
  s.send({ type: 'session.update', session: { modalities: ['text', 'audio'], voice: 'shimmer', input_audio_format: 'pcm16',
    output_audio_format: 'g711_alaw', turn_detection: null, instructions: 'Tell a story.', max_response_output_tokens: 30 } });
  const up = await s.next('session.updated');
  assert.equal(up.session.voice, 'shimmer');
  assert.equal(up.session.output_audio_format, 'g711_alaw');
  s.send({ type: 'conversation.item.create', item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Tell me about a cat.' }] } });
  const c1 = await s.next('conversation.item.created');
  assert.equal(c1.item.role, 'user');
  s.send({ type: 'response.create' });
  const r = await response(s);
  const types = r.evs.map((e) => e.type);
  for (const t of ['response.audio.delta', 'response.audio_transcript.delta', 'response.audio.done', 'response.audio_transcript.done'])
    assert.ok(types.includes(t), `${t} in ${types.join(',')}`);
  assert.ok(!types.some((t) => t.startsWith('response.output_audio')));
  assert.ok(s.types().includes('conversation.item.created') && !s.types().includes('conversation.item.added'));
  assert.equal(r.done.response.output[0].content[0].type, 'audio');
  await s.close();

  // no header, but a beta-shaped first update: beta names from then on
  const t = open(srv.url);
  await t.next('session.created');
  t.send({ type: 'session.update', session: { modalities: ['text'], turn_detection: null, max_response_output_tokens: 12 } });
  const u2 = await t.next('session.updated');
  assert.deepEqual(u2.session.modalities, ['text']);
  t.send({ type: 'conversation.item.create', item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Hi.' }] } });
  t.send({ type: 'response.create' });
  const r2 = await response(t);
  assert.ok(r2.evs.some((e) => e.type === 'response.text.delta'), r2.evs.map((e) => e.type).join(','));
  assert.equal(r2.done.response.output[0].content[0].type, 'text');
  await t.close();
});

test('four sessions at once each get their spoken answer', { skip }, async () => {
  const clips = [kitchen, weather, kitchen, weather];
  const results = await Promise.all(clips.map(async (clip) => {
    const s = open(srv.url);
    await s.next('session.created');
    s.send(gaSession({ max_output_tokens: 16 }));
    await s.next('session.updated');
    speak(s, wavPcm(clip));
    const heard = await s.next('conversation.item.input_audio_transcription.completed', 120000);
    const r = await response(s);
    await s.close();
    return { heard, r };
  }));
  for (const [i, { heard, r }] of results.entries()) {
    assert.match(heard.transcript, clips[i] === kitchen ? /kitchen/ : /weather/);
    assert.ok(['completed', 'incomplete'].includes(r.done.response.status));
    assert.ok(r.audio.length > 0);
  }
});

test('the official SDK: OpenAIRealtimeWebSocket runs a text turn', { skip }, async () => {
  globalThis.WebSocket ??= WebSocket;
  const rt = new OpenAIRealtimeWebSocket({ model: 'stories260K', onURL: (u) => { u.protocol = 'ws:'; } }, client);
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
});

test('limits: --realtime-max-items drops the oldest, --realtime-max-audio-s refuses more audio', { skip }, async () => {
  const small = await startServer(['--stt-model', path.join(espeak, 'ggml-tiny-espeak-q8_0.bin'), '--stt-threads', '1',
    '--realtime-max-items', '3', '--realtime-max-audio-s', '1', '--realtime-max-item-bytes', '100']);
  try {
    const s = open(small.url);
    await s.next('session.created');
    s.send({ type: 'session.update', session: { type: 'realtime', output_modalities: ['text'], audio: { input: { turn_detection: null } } } });
    await s.next('session.updated');
    for (const id of ['a', 'b', 'c', 'd'])
      s.send({ type: 'conversation.item.create', item: { id, type: 'message', role: 'user', content: [{ type: 'input_text', text: id }] } });
    assert.equal((await s.next('conversation.item.deleted')).item_id, 'a');
    s.send({ type: 'conversation.item.create', item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'x'.repeat(101) }] } });
    assert.equal((await s.next('error')).error.param, 'item.content');
    const second = Buffer.alloc(32000).toString('base64');   // 0.67 s of pcm16 at the default 24 kHz
    s.send({ type: 'input_audio_buffer.append', audio: second });
    s.send({ type: 'input_audio_buffer.append', audio: second });
    const e = await s.next('error');
    assert.equal(e.error.code, 'input_audio_buffer_full');
    assert.equal(e.error.param, 'audio');
    s.send({ type: 'input_audio_buffer.clear' });
    await s.next('input_audio_buffer.cleared');
    s.send({ type: 'input_audio_buffer.append', audio: second });
    s.send({ type: 'input_audio_buffer.commit' });
    await s.next('input_audio_buffer.committed');
    await s.close();
  } finally {
    assert.equal((await small.stop()).code, 0);
  }
});
