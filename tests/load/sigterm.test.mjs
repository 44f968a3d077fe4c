// sigterm.test.mjs - SIGTERM while streams are in flight: every stream the
// server had answered must end cleanly (the last chunk of the chunked
// response, well-formed SSE ending in [DONE] / message_stop, a finish
// reason), slow readers included, and the process must exit 0 within its
// --shutdown-timeout. With a long timeout the streams run to their end; with
// a short one those left are cancelled (finish_reason "cancelled"), still
// ending cleanly. A realtime session streaming audio at the time must not
// hold the exit. Whether new connections during the drain are refused or
// answered 503 is not tested here.
//   LOAD_SCALE=N: 24*N streams; LOAD_SEED=S.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { startServer, testModel, modelSkip, root } from '../clients/server.mjs';
import { prng, stopServer, streamRequest, checkStream, knownBug, wsConnect, wavPcm, sleep } from './lib.mjs';

const SCALE = Math.max(1, Number(process.env.LOAD_SCALE || 1));
const SEED = Number(process.env.LOAD_SEED || 20240607);
const STREAMS = 24 * SCALE;

const shared = path.join(root, '..', 'shared');
const espeak = path.join(shared, 'models', 'whisper-tiny-espeak', 'ggml-tiny-espeak-q8_0.bin');
const kitchen = path.join(shared, 'audio', 'turn-on-the-kitchen-lights.wav');
const skip = testModel() ? false : modelSkip;
const speech = !skip && fs.existsSync(espeak) && fs.existsSync(kitchen);

// v after ms, on a timer that does not keep the process alive
const later = (ms, v) => new Promise((r) => setTimeout(() => r(v), ms).unref());

function plans(rng, maxTokens) {
  return Array.from({ length: STREAMS }, (_, i) => {
    const route = ['/v1/chat/completions', '/v1/completions', '/v1/messages'][i % 3];
    const max_tokens = rng.int(maxTokens[0], maxTokens[1]);
    const body = route === '/v1/completions'
      ? { model: 'x', prompt: 'Once upon a time', max_tokens, temperature: 0.8, stream: true, seed: i }
      : { model: 'x', messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens, temperature: 0.8, stream: true };
    if (route !== '/v1/messages' && rng.chance(0.5)) {
      body.stream_options = { include_usage: true };
      body.logprobs = route === '/v1/completions' ? 2 : true;
    }
    const plan = { i, route, body, fault: 'none', progress: { headers: false, events: 0 } };
    if (rng.chance(0.25)) Object.assign(plan, { fault: 'slow', pauseMs: rng.int(300, 800), pauses: 2 });
    return plan;
  });
}

// A realtime session appending audio in real time until its socket closes;
// resolves with {closeCode, closed}.
async function talkingSession(url) {
  const c = await wsConnect(url, '/v1/realtime?intent=transcription');
  await c.next('transcription_session.created', 10000);
  c.send({ type: 'transcription_session.update', session: { input_audio_format: 'pcm16', input_audio_sample_rate: 16000, turn_detection: null } });
  await c.next('transcription_session.updated', 10000);
  const pcm = wavPcm(kitchen);
  const running = (async () => {
    for (let k = 0; k < 600 && !c.closed; k++) {
      c.send({ type: 'input_audio_buffer.append', audio: pcm.subarray((k * 3200) % (pcm.length - 3200), (k * 3200) % (pcm.length - 3200) + 3200).toString('base64') });
      if (k % 10 === 9) c.send({ type: 'input_audio_buffer.commit' });
      await sleep(100);
    }
    return { closed: c.closed, closeCode: c.closeCode };
  })();
  return { c, running };
}

async function shutdownUnderLoad(t, { timeoutS, maxTokens, maxSeqs, expectCancelled }) {
  const args = ['--shutdown-timeout', String(timeoutS), '--max-seqs', String(maxSeqs), '--max-conns-per-ip', String(STREAMS + 64)];
  if (speech) args.push('--stt-model', espeak, '--stt-threads', '1');
  const srv = await startServer(args);
  try {
    await underLoad(t, srv, { timeoutS, maxSeqs, maxTokens, expectCancelled });
  } finally {
    await stopServer(srv, 1000);   // only when the test failed before its SIGTERM
  }
}

async function underLoad(t, srv, { timeoutS, maxTokens, maxSeqs, expectCancelled }) {
  const log = (s) => t.diagnostic(s);
  const ps = plans(prng(SEED), maxTokens);
  const runs = ps.map((p) => streamRequest(srv.url, p, 60000));
  const rt = speech ? await talkingSession(srv.url) : null;
  // SIGTERM once the first max-seqs streams are generating
  const t0 = Date.now();
  while (ps.filter((p) => p.progress.events >= 3).length < Math.min(maxSeqs, STREAMS) && Date.now() - t0 < 15000) await sleep(10);
  const answered = ps.map((p) => p.progress.headers);
  const tKill = Date.now();
  srv.proc.kill('SIGTERM');
  const exit = await Promise.race([srv.exited, later((timeoutS + 10) * 1000, null)]);
  const exitMs = Date.now() - tKill;
  if (!exit) srv.proc.kill('SIGKILL');
  const results = await Promise.all(runs);
  const problems = [];
  const finishes = {};
  let refused = 0;
  for (const [i, r] of results.entries()) {
    const p = ps[i];
    if (r.error) { problems.push(`stream ${i} ${p.route} (${p.fault}, answered before SIGTERM: ${answered[i]}): ${r.error} after ${r.text.length} bytes`); continue; }
    if (r.status === 503 && !answered[i]) { refused++; continue; }   // reached the server during the drain
    const bad = checkStream(p.route, p.body, r, { cancelled: true });
    if (bad.length) problems.push(`stream ${i} ${p.route} ${JSON.stringify(p.body)}: ${bad.join('; ')}`);
    const f = r.text.match(/"(?:finish|stop)_reason":"(\w+)"/g)?.at(-1)?.replace(/.*:"(\w+)"/, '$1');
    finishes[f] = (finishes[f] || 0) + 1;
  }
  const ws = rt ? await Promise.race([rt.running, later(5000, { closed: rt.c.closed, closeCode: rt.c.closeCode })]) : null;
  if (rt && !rt.c.closed) rt.c.drop();
  log(`--shutdown-timeout ${timeoutS}: SIGTERM with ${answered.filter(Boolean).length} of ${STREAMS} streams answered ` +
    `(${ps.filter((p) => p.progress.events >= 3).length} generating); exit ${exit ? `code ${exit.code} signal ${exit.signal}` : 'none'} ` +
    `${exitMs} ms later; finishes ${JSON.stringify(finishes)}, ${refused} refused with 503` +
    (ws ? `; realtime socket ${ws.closed ? `closed (close frame ${ws.closeCode ?? 'none'})` : 'still open'}` : '') +
    (knownBug.chatStreamDropsEmptyTokens ? `; known bug let pass: ${knownBug.chatStreamDropsEmptyTokens} <s> tokens missing from chat streams` : ''));
  assert.deepEqual(problems, []);
  assert.ok(exit, `no exit ${timeoutS + 10} s after SIGTERM:\n${srv.log().slice(-3000)}`);
  assert.equal(exit.code, 0, srv.log().slice(-3000));
  assert.ok(exitMs < (timeoutS + 5) * 1000, `exit took ${exitMs} ms with --shutdown-timeout ${timeoutS}`);
  if (expectCancelled) assert.ok(finishes.cancelled > 0, 'no stream was cut short: the load ended before the timeout');
  if (ws) assert.ok(ws.closed, 'the realtime socket outlived the server');
}

test(`SIGTERM with ${STREAMS} streams in flight: all finish, exit 0`, { skip, timeout: 90000 }, (t) =>
  shutdownUnderLoad(t, { timeoutS: 20, maxTokens: [150, 400], maxSeqs: 8, expectCancelled: false }));

test(`SIGTERM with --shutdown-timeout 1: the streams left are cancelled cleanly, exit 0`, { skip, timeout: 90000 }, (t) =>
  shutdownUnderLoad(t, { timeoutS: 1, maxTokens: [380, 440], maxSeqs: 4, expectCancelled: true }));
