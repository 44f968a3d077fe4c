// load.test.mjs - one server (stories260K + the espeak Whisper + Silero VAD)
// under the same mixed load several times: 64 streaming clients over
// /v1/chat/completions, /v1/completions and /v1/messages, a seeded share of
// which disconnect mid-stream or read slowly, concurrent transcription
// uploads (some cut mid-body, some dropped while transcribed) and realtime
// WebSocket sessions dropped without a close frame. Every answer that
// completed must be complete and well formed; after each round /metrics must
// show no running sequence, no waiting request, no used KV block and no busy
// transcription, and the server's RSS must stay within 10% of its value
// after the first (warm-up) round.
//   LOAD_SCALE=N  N measured rounds of 64*N clients (CI: 1); LOAD_ROUNDS=R
//   sets the rounds alone; LOAD_SEED=S another (reproducible) plan;
//   LOAD_ASAN=1 for a sanitizer build: deadlines x10, RSS reported, not checked.
// Without ../shared (or OMNI_TEST_MODEL) the test skips; without the espeak
// Whisper model only the LLM load runs.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { startServer, testModel, modelSkip, root } from '../clients/server.mjs';
import { prng, stopServer, rssKiB, metrics, settle, streamRequest, checkStream, knownBug, parseSSE, multipart, upload, wsConnect, wavPcm, sleep } from './lib.mjs';

const SCALE = Math.max(1, Number(process.env.LOAD_SCALE || 1));
const SEED = Number(process.env.LOAD_SEED || 20240607);
const CLIENTS = 64 * SCALE;
const UPLOADS = 6 * SCALE;
const SESSIONS = 4 * SCALE;
const ROUNDS = Math.max(1, Number(process.env.LOAD_ROUNDS || SCALE));   // measured rounds after the warm-up
const ASAN = Boolean(process.env.LOAD_ASAN);
const SLOW = ASAN ? 10 : 1;     // deadline multiplier

const shared = path.join(root, '..', 'shared');
const espeak = path.join(shared, 'models', 'whisper-tiny-espeak', 'ggml-tiny-espeak-q8_0.bin');
const vadModel = path.join(shared, 'models', 'silero-vad', 'silero-v6.2.0-ggml.bin');
const kitchen = path.join(shared, 'audio', 'turn-on-the-kitchen-lights.wav');
const skip = testModel() ? false : modelSkip;
const speech = !skip && fs.existsSync(espeak) && fs.existsSync(vadModel) && fs.existsSync(kitchen);

let srv;
let expectText;     // the transcript of the kitchen clip, asked alone before the load
before(async () => {
  if (skip) return;
  // every client of a round is connected at once, all from 127.0.0.1
  const args = ['--max-seqs', '16', '--kv-memory', '1M', '--shutdown-timeout', '5',
    '--max-conns-per-ip', String(CLIENTS + UPLOADS + SESSIONS + 64)];
  if (speech) args.push('--stt-model', espeak, '--vad-model', vadModel, '--stt-workers', '5', '--stt-threads', '1');
  srv = await startServer(args);
  if (speech) {
    const r = await upload(srv.url, '/v1/audio/transcriptions',
      multipart({ model: 'whisper-1' }, { name: 'kitchen.wav', data: fs.readFileSync(kitchen) }));
    assert.equal(r.status, 200, r.text);
    expectText = JSON.parse(r.text).text;
  }
});
after(async () => {
  if (!srv) return;
  const { code, killed } = await stopServer(srv, 15000 * SLOW);
  assert.ok(!killed, `no exit 15 s after SIGTERM:\n${srv.log().slice(-4000)}`);
  assert.equal(code, 0, srv.log().slice(-4000));
});

// Bytes of encoder scratch one more window of the batched Whisper encoder
// takes (audio/whisper_forward.c reserve_windows: im2col, 6 activations of
// [n_audio_ctx][d], the MLP's [n_audio_ctx][4 d]), from the ggml header
// (u32 magic, then n_vocab, n_audio_ctx, n_audio_state, ..., n_mels 10th).
function encoderWindowBytes(file) {
  const fd = fs.openSync(file, 'r');
  const b = Buffer.alloc(48);
  fs.readSync(fd, b, 0, 48, 0);
  fs.closeSync(fd);
  assert.equal(b.readUInt32LE(0), 0x67676d6c, `${file}: not a whisper.cpp ggml file`);
  const nc = b.readInt32LE(8), d = b.readInt32LE(12), mels = b.readInt32LE(40);
  return (Math.max(2 * nc * 3 * mels, nc * 3 * d) + 6 * nc * d + 4 * nc * d) * 4;
}

// ---- the plan of one round ---------------------------------------------------

const prompts = ['Once upon a time', 'Lily and Ben went to the park.', 'The little dog was sad because',
  'Tom had a big red ball.', 'One day, a girl named Sue'];

function streamPlans(rng) {
  const plans = [];
  for (let i = 0; i < CLIENTS; i++) {
    const route = ['/v1/chat/completions', '/v1/completions', '/v1/messages'][i % 3];
    const prompt = rng.pick(prompts);
    const max_tokens = rng.chance(0.2) ? rng.int(300, 420) : rng.int(8, 160);
    const temperature = rng.pick([0, 0.8, 1.2]);
    let body;
    if (route === '/v1/chat/completions') {
      body = { model: 'x', messages: [{ role: 'user', content: prompt }], max_tokens, temperature, stream: true, seed: i };
      if (rng.chance(0.15)) body.n = rng.int(2, 4);
      if (rng.chance(0.5)) { body.logprobs = true; body.top_logprobs = rng.int(0, 5); }
      if (rng.chance(0.5)) body.stream_options = { include_usage: true };
      if (rng.chance(0.1)) body.stop = ['.'];
    } else if (route === '/v1/completions') {
      body = { model: 'x', prompt, max_tokens, temperature, stream: true, seed: i };
      if (rng.chance(0.5)) body.logprobs = rng.int(0, 5);
      if (rng.chance(0.5)) body.stream_options = { include_usage: true };
      if (rng.chance(0.1)) body.stop = ['.'];
    } else {
      body = { model: 'x', messages: [{ role: 'user', content: prompt }], max_tokens, temperature: Math.min(temperature, 1), stream: true };
      if (rng.chance(0.1)) body.stop_sequences = ['.'];
    }
    const r = rng.next();
    const plan = { i, route, body, fault: 'none' };
    if (r < 0.3) {
      plan.fault = 'disconnect';
      if (rng.chance(0.25)) { plan.afterEvents = 0; plan.afterMs = rng.int(0, 200); }   // maybe before any answer
      else plan.afterEvents = rng.int(1, 60);
    } else if (r < 0.33) {
      plan.fault = 'cut-request';
      plan.afterMs = rng.int(0, 100);
    } else if (r < 0.55) {
      plan.fault = rng.chance(0.2) ? 'slow-cut' : 'slow';
      plan.pauseMs = rng.int(200, 1500);
      plan.pauses = rng.int(1, 3);
    }
    plans.push(plan);
  }
  return plans;
}

function uploadPlans(rng, size) {
  const kinds = ['complete', 'cut-body', 'complete', 'cut-chunked', 'drop-while-transcribed', 'complete-stream'];
  return Array.from({ length: UPLOADS }, (_, i) => {
    const kind = kinds[i % kinds.length];
    return { kind, cutAt: rng.int(100, size - 100), cutAfterMs: rng.int(50, 800) };
  });
}

function sessionPlans(rng) {
  const kinds = ['complete', 'drop-mid-speech', 'drop-after-commit', 'drop-mid-frame'];
  return Array.from({ length: SESSIONS }, (_, i) => ({ kind: kinds[i % kinds.length], chunks: rng.int(2, 14) }));
}

// ---- running them -----------------------------------------------------------------

async function runUpload(plan, wav) {
  const stream = plan.kind === 'complete-stream';
  const mp = multipart({ model: 'whisper-1', ...(stream ? { stream: 'true' } : {}) }, { name: 'kitchen.wav', data: wav });
  const opts = plan.kind === 'cut-body' ? { cutAt: Math.min(plan.cutAt, mp.body.length - 10) }
    : plan.kind === 'cut-chunked' ? { cutAt: Math.min(plan.cutAt, mp.body.length - 10), chunked: true }
      : plan.kind === 'drop-while-transcribed' ? { cutAfterMs: plan.cutAfterMs } : {};
  const r = await upload(srv.url, '/v1/audio/transcriptions', mp, opts, 60000 * SLOW);
  const bad = [];
  if (r.error) bad.push(r.error);
  else if (!r.aborted) {
    if (r.status !== 200) bad.push(`status ${r.status}: ${r.text.slice(0, 200)}`);
    else if (stream) {
      const done = r.text.split('\n\n').filter((b) => b.startsWith('data: ')).map((b) => JSON.parse(b.slice(6))).at(-1);
      if (done?.type !== 'transcript.text.done' || done.text !== expectText) bad.push(`stream ended with ${JSON.stringify(done)}`);
    } else if (JSON.parse(r.text).text !== expectText) bad.push(`transcript ${r.text}`);
  }
  return { kind: plan.kind, aborted: r.aborted, bad };
}

async function runSession(plan, pcm) {
  const c = await wsConnect(srv.url, '/v1/realtime?intent=transcription', 10000 * SLOW).catch((e) => e);
  if (c instanceof Error) return { kind: plan.kind, bad: [c.message] };
  const bad = [];
  const manual = plan.kind === 'drop-after-commit' || plan.kind === 'complete';
  const created = await c.next('transcription_session.created', 10000 * SLOW);
  if (!created) bad.push('no transcription_session.created');
  c.send({ type: 'transcription_session.update', session: {
    input_audio_format: 'pcm16', input_audio_sample_rate: 16000,
    input_audio_transcription: { model: 'whisper-1', language: 'en' },
    turn_detection: manual ? null : { type: 'server_vad', threshold: 0.5, silence_duration_ms: 100 } } });
  if (!await c.next('transcription_session.updated', 10000 * SLOW)) bad.push('no transcription_session.updated');
  // 100 ms chunks, five times faster than real time, 1 s of silence after the speech
  const all = Buffer.concat([pcm, Buffer.alloc(32000)]);
  const chunks = [];
  for (let at = 0; at < all.length; at += 3200) chunks.push(all.subarray(at, at + 3200).toString('base64'));
  const upto = plan.kind === 'drop-mid-speech' || plan.kind === 'drop-mid-frame' ? Math.min(plan.chunks, chunks.length) : chunks.length;
  for (let k = 0; k < upto; k++) {
    if (plan.kind === 'drop-mid-frame' && k === upto - 1) {
      c.dropMidFrame({ type: 'input_audio_buffer.append', audio: chunks[k] });
      break;
    }
    c.send({ type: 'input_audio_buffer.append', audio: chunks[k] });
    await sleep(20);
  }
  if (plan.kind === 'drop-mid-speech') c.drop();
  if (manual) {
    c.send({ type: 'input_audio_buffer.commit' });
    if (plan.kind === 'drop-after-commit') {
      if (!await c.next('input_audio_buffer.committed', 10000 * SLOW)) bad.push('no committed');
      c.drop();   // the decode of the turn is queued or running now
    } else {
      const done = await c.next('conversation.item.input_audio_transcription.completed', 30000 * SLOW * SCALE);
      if (!done) bad.push('no completed transcript');
      else if (done.transcript !== expectText) bad.push(`transcript ${JSON.stringify(done.transcript)} != ${JSON.stringify(expectText)}`);
      await c.close();
    }
  }
  const errors = c.events.filter((e) => e.type === 'error');
  if (errors.length) bad.push(`error events: ${JSON.stringify(errors.map((e) => e.error))}`);
  return { kind: plan.kind, bad: bad.concat(c.bad) };
}

async function round(n, log) {
  const rng = prng(SEED);           // the same load every round
  const plans = streamPlans(rng);
  const wav = speech ? fs.readFileSync(kitchen) : null;
  const pcm = speech ? wavPcm(kitchen) : null;
  const t0 = Date.now();
  const [streams, uploads, sessions] = await Promise.all([
    Promise.all(plans.map(async (p) => ({ p, r: await streamRequest(srv.url, p, 60000 * SLOW) }))),
    speech ? Promise.all(uploadPlans(rng, wav.length).map((p) => runUpload(p, wav))) : [],
    speech ? Promise.all(sessionPlans(rng).map((p) => runSession(p, pcm))) : [],
  ]);
  const ms = Date.now() - t0;
  const problems = [];
  const cut = {}, done = {};
  let events = 0, biggest = 0;
  for (const { p, r } of streams) {
    if (r.aborted) { cut[p.fault] = (cut[p.fault] || 0) + 1; continue; }
    if (r.error) { problems.push(`client ${p.i} ${p.route} (${p.fault}): ${r.error}`); continue; }
    const bad = checkStream(p.route, p.body, r);
    if (bad.length) problems.push(`client ${p.i} ${p.route} ${JSON.stringify(p.body)}: ${bad.join('; ')}`);
    done[p.fault] = (done[p.fault] || 0) + 1;
    events += (r.text.match(/\n\n/g) || []).length;
    biggest = Math.max(biggest, r.text.length);
  }
  for (const u of uploads) for (const b of u.bad) problems.push(`upload ${u.kind}: ${b}`);
  for (const s of sessions) for (const b of s.bad) problems.push(`realtime ${s.kind}: ${b}`);
  const sum = (o) => Object.values(o).reduce((a, b) => a + b, 0);
  log(`round ${n}: ${streams.length} streams in ${ms} ms: ${sum(done)} completed and checked ${JSON.stringify(done)} ` +
    `(${events} SSE events, largest ${(biggest / 1024).toFixed(0)} KiB), ${sum(cut)} cut by the client ${JSON.stringify(cut)}; ` +
    `${uploads.length} uploads (${uploads.filter((u) => u.aborted).length} aborted), ${sessions.length} realtime sessions ` +
    `(${sessions.filter((s) => s.kind !== 'complete').length} dropped without a close frame)`);
  return problems;
}

test(`load: ${CLIENTS} streaming clients with disconnects and slow readers, uploads, dropped WebSockets; ${ROUNDS} round(s) after a warm-up`,
  { skip, timeout: (60000 * SCALE * (ROUNDS + 1) + 60000) * SLOW }, async (t) => {
    const log = (s) => t.diagnostic(s);
    if (!speech) log('speech parts skipped: ../shared whisper-tiny-espeak, silero-vad or the kitchen clip is absent');
    const idle = (m) => m.omniserve_requests_running === 0 && m.omniserve_requests_waiting === 0 &&
      m.omniserve_kv_blocks_used === 0 && (!speech || m.omniserve_stt_busy === 0);
    const rss0 = rssKiB(srv.proc.pid);
    let lined = !speech;     // an encoder pass of four windows has run
    if (speech) {
      // Each speech lane touches its Whisper state (some 15 MB here) the first
      // time it decodes, and the batched encoder keeps scratch for the most
      // windows it has run at once (at most 4; 15 MB a window for this
      // model), touched the first time that many line up in one pass - on
      // the load's timing, at a random round. So before measuring: five
      // realtime turns, the fifth committed 50 ms ahead so that the other
      // four arrive while its encoder pass runs and are then encoded
      // together (5 windows in 2 passes); at most 8 tries. Should they never
      // line up, a later round may add the fourth window's scratch once, and
      // the RSS check allows exactly that much on top of its 10%.
      const pcm64 = wavPcm(kitchen).toString('base64');
      const cs = [];
      for (let i = 0; i < 5; i++) {
        const c = await wsConnect(srv.url, '/v1/realtime?intent=transcription', 10000 * SLOW);
        await c.next('transcription_session.created', 10000 * SLOW);
        c.send({ type: 'transcription_session.update', session: { input_audio_format: 'pcm16',
          input_audio_sample_rate: 16000, turn_detection: null } });
        assert.ok(await c.next('transcription_session.updated', 10000 * SLOW));
        cs.push(c);
      }
      for (let k = 0; k < 8; k++) {
        const m0 = await metrics(srv.url);
        for (const c of cs) c.send({ type: 'input_audio_buffer.append', audio: pcm64 });
        await sleep(200);
        cs[4].send({ type: 'input_audio_buffer.commit' });
        await sleep(50);
        for (const c of cs.slice(0, 4)) c.send({ type: 'input_audio_buffer.commit' });
        for (const c of cs)
          assert.ok(await c.next('conversation.item.input_audio_transcription.completed', 30000 * SLOW), 'speech warm-up: no transcript');
        const m1 = await metrics(srv.url);
        const passes = m1.omniserve_stt_encoder_passes_total - m0.omniserve_stt_encoder_passes_total;
        const windows = m1.omniserve_stt_encoder_windows_total - m0.omniserve_stt_encoder_windows_total;
        log(`speech warm-up ${k + 1}: 5 turns, ${windows} encoder windows in ${passes} passes`);
        if (passes === 2 && windows === 5) { lined = true; break; }
      }
      for (const c of cs) await c.close();
    }
    // every realtime socket, dropped or closed, seen closed by the server (its log)
    const sessionsClosed = async () => {
      const count = (what) => (srv.log().match(new RegExp(`realtime: session \\S+ ${what}`, 'g')) || []).length;
      for (let i = 0; i < 100 * SLOW && count('closed') < count('opened'); i++) await sleep(100);
      assert.equal(count('closed'), count('opened'), 'realtime sessions opened and closed (server log)');
    };
    // Two warm-up rounds, and the base is the larger idle RSS after them:
    // which speech lanes a round touches (a lane's Whisper state is ~15 MB
    // here) and whether glibc hands large freed buffers back to the kernel
    // depend on the round's timing, so one idle reading after one round was
    // 12-20 MB under the high-water mark in about 1 run of 3. A leak still
    // shows in every measured round.
    let m, base = 0;
    for (const w of ['warm-up', 'warm-up 2']) {
      assert.deepEqual(await round(w, log), []);
      m = await settle(srv.url, idle, `idle after the ${w}`, 30000 * SLOW);
      await sessionsClosed();
      await sleep(200);
      base = Math.max(base, rssKiB(srv.proc.pid));
    }
    const allowKiB = lined ? 0 : Math.ceil(encoderWindowBytes(espeak) / 1024);
    log(`RSS: ${rss0} KiB at start, ${base} KiB after the warm-up` +
      (allowKiB ? `; four windows never shared an encoder pass: ${allowKiB} KiB allowed for a fourth window's scratch` : ''));
    // Even so the warm-ups' idle high-water mark came out 196-258 MB across
    // runs and a measured round at 225-230 MB (3 runs of 2026-11-27): a
    // one-time step. So a round over the bound is run once more against
    // its own reading: a one-time step does not repeat, a leak does.
    let again = false;
    for (let k = 1; k <= ROUNDS; k++) {
      assert.deepEqual(await round(k, log), []);
      m = await settle(srv.url, idle, `idle after round ${k}`, 30000 * SLOW);
      await sessionsClosed();
      await sleep(200);
      const rss = rssKiB(srv.proc.pid);
      const growth = (rss - base) / base;
      log(`RSS after round ${k}: ${rss} KiB (${(growth * 100).toFixed(1)}% against ${again ? 'the round before' : 'the warm-up'})`);
      if (ASAN)
        continue;
      const ok = rss - allowKiB <= base * 1.10;
      if (!ok && !again) {
        log(`over the bound once: round ${k} again, against ${rss} KiB`);
        again = true;
        base = rss;
        k--;
        continue;
      }
      assert.ok(ok, `RSS grew ${(growth * 100).toFixed(1)}%: ${base} -> ${rss} KiB` +
        (allowKiB ? ` (${allowKiB} KiB of it allowed)` : ''));
    }
    log(`metrics after the last round: running ${m.omniserve_requests_running}, waiting ${m.omniserve_requests_waiting}, ` +
      `kv used ${m.omniserve_kv_blocks_used} of ${m.omniserve_kv_blocks_total} (cached ${m.omniserve_kv_blocks_cached}), ` +
      `preemptions ${m.omniserve_preemptions_total}, stt busy ${m.omniserve_stt_busy}, ` +
      `generated tokens ${m.omniserve_engine_generated_tokens_total}`);
    if (knownBug.chatStreamDropsEmptyTokens) log(`known bug let pass: ${knownBug.chatStreamDropsEmptyTokens} <s> tokens missing from chat streams`);
    // the server still answers normally
    const h = await fetch(`${srv.url}/health`);
    assert.equal(h.status, 200);
    await h.arrayBuffer();
  });

// With this seed the model generates <s> at token 253: a token without
// text. The non-streamed answer lists it in logprobs (and counts it in
// usage); the stream must too (it once left it out).
test('chat stream logprobs equal the non-streamed ones (seeded <s>)', { skip }, async () => {
    const body = { model: 'x', messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 300,
      temperature: 0.8, seed: 3, logprobs: true };
    const plain = await (await fetch(`${srv.url}/v1/chat/completions`, { method: 'POST',
      headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })).json();
    const r = await streamRequest(srv.url, { route: '/v1/chat/completions', body: { ...body, stream: true }, fault: 'none' });
    const streamed = parseSSE(r.text).frames.filter((f) => f.data && f.data !== '[DONE]')
      .flatMap((f) => JSON.parse(f.data).choices.flatMap((c) => c.logprobs?.content ?? []).map((t) => t.token));
    assert.deepEqual(streamed, plain.choices[0].logprobs.content.map((t) => t.token));
  });
