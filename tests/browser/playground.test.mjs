// playground.test.mjs - the web playground (GET /) in headless Chromium:
// Debian's /usr/bin/chromium driven by playwright-core, with a fake
// microphone that plays ../shared/audio/turn-on-the-kitchen-lights.wav.
// The page must load without console errors, stream a chat reply, show a
// dictated transcript, play an answer aloud and run the voice agent (skipped
// with the reason while the server has no Realtime conversation mode).
// Screenshots go to $OMNI_SHOTS (default build/) as browser-*.png.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { startServer, testModel, modelSkip, root, omni } from '../clients/server.mjs';

const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const shared = path.join(root, '..', 'shared');
const wav = path.join(shared, 'audio', 'turn-on-the-kitchen-lights.wav');
const sttModel = path.join(shared, 'models', 'whisper-tiny-espeak', 'ggml-tiny-espeak-q8_0.bin');
const vadModel = path.join(shared, 'models', 'silero-vad', 'silero-v6.2.0-ggml.bin');
const shots = path.resolve(root, process.env.OMNI_SHOTS || 'build');

function whySkip() {
  if (!fs.existsSync(CHROMIUM)) return `no Chromium at ${CHROMIUM} (apt-get install chromium, or set CHROMIUM)`;
  if (!fs.existsSync(omni)) return `${omni} is not built`;
  for (const f of [wav, sttModel, vadModel])
    if (!fs.existsSync(f)) return `${f} is absent (../shared)`;
  if (!testModel()) return modelSkip;
  return '';
}
const skip = whySkip() || false;
if (skip) console.log(`# browser tests skipped: ${skip}`);

let server, browser, page;
const consoleErrors = [];   // { phase, text }
let phase = 'load';

async function shot(name) {
  fs.mkdirSync(shots, { recursive: true });
  const file = path.join(shots, `browser-${name}.png`);
  await page.screenshot({ path: file });
  return file;
}

const stat = (name) => page.evaluate((n) => (globalThis.omniStats || {})[n] || 0, name);

before(async () => {
  if (skip) return;
  const { chromium } = await import('playwright-core');
  server = await startServer(['--stt-model', sttModel, '--vad-model', vadModel]);
  const args = [
    '--use-fake-device-for-media-stream',
    '--use-fake-ui-for-media-stream',
    `--use-file-for-fake-audio-capture=${wav}`,
    '--autoplay-policy=no-user-gesture-required',
    '--disable-dev-shm-usage',   // containers with a small /dev/shm
  ];
  if (process.getuid && process.getuid() === 0) args.push('--no-sandbox');   // root: CI
  browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args });
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  await context.grantPermissions(['microphone'], { origin: server.url });
  page = await context.newPage();
  page.on('console', (m) => {
    if (m.type() === 'error') consoleErrors.push({ phase, text: m.text() });
  });
  page.on('pageerror', (e) => consoleErrors.push({ phase, text: `uncaught: ${e.message}` }));
});

after(async () => {
  if (browser) await browser.close();
  if (server) await server.stop();
});

const errorsOf = (p) => consoleErrors.filter((e) => e.phase === p).map((e) => e.text);

test('the page loads without console errors and finds the model', { skip }, async () => {
  const r = await page.goto(server.url + '/');
  assert.equal(r.status(), 200);
  assert.match(r.headers()['content-security-policy'] || '', /default-src 'self'/);
  await page.waitForFunction(() => /ready/.test(document.getElementById('status-text').textContent),
    null, { timeout: 20000 });
  assert.equal(await page.inputValue('#model'), await page.evaluate(() =>
    document.querySelector('#model option')?.value));
  assert.ok(!(await page.isDisabled('#mic')), 'the mic button is enabled with --stt-model');
  assert.ok(await page.isDisabled('#attach'), 'attachments need a vision model');
  // the voice list came from /v1/audio/voices
  assert.ok(await page.locator('#voice option').count() > 5);
  await shot('load');
  assert.deepEqual(errorsOf('load'), []);
});

test('a chat message streams its reply', { skip }, async () => {
  phase = 'chat';
  // Record every distinct text the answer shows while it streams.
  await page.evaluate(() => {
    globalThis.answerSnapshots = [];
    const log = document.getElementById('log');
    new MutationObserver(() => {
      const md = log.querySelector('.msg.assistant:last-child .md');
      const t = md ? md.textContent : '';
      const s = globalThis.answerSnapshots;
      if (t && s[s.length - 1] !== t) s.push(t);
    }).observe(log, { childList: true, subtree: true, characterData: true });
  });
  await page.fill('#max_tokens', '200');
  await page.fill('#temperature', '0');
  await page.fill('#input', 'Once upon a time');
  await page.press('#input', 'Enter');
  await page.waitForSelector('.msg.assistant .tools', { timeout: 60000 });
  const text = await page.textContent('.msg.assistant .md');
  const snaps = await page.evaluate(() => globalThis.answerSnapshots);
  assert.ok(text.trim().length > 20, `a reply: ${JSON.stringify(text)}`);
  assert.ok(await stat('chatDeltas') > 1, 'the reply came as several SSE deltas');
  // How many states the page shows depends on how the deltas fall into
  // animation frames (a fast model can deliver them all in one frame), so
  // streaming is asserted on the SSE deltas above and here only that every
  // state the page showed extends the one before.
  assert.ok(snaps.length >= 1, `the answer appeared (${snaps.length} states)`);
  for (let i = 1; i < snaps.length; i++)
    assert.ok(snaps[i].length >= snaps[i - 1].length, 'each state extends the one before');
  assert.match(await page.textContent('.msg.assistant .meta'), /tokens/);
  assert.equal(await page.textContent('.msg.user .text'), 'Once upon a time');
  await shot('chat');
  assert.deepEqual(errorsOf('chat'), []);
});

test('the microphone button shows a live transcript', { skip }, async () => {
  phase = 'mic';
  await page.click('#mic');
  await page.waitForFunction(() => /kitchen/i.test(document.getElementById('input').value),
    null, { timeout: 60000 });
  await shot('mic');
  const said = await page.inputValue('#input');
  assert.match(said, /kitchen/i);
  assert.ok(await stat('micChunks') > 5, 'the microphone streamed audio');
  await page.click('#mic');   // stop
  await page.waitForFunction(() => document.getElementById('mic').textContent === 'Mic',
    null, { timeout: 10000 });
  await page.fill('#input', '');
  assert.deepEqual(errorsOf('mic'), []);
});

test('the play button speaks an answer', { skip }, async () => {
  phase = 'play';
  const before = await stat('speechSamples');
  await page.click('.msg.assistant button.play');
  await page.waitForFunction((b) => (globalThis.omniStats.speechSamples || 0) > b + 24000 * 0.5,
    before, { timeout: 30000 });
  await shot('play');
  // the button turns back into Play when the audio ends (or we stop it)
  if ((await page.textContent('.msg.assistant button.play')) === 'Stop')
    await page.click('.msg.assistant button.play');
  assert.equal(await page.textContent('.msg.assistant button.play'), 'Play');
  assert.deepEqual(errorsOf('play'), []);
});

test('with --api-key the page asks for the key, keeps it and sends it', { skip }, async () => {
  phase = 'key';
  const keyed = await startServer(['--api-key', 'sekret-key']);
  const p = await page.context().newPage();
  p.on('console', (m) => { if (m.type() === 'error') consoleErrors.push({ phase, text: m.text() }); });
  p.on('pageerror', (e) => consoleErrors.push({ phase, text: `uncaught: ${e.message}` }));
  const auth = [];
  p.on('request', (r) => { if (r.url().includes('/v1/')) auth.push(r.headers().authorization); });
  try {
    await p.goto(keyed.url + '/');
    await p.waitForFunction(() => /API key required/.test(document.getElementById('status-text').textContent));
    assert.ok(await p.isVisible('#api-key'), 'the settings open on the key field');
    await p.fill('#api-key', 'sekret-key');
    await p.press('#api-key', 'Enter');
    await p.waitForFunction(() => /ready/.test(document.getElementById('status-text').textContent));
    assert.equal(await p.evaluate(() => localStorage.getItem('omniserve.apiKey')), 'sekret-key');
    await p.fill('#input', 'Once upon a time');
    await p.press('#input', 'Enter');
    await p.waitForSelector('.msg.assistant .tools', { timeout: 60000 });
    assert.ok((await p.textContent('.msg.assistant .md')).trim().length > 0);
    assert.ok(auth.length >= 2 && auth.every((a) => a === 'Bearer sekret-key'), JSON.stringify(auth));
    await p.reload();   // kept across loads
    await p.waitForFunction(() => /ready/.test(document.getElementById('status-text').textContent));
  } finally {
    await p.close();
    await keyed.stop();
  }
  assert.deepEqual(errorsOf('key'), [], 'no request failed once the key was given');
});

// Attachments with a vision model: the shared data has no mmproj, so the
// page is told the server has vision (/web/info) and the chat request it
// sends is checked and answered here: image_url and video_url parts as data:
// URLs after the text, previews in the message.
test('images and videos are attached as image_url / video_url parts', { skip }, async () => {
  phase = 'attach';
  const p = await page.context().newPage();
  p.on('console', (m) => { if (m.type() === 'error') consoleErrors.push({ phase, text: m.text() }); });
  p.on('pageerror', (e) => consoleErrors.push({ phase, text: `uncaught: ${e.message}` }));
  await p.route('**/web/info', async (route) => {
    const r = await route.fetch();
    route.fulfill({ response: r, json: { ...(await r.json()), vision: true } });
  });
  let sent = null;
  await p.route('**/v1/chat/completions', (route) => {
    sent = route.request().postDataJSON();
    const chunk = (c) => `data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: c }, finish_reason: null }] })}\n\n`;
    route.fulfill({ status: 200, contentType: 'text/event-stream',
      body: chunk('A red ') + chunk('*bus*.') + 'data: [DONE]\n\n' });
  });
  await p.goto(server.url + '/');
  await p.waitForFunction(() => !document.getElementById('attach').disabled);
  await p.setInputFiles('#file', [path.join(shared, 'images', 'test-1.jpeg'), path.join(shared, 'video', 'sample.mp4')]);
  await p.waitForFunction(() => document.querySelectorAll('#attachments .chip').length === 2);
  await p.fill('#input', 'What is in these?');
  await p.screenshot({ path: path.join(shots, 'browser-attach.png') });
  await p.press('#input', 'Enter');
  await p.waitForSelector('.msg.assistant .tools');
  const user = sent.messages.at(-1);
  assert.equal(user.role, 'user');
  assert.deepEqual(user.content[0], { type: 'text', text: 'What is in these?' });
  assert.equal(user.content[1].type, 'image_url');
  assert.match(user.content[1].image_url.url, /^data:image\/jpeg;base64,\/9j\//);
  assert.equal(user.content[2].type, 'video_url');
  assert.match(user.content[2].video_url.url, /^data:video\/mp4;base64,/);
  assert.equal(sent.stream, true);
  assert.equal(await p.locator('.msg.user .thumbs img').count(), 1);
  assert.equal(await p.locator('.msg.user .thumbs video').count(), 1);
  assert.equal(await p.innerHTML('.msg.assistant .md'), '<p>A red <em>bus</em>.</p>');
  assert.equal(await p.locator('#attachments .chip').count(), 0, 'sent attachments leave the composer');
  await p.close();
  assert.deepEqual(errorsOf('attach'), []);
});

// The page's side of the voice agent against a scripted peer that speaks the
// OpenAI Realtime GA events (playwright's routeWebSocket stands in for the
// server): session setup, audio in, a spoken reply played as it streams, and
// barge-in - the user talks over the reply, the page stops playback, truncates
// the item to what was heard and cancels the response.
test('the voice agent speaks the Realtime GA protocol, with barge-in', { skip }, async () => {
  phase = 'voice-mock';
  const mock = await page.context().newPage();
  mock.on('console', (m) => { if (m.type() === 'error') consoleErrors.push({ phase, text: m.text() }); });
  mock.on('pageerror', (e) => consoleErrors.push({ phase, text: `uncaught: ${e.message}` }));
  const got = [];
  let appends = 0;
  let turn = false;
  const tone = Buffer.alloc(24000 * 2 * 2);   // 2 s of 440 Hz at 24 kHz, pcm16
  for (let i = 0; i < 48000; i++) tone.writeInt16LE(Math.round(8000 * Math.sin(2 * Math.PI * 440 * i / 24000)), i * 2);
  const ev = (o) => JSON.stringify(o);
  await mock.routeWebSocket((u) => u.pathname === '/v1/realtime' && !u.searchParams.has('intent'), (ws) => {
    ws.send(ev({ type: 'session.created', event_id: 'e0', session: { type: 'realtime', id: 'sess_mock',
      object: 'realtime.session', output_modalities: ['audio'] } }));
    ws.onMessage((raw) => {
      const m = JSON.parse(String(raw));
      got.push(m);
      if (m.type === 'session.update') ws.send(ev({ type: 'session.updated', session: m.session }));
      if (m.type !== 'input_audio_buffer.append' || ++appends !== 5 || turn) return;
      turn = true;
      ws.send(ev({ type: 'input_audio_buffer.speech_started', audio_start_ms: 100, item_id: 'item_u1' }));
      ws.send(ev({ type: 'input_audio_buffer.speech_stopped', audio_end_ms: 400, item_id: 'item_u1' }));
      ws.send(ev({ type: 'conversation.item.input_audio_transcription.completed', item_id: 'item_u1',
        content_index: 0, transcript: 'Turn on the kitchen lights.' }));
      ws.send(ev({ type: 'response.created', response: { id: 'resp_1', status: 'in_progress' } }));
      ws.send(ev({ type: 'response.output_item.added', response_id: 'resp_1', output_index: 0,
        item: { id: 'item_a1', type: 'message', role: 'assistant' } }));
      for (const d of ['Okay, ', 'the **kitchen** lights are on.'])
        ws.send(ev({ type: 'response.output_audio_transcript.delta', response_id: 'resp_1', item_id: 'item_a1',
          output_index: 0, content_index: 0, delta: d }));
      for (let off = 0; off < tone.length; off += 9600)
        ws.send(ev({ type: 'response.output_audio.delta', response_id: 'resp_1', item_id: 'item_a1',
          output_index: 0, content_index: 0, delta: tone.subarray(off, off + 9600).toString('base64') }));
      // the user talks over the reply 0.6 s into it
      setTimeout(() => ws.send(ev({ type: 'input_audio_buffer.speech_started', audio_start_ms: 900,
        item_id: 'item_u2' })), 600);
    });
  });
  await mock.goto(server.url + '/');
  await mock.waitForFunction(() => /ready/.test(document.getElementById('status-text').textContent));
  await mock.click('#voice-agent');
  const t0 = Date.now();
  while (!got.some((m) => m.type === 'conversation.item.truncate') && Date.now() - t0 < 20000)
    await new Promise((r) => setTimeout(r, 50));
  await mock.waitForTimeout(200);
  await mock.screenshot({ path: path.join(shots, 'browser-voice-agent.png') });

  const update = got.find((m) => m.type === 'session.update');
  assert.ok(update, 'session.update sent');
  assert.equal(update.session.type, 'realtime');
  assert.deepEqual(update.session.audio.input.format, { type: 'audio/pcm', rate: 24000 });
  assert.deepEqual(update.session.audio.output.format, { type: 'audio/pcm', rate: 24000 });
  assert.equal(update.session.audio.input.turn_detection.type, 'server_vad');
  assert.ok(update.session.audio.output.voice);
  const append = got.find((m) => m.type === 'input_audio_buffer.append');
  assert.ok(append && Buffer.from(append.audio, 'base64').length >= 4000, 'microphone audio in ~100 ms pcm16 chunks');
  const trunc = got.find((m) => m.type === 'conversation.item.truncate');
  assert.ok(trunc, `barge-in truncates the reply (sent: ${[...new Set(got.map((m) => m.type))]})`);
  assert.equal(trunc.item_id, 'item_a1');
  assert.equal(trunc.content_index, 0);
  assert.ok(trunc.audio_end_ms > 0 && trunc.audio_end_ms < 2000, `heard ${trunc.audio_end_ms} ms of 2000`);
  assert.ok(got.some((m) => m.type === 'response.cancel'), 'the response in progress is cancelled');
  assert.ok(await mock.evaluate(() => globalThis.omniStats.agentSamples) >= 48000, 'the reply was played');
  assert.match(await mock.textContent('.msg.user.voice .text'), /kitchen lights/);
  assert.equal(await mock.textContent('.msg.assistant.voice .md'), 'Okay, the kitchen lights are on.');
  assert.equal(await mock.innerHTML('.msg.assistant.voice .md strong'), 'kitchen');
  assert.match(await mock.textContent('.msg.assistant.voice .meta'), /interrupted/);
  await mock.click('#voice-agent');   // end
  assert.equal(await mock.evaluate(() => document.body.dataset.voice), 'off');
  await mock.close();
  assert.deepEqual(errorsOf('voice-mock'), []);
});

test('the voice button talks with the agent', { skip }, async (t) => {
  phase = 'voice';
  await page.click('#voice-agent');
  await page.waitForFunction(() => document.body.dataset.voice === 'unavailable' ||
    (globalThis.omniStats.agentSamples || 0) > 0, null, { timeout: 90000 });
  await shot('voice');
  if (await page.evaluate(() => document.body.dataset.voice) === 'unavailable') {
    const why = await page.evaluate(() => [...document.querySelectorAll('.note')].pop()?.textContent);
    assert.match(why, /voice agent unavailable/i, 'the page says why');
    t.skip(`the server has no Realtime conversation mode yet: ${why}`);
    return;
  }
  assert.ok(await stat('agentSamples') > 0, 'agent audio played');
  await page.click('#voice-agent');   // end
  assert.deepEqual(errorsOf('voice'), []);
});
