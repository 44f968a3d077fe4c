// app.js - the omniserve playground: streaming chat with Markdown, model and
// sampling controls, image/video attachments (vision model), live dictation
// over the Realtime transcription WebSocket, a voice-agent conversation over
// the Realtime WebSocket (GA events: mic in, speaker out, barge-in) and a
// play button on every answer (/v1/audio/speech). Plain ES modules, no
// framework, no build step; everything goes to this server's own API.

import { renderMarkdown } from './markdown.js';
import {
  audioContext, stats, PcmPlayer, playEncoded, Mic, base64ToBytes, bytesToBase64, RATE,
} from './audio.js';

const $ = (id) => document.getElementById(id);
const KEY_STORE = 'omniserve.apiKey';
const SETTINGS_STORE = 'omniserve.settings';
const MAX_ATTACH_BYTES = 24 << 20;   // under the server's default --max-body once base64'd

const state = {
  key: localStorage.getItem(KEY_STORE) || '',
  info: null,          // GET /web/info: model, vision, stt, vad, tts, key_ok
  history: [],         // OpenAI messages of this conversation (without the system prompt)
  abort: null,         // the chat request in flight
  attachments: [],     // [{kind, name, url (data:), preview (blob:), size}]
  dictation: null,     // live transcription session
  voice: null,         // voice-agent session
};

// ---- small helpers ---------------------------------------------------------

function authHeaders(extra = {}) {
  const h = { ...extra };
  if (state.key) h.authorization = `Bearer ${state.key}`;
  return h;
}

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

async function errorText(r) {
  const t = await r.text().catch(() => '');
  try {
    const j = JSON.parse(t);
    if (j.error && j.error.message) return `${r.status}: ${j.error.message}`;
  } catch { /* not JSON */ }
  return `${r.status} ${r.statusText}${t ? `: ${t.slice(0, 300)}` : ''}`;
}

function wsUrl(pathAndQuery) {
  return `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}${pathAndQuery}`;
}

// Browsers cannot set headers on a WebSocket: the key travels as a
// subprotocol, as OpenAI's browser clients send it.
function wsProtocols() {
  return state.key ? ['realtime', `openai-insecure-api-key.${state.key}`] : ['realtime'];
}

function setStatus(kind, text) {
  $('status-dot').className = `dot ${kind}`;
  $('status-text').textContent = text;
}

function scrollLog() {
  const log = $('log');
  if (log.scrollHeight - log.scrollTop - log.clientHeight < 160) log.scrollTop = log.scrollHeight;
}

function note(text, kind = 'info') {
  $('empty').classList.add('hidden');
  const n = el('div', `note ${kind}`, text);
  $('log').append(n);
  scrollLog();
  return n;
}

// ---- settings ----------------------------------------------------------------

const PARAMS = ['system', 'temperature', 'top_p', 'max_tokens', 'seed', 'voice', 'speed', 'speech-format'];

function loadSettings() {
  let saved = {};
  try { saved = JSON.parse(localStorage.getItem(SETTINGS_STORE) || '{}'); } catch { /* reset */ }
  for (const id of PARAMS) if (saved[id] !== undefined && $(id)) $(id).value = saved[id];
  for (const id of ['temperature', 'top_p', 'speed']) $(`${id}-v`).textContent = $(id).value;
  $('api-key').value = state.key;
}

function saveSettings() {
  const s = {};
  for (const id of PARAMS) s[id] = $(id).value;
  localStorage.setItem(SETTINGS_STORE, JSON.stringify(s));
}

function sampling() {
  const p = {
    temperature: Number($('temperature').value),
    top_p: Number($('top_p').value),
  };
  const max = parseInt($('max_tokens').value, 10);
  if (max > 0) p.max_tokens = max;
  const seed = $('seed').value.trim();
  if (seed !== '' && Number.isFinite(Number(seed))) p.seed = Math.trunc(Number(seed));
  return p;
}

// ---- server state -------------------------------------------------------------

async function refresh() {
  let health;
  try {
    const r = await fetch('/health');
    health = await r.json();
  } catch {
    setStatus('down', 'server unreachable');
    setTimeout(refresh, 3000);
    return;
  }
  try {
    const r = await fetch('/web/info', { headers: authHeaders() });
    state.info = r.ok ? await r.json() : null;
  } catch { state.info = null; }
  const info = state.info || {};
  if (!info.key_ok) {
    setStatus('warn', state.key ? 'API key rejected' : 'API key required');
    openSettings(true);
    $('api-key').focus();
    return;
  }
  if (health.status === 'ok') setStatus('ok', `ready · ${health.model}`);
  else if (health.status === 'loading') setStatus('warn', 'loading the model…');
  else setStatus('down', health.message ? 'no chat model' : health.status);
  if (health.status === 'loading') setTimeout(refresh, 1000);

  const caps = [];
  if (info.model) caps.push('chat');
  if (info.vision) caps.push('vision');
  if (info.stt) caps.push(info.vad ? 'speech in (VAD)' : 'speech in');
  if (info.tts) caps.push('speech out');
  $('caps').textContent = caps.length ? caps.join(' · ') : 'nothing loaded yet';
  $('attach').disabled = !info.vision;
  $('attach').title = info.vision ? 'Attach an image or video'
    : 'Attach an image or video (start the server with --mmproj)';
  $('mic').disabled = !info.stt;
  $('mic').title = info.stt ? 'Dictate: live transcription into the message box'
    : 'Dictation needs a speech model (serve --stt-model)';
  $('voice-agent').disabled = !info.stt;
  $('voice-agent').title = info.stt ? 'Voice conversation: speak, hear the answer, talk over it to interrupt'
    : 'The voice agent needs a speech model (serve --stt-model)';

  if (info.model) {
    try {
      const r = await fetch('/v1/models', { headers: authHeaders() });
      if (r.ok) {
        const list = await r.json();
        const sel = $('model');
        const keep = sel.value;
        sel.replaceChildren(...list.data.map((m) => {
          const o = el('option', '', m.id);
          o.value = m.id;
          return o;
        }));
        if (keep && list.data.some((m) => m.id === keep)) sel.value = keep;
        const m = list.data.find((x) => x.id === sel.value);
        if (m && m.max_model_len) {
          $('max_tokens').max = String(m.max_model_len);
          $('max_tokens').placeholder = `up to the context (${m.max_model_len})`;
        }
      }
    } catch { /* the status line already tells */ }
  }
  if (info.tts) {
    try {
      const r = await fetch('/v1/audio/voices', { headers: authHeaders() });
      if (r.ok) {
        const list = await r.json();
        const sel = $('voice');
        const keep = sel.value;
        sel.replaceChildren(...list.data.map((v) => {
          const o = el('option', '', v.name && v.name !== v.id ? `${v.id} — ${v.name}` : v.id);
          o.value = v.id;
          return o;
        }));
        if (list.data.some((v) => v.id === keep)) sel.value = keep;
      }
    } catch { /* keep alloy */ }
  }
}

function openSettings(open) {
  document.body.classList.toggle('settings-closed', !open);
  $('settings-toggle').setAttribute('aria-expanded', String(open));
}

// ---- chat ------------------------------------------------------------------------

function messageEl(role) {
  $('empty').classList.add('hidden');
  const m = el('div', `msg ${role}`);
  const body = el('div', 'body');
  m.append(body);
  $('log').append(m);
  return { m, body };
}

function addUserMessage(text, attachments = []) {
  const { m, body } = messageEl('user');
  if (attachments.length) {
    const strip = el('div', 'thumbs');
    for (const a of attachments) {
      const t = a.kind === 'video' ? el('video') : el('img');
      t.src = a.preview;
      if (a.kind === 'video') t.muted = true;
      else t.alt = a.name;
      strip.append(t);
    }
    body.append(strip);
  }
  body.append(el('div', 'text', text));
  scrollLog();
  return { m, body };
}

// An assistant bubble whose Markdown is re-rendered (once per frame) as
// text streams in; tools() adds the play and copy buttons at the end.
function assistantMessage() {
  const { m, body } = messageEl('assistant');
  const think = el('details', 'think hidden');
  think.append(el('summary', '', 'reasoning'));
  const thinkText = el('div', 'think-text');
  think.append(thinkText);
  const md = el('div', 'md');
  const meta = el('div', 'meta');
  body.append(think, md, meta);
  const a = {
    m, text: '', reasoning: '', pending: false,
    append(delta, reasoning = false) {
      if (reasoning) this.reasoning += delta;
      else this.text += delta;
      if (!this.pending) {
        this.pending = true;
        requestAnimationFrame(() => this.render());
      }
    },
    render() {
      this.pending = false;
      if (this.reasoning) {
        think.classList.remove('hidden');
        thinkText.textContent = this.reasoning;
      }
      md.innerHTML = renderMarkdown(this.text);
      scrollLog();
    },
    setMeta(text) { meta.textContent = text; },
    error(text) {
      const e = el('div', 'error', text);
      body.insertBefore(e, meta);
      m.classList.add('failed');
    },
    tools() {
      this.render();
      if (!this.text.trim()) return;
      const bar = el('div', 'tools');
      const play = el('button', 'small play', 'Play');
      play.type = 'button';
      play.title = 'Read this answer aloud';
      play.addEventListener('click', () => speak(this.text, play));
      const copy = el('button', 'small', 'Copy');
      copy.type = 'button';
      copy.addEventListener('click', () => {
        navigator.clipboard?.writeText(this.text).then(() => { copy.textContent = 'Copied'; },
          () => { copy.textContent = 'Copy failed'; });
      });
      if (!state.info || !state.info.tts) {
        play.disabled = true;
        play.title = 'Speech synthesis is off on this server (--no-tts)';
      }
      bar.append(play, copy);
      body.append(bar);
    },
  };
  return a;
}

// Server-sent events from a fetch body: calls onData(data string) per event.
async function readSSE(response, onData) {
  const reader = response.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let cut;
    while ((cut = buf.search(/\r?\n\r?\n/)) >= 0) {
      const block = buf.slice(0, cut);
      buf = buf.slice(cut).replace(/^\r?\n\r?\n/, '');
      const data = block.split(/\r?\n/).filter((l) => l.startsWith('data:'))
        .map((l) => l.slice(l[5] === ' ' ? 6 : 5)).join('\n');
      if (data && onData(data) === false) {
        reader.cancel().catch(() => {});
        return;
      }
    }
  }
}

async function sendChat(text) {
  const attachments = state.attachments;
  state.attachments = [];
  renderAttachments();
  let content = text;
  if (attachments.length) {
    content = [{ type: 'text', text }];
    for (const a of attachments) {
      content.push(a.kind === 'video'
        ? { type: 'video_url', video_url: { url: a.url } }
        : { type: 'image_url', image_url: { url: a.url } });
    }
  }
  addUserMessage(text, attachments);
  state.history.push({ role: 'user', content });
  const ans = assistantMessage();
  const messages = [];
  const system = $('system').value.trim();
  if (system) messages.push({ role: 'system', content: system });
  messages.push(...state.history);
  const body = {
    model: $('model').value || undefined,
    messages,
    stream: true,
    stream_options: { include_usage: true },
    ...sampling(),
  };
  const ctl = new AbortController();
  state.abort = ctl;
  setBusy(true);
  const t0 = performance.now();
  let tFirst = 0;
  let usage = null;
  let finish = null;
  try {
    const r = await fetch('/v1/chat/completions', {
      method: 'POST',
      headers: authHeaders({ 'content-type': 'application/json' }),
      body: JSON.stringify(body),
      signal: ctl.signal,
    });
    if (!r.ok) throw new Error(await errorText(r));
    await readSSE(r, (data) => {
      if (data === '[DONE]') return false;
      let ev;
      try { ev = JSON.parse(data); } catch { return true; }
      if (ev.error) throw new Error(ev.error.message || 'stream error');
      if (ev.usage) usage = ev.usage;
      const ch = ev.choices && ev.choices[0];
      if (!ch) return true;
      const d = ch.delta || {};
      if (d.reasoning_content) ans.append(d.reasoning_content, true);
      if (d.content) {
        if (!tFirst) tFirst = performance.now();
        stats.chatDeltas++;
        ans.append(d.content);
      }
      if (ch.finish_reason) finish = ch.finish_reason;
      return true;
    });
  } catch (e) {
    if (e.name === 'AbortError') ans.setMeta('stopped');
    else ans.error(String(e.message || e));
  } finally {
    state.abort = null;
    setBusy(false);
  }
  ans.tools();
  if (ans.text) state.history.push({ role: 'assistant', content: ans.text });
  if (usage) {
    const secs = (performance.now() - (tFirst || t0)) / 1000;
    const tps = usage.completion_tokens > 1 && secs > 0 ? ` · ${(usage.completion_tokens / secs).toFixed(1)} tok/s` : '';
    const ttft = tFirst ? ` · first token ${Math.round(tFirst - t0)} ms` : '';
    ans.setMeta(`${usage.prompt_tokens} prompt + ${usage.completion_tokens} tokens${ttft}${tps}` +
      (finish && finish !== 'stop' ? ` · ${finish}` : ''));
  }
}

function setBusy(busy) {
  $('send').textContent = busy ? 'Stop' : 'Send';
  $('send').classList.toggle('stop', busy);
  document.body.classList.toggle('busy', busy);
}

// ---- attachments ---------------------------------------------------------------

function readDataUrl(file) {
  return new Promise((resolve, reject) => {
    const fr = new FileReader();
    fr.onload = () => resolve(fr.result);
    fr.onerror = () => reject(fr.error);
    fr.readAsDataURL(file);
  });
}

async function addFiles(files) {
  for (const f of files) {
    const kind = f.type.startsWith('video/') ? 'video' : f.type.startsWith('image/') ? 'image' : null;
    if (!kind) { note(`${f.name}: only images and videos can be attached`, 'warn'); continue; }
    const total = state.attachments.reduce((n, a) => n + a.size, 0) + f.size;
    if (total > MAX_ATTACH_BYTES) {
      note(`${f.name}: attachments over ${MAX_ATTACH_BYTES >> 20} MB do not fit one request`, 'warn');
      continue;
    }
    state.attachments.push({ kind, name: f.name, size: f.size, url: await readDataUrl(f),
      preview: URL.createObjectURL(f) });
  }
  renderAttachments();
}

function renderAttachments() {
  const box = $('attachments');
  box.replaceChildren(...state.attachments.map((a, i) => {
    const chip = el('span', 'chip');
    const t = a.kind === 'video' ? el('video') : el('img');
    t.src = a.preview;
    if (a.kind === 'video') t.muted = true;
    const x = el('button', 'x', '×');
    x.type = 'button';
    x.title = `Remove ${a.name}`;
    x.addEventListener('click', () => {
      state.attachments.splice(i, 1);
      renderAttachments();
    });
    chip.append(t, el('span', 'name', a.name), x);
    return chip;
  }));
}

// ---- speech out: the play button -------------------------------------------------

// Markdown to something worth saying: no code blocks, marks or link targets.
function speakable(md) {
  return md.replace(/```[\s\S]*?(```|$)/g, ' (code) ')
    .replace(/`([^`]*)`/g, '$1')
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1')
    .replace(/^\s{0,3}(#{1,6}|[-*+]|\d+[.)]|>)\s+/gm, '')
    .replace(/[*_~]{1,3}/g, '')
    .replace(/\s+/g, ' ')
    .trim()
    .slice(0, 4096);
}

let speaking = null;   // { stop(), button }

async function speak(text, button) {
  if (speaking) {
    const was = speaking.button;
    speaking.stop();
    if (was === button) return;
  }
  const input = speakable(text);
  if (!input) return;
  audioContext();   // inside the click: allowed to start sound
  const format = $('speech-format').value;
  const ctl = new AbortController();
  let player = null;
  let encoded = null;
  const done = () => {
    button.textContent = 'Play';
    button.classList.remove('on');
    if (speaking && speaking.button === button) speaking = null;
  };
  speaking = {
    button,
    stop() {
      ctl.abort();
      if (player) player.stop();
      if (encoded) encoded.stop();
      done();
    },
  };
  button.textContent = 'Stop';
  button.classList.add('on');
  try {
    const r = await fetch('/v1/audio/speech', {
      method: 'POST',
      headers: authHeaders({ 'content-type': 'application/json' }),
      body: JSON.stringify({
        model: 'tts-1', input, voice: $('voice').value, speed: Number($('speed').value),
        response_format: format, stream_format: 'audio',
      }),
      signal: ctl.signal,
    });
    if (!r.ok) throw new Error(await errorText(r));
    if (format === 'pcm') {
      let received = false;
      player = new PcmPlayer({
        rate: RATE,
        onSamples: (n) => { stats.speechSamples += n; },
        onEnded: () => { if (received) done(); },
      });
      const reader = r.body.getReader();
      for (;;) {
        const { value, done: end } = await reader.read();
        if (end) break;
        player.push(value);
      }
      received = true;
      if (!player.playing) done();
    } else {
      encoded = await playEncoded(await r.arrayBuffer(), (n) => { stats.speechSamples += n; });
      await encoded.ended;
      done();
    }
  } catch (e) {
    if (e.name !== 'AbortError') note(`Speech failed: ${e.message || e}`, 'error');
    done();
  }
}

// ---- live strip (dictation and voice) ------------------------------------------------

function showLive(label, text = '') {
  $('live').classList.remove('hidden');
  $('live-label').textContent = label;
  $('live-text').textContent = text;
}

function hideLive() {
  $('live').classList.add('hidden');
  $('meter-bar').style.width = '0';
}

function meter(level) {
  $('meter-bar').style.width = `${Math.min(100, Math.round(Math.sqrt(level) * 140))}%`;
}

// ---- speech in: dictation over /v1/realtime?intent=transcription ---------------------

async function startDictation() {
  const vad = !!(state.info && state.info.vad);
  const d = { ws: null, mic: null, partial: '', closing: false, finals: 0 };
  state.dictation = d;
  $('mic').classList.add('on');
  $('mic').textContent = 'Stop';
  showLive('Connecting', '');
  const ws = new WebSocket(wsUrl('/v1/realtime?intent=transcription'), wsProtocols());
  d.ws = ws;
  ws.onmessage = (m) => {
    let ev;
    try { ev = JSON.parse(m.data); } catch { return; }
    switch (ev.type) {
      case 'conversation.item.input_audio_transcription.delta':
        d.partial = ev.partial !== undefined ? ev.partial : d.partial + (ev.delta || '');
        $('live-text').textContent = d.partial;
        break;
      case 'conversation.item.input_audio_transcription.completed': {
        const t = (ev.transcript || '').trim();
        d.partial = '';
        d.finals++;
        if (t) {
          const box = $('input');
          box.value = box.value && !/\s$/.test(box.value) ? `${box.value} ${t}` : box.value + t;
          $('live-text').textContent = t;
        }
        if (d.closing) stopDictation();
        break;
      }
      case 'input_audio_buffer.speech_started':
        $('live-label').textContent = 'Hearing you';
        break;
      case 'input_audio_buffer.speech_stopped':
        $('live-label').textContent = 'Transcribing';
        break;
      case 'error':
        note(`Transcription: ${(ev.error && ev.error.message) || 'error'}`, 'error');
        break;
      default:
        break;
    }
  };
  ws.onclose = () => {
    if (state.dictation === d) {
      if (!d.started) note('Dictation: the server refused the connection (is a speech model loaded, is the API key right?)', 'error');
      stopDictation();
    }
  };
  await new Promise((resolve) => {
    ws.addEventListener('open', resolve, { once: true });
    ws.addEventListener('close', resolve, { once: true });
  });
  if (ws.readyState !== WebSocket.OPEN || state.dictation !== d) return;
  d.started = true;
  ws.send(JSON.stringify({
    type: 'session.update',
    session: {
      type: 'transcription',
      audio: {
        input: {
          format: { type: 'audio/pcm', rate: RATE },
          turn_detection: vad ? { type: 'server_vad' } : null,
        },
      },
    },
  }));
  d.mic = new Mic({
    onChunk: (pcm) => {
      if (ws.readyState === WebSocket.OPEN && !d.closing)
        ws.send(JSON.stringify({ type: 'input_audio_buffer.append', audio: bytesToBase64(pcm) }));
    },
    onLevel: meter,
  });
  try {
    await d.mic.start();
    showLive(vad ? 'Listening' : 'Recording (press Stop to transcribe)', '');
  } catch (e) {
    note(`Microphone: ${e.message || e}`, 'error');
    stopDictation();
  }
}

// Stop: without server VAD the recording is committed and its transcript
// awaited (a few seconds at most); with VAD a turn in progress finishes too.
function finishDictation() {
  const d = state.dictation;
  if (!d || d.closing) { stopDictation(); return; }
  d.closing = true;
  if (d.mic) d.mic.stop();
  $('live-label').textContent = 'Transcribing';
  if (d.ws.readyState === WebSocket.OPEN) {
    if (!state.info.vad) d.ws.send(JSON.stringify({ type: 'input_audio_buffer.commit' }));
    else if (!d.partial) { stopDictation(); return; }
  }
  setTimeout(() => { if (state.dictation === d) stopDictation(); }, 4000);
}

function stopDictation() {
  const d = state.dictation;
  if (!d) return;
  state.dictation = null;
  if (d.mic) d.mic.stop();
  if (d.ws && d.ws.readyState <= WebSocket.OPEN) d.ws.close();
  $('mic').classList.remove('on');
  $('mic').textContent = 'Mic';
  if (!state.voice) hideLive();
}

// ---- the voice agent: /v1/realtime conversation (OpenAI Realtime GA events) -----------

function voiceUnavailable(why) {
  document.body.dataset.voice = 'unavailable';
  note(`Voice agent unavailable: ${why}`, 'warn');
  stopVoice();
  document.body.dataset.voice = 'unavailable';
}

function voiceSend(v, ev) {
  if (v.ws.readyState === WebSocket.OPEN) v.ws.send(JSON.stringify(ev));
}

// The user talked over the agent: silence what is queued, tell the server how
// much was heard (the rest of the item is dropped from the conversation) and
// cancel the response if it is still being made.
function bargeIn(v) {
  if (v.player && v.player.playing) {
    const heard = v.player.playedMs();
    v.player.stop();
    v.player = null;
    if (v.audioItem) {
      voiceSend(v, { type: 'conversation.item.truncate', item_id: v.audioItem, content_index: 0,
        audio_end_ms: heard });
    }
    if (v.bot) v.bot.setMeta('interrupted');
  }
  if (v.responseActive) voiceSend(v, { type: 'response.cancel' });
}

function voiceEvent(v, ev) {
  switch (ev.type) {
    case 'session.created':
      if (!ev.session || ev.session.type !== 'realtime') {
        voiceUnavailable('this server speaks only the transcription mode of the Realtime API');
        return;
      }
      v.ready = true;
      startVoiceAudio(v);
      return;
    case 'transcription_session.created':
      voiceUnavailable('this server has no conversation mode on /v1/realtime yet (dictation with the Mic button works)');
      return;
    case 'session.updated':
      showLive('Listening', 'speak; talk over the answer to interrupt');
      return;
    case 'input_audio_buffer.speech_started':
      bargeIn(v);
      $('live-label').textContent = 'Hearing you';
      v.user = addUserMessage('…');
      v.user.m.classList.add('voice');
      return;
    case 'input_audio_buffer.speech_stopped':
      $('live-label').textContent = 'Thinking';
      return;
    case 'conversation.item.input_audio_transcription.delta':
      if (v.user) v.user.body.lastChild.textContent = ev.partial || ((v.userText || '') + (ev.delta || ''));
      v.userText = (v.userText || '') + (ev.delta || '');
      return;
    case 'conversation.item.input_audio_transcription.completed': {
      const t = (ev.transcript || '').trim();
      if (!v.user) { v.user = addUserMessage(''); v.user.m.classList.add('voice'); }
      v.user.body.lastChild.textContent = t || '(nothing heard)';
      if (t) state.history.push({ role: 'user', content: t });
      v.user = null;
      v.userText = '';
      return;
    }
    case 'response.created':
      v.responseActive = true;
      v.bot = assistantMessage();
      v.bot.m.classList.add('voice');
      return;
    case 'response.output_item.added':
      if (ev.item && ev.item.type === 'message') v.audioItem = ev.item.id;
      return;
    case 'response.output_audio.delta': {
      if (!v.player) {
        v.player = new PcmPlayer({
          rate: v.outRate,
          onSamples: (n) => { stats.agentSamples += n; },
          onEnded: () => { if (!v.responseActive) $('live-label').textContent = 'Listening'; },
        });
      }
      if (ev.item_id) v.audioItem = ev.item_id;
      v.player.push(base64ToBytes(ev.delta || ''));
      $('live-label').textContent = 'Speaking';
      return;
    }
    case 'response.output_audio_transcript.delta':
    case 'response.output_text.delta':
      if (!v.bot) { v.bot = assistantMessage(); v.bot.m.classList.add('voice'); }
      v.bot.append(ev.delta || '');
      return;
    case 'response.done': {
      v.responseActive = false;
      const bot = v.bot;
      v.bot = null;
      if (bot) {
        bot.tools();
        if (bot.text) state.history.push({ role: 'assistant', content: bot.text });
        const st = ev.response && ev.response.status;
        if (st && st !== 'completed') bot.setMeta(st);
      }
      return;
    }
    case 'error': {
      const e = ev.error || {};
      const msg = e.message || 'error';
      if (!v.ready || /unsupported|not supported|unavailable|not available/i.test(`${e.code || ''} ${msg}`)) {
        voiceUnavailable(msg);
        return;
      }
      if (e.code === 'response_cancel_not_active') return;   // barge-in raced the end
      note(`Voice agent: ${msg}`, 'error');
      return;
    }
    default:
      return;
  }
}

async function startVoiceAudio(v) {
  const system = $('system').value.trim();
  voiceSend(v, {
    type: 'session.update',
    session: {
      type: 'realtime',
      model: $('model').value || undefined,
      output_modalities: ['audio'],
      instructions: system || 'You are a helpful voice assistant. Answer briefly.',
      audio: {
        input: {
          format: { type: 'audio/pcm', rate: RATE },
          transcription: { model: 'whisper-1' },
          turn_detection: { type: 'server_vad', create_response: true, interrupt_response: true },
        },
        output: {
          format: { type: 'audio/pcm', rate: RATE },
          voice: $('voice').value,
          speed: Number($('speed').value),
        },
      },
    },
  });
  v.mic = new Mic({
    onChunk: (pcm) => voiceSend(v, { type: 'input_audio_buffer.append', audio: bytesToBase64(pcm) }),
    onLevel: meter,
  });
  try {
    await v.mic.start();
    document.body.dataset.voice = 'active';
    showLive('Listening', 'speak; talk over the answer to interrupt');
  } catch (e) {
    note(`Microphone: ${e.message || e}`, 'error');
    stopVoice();
  }
}

function startVoice() {
  if (state.dictation) stopDictation();
  audioContext();   // inside the click: allowed to start sound
  const model = $('model').value;
  const ws = new WebSocket(wsUrl(`/v1/realtime${model ? `?model=${encodeURIComponent(model)}` : ''}`),
    wsProtocols());
  const v = { ws, ready: false, responseActive: false, outRate: RATE, player: null, mic: null,
    audioItem: null, bot: null, user: null };
  state.voice = v;
  document.body.dataset.voice = 'connecting';
  $('voice-agent').classList.add('on');
  $('voice-agent').textContent = 'End';
  showLive('Connecting', '');
  const timer = setTimeout(() => {
    if (state.voice === v && !v.ready) voiceUnavailable('the server did not start a session');
  }, 8000);
  ws.onmessage = (m) => {
    let ev;
    try { ev = JSON.parse(m.data); } catch { return; }
    if (state.voice === v) voiceEvent(v, ev);
  };
  ws.onclose = (e) => {
    clearTimeout(timer);
    if (state.voice !== v) return;
    if (!v.ready) voiceUnavailable(`the server refused the Realtime connection${e.reason ? ` (${e.reason})` : ''}; it needs a chat model, --stt-model and speech synthesis`);
    else { note('Voice agent: the connection closed', 'warn'); stopVoice(); }
  };
}

function stopVoice() {
  const v = state.voice;
  if (!v) return;
  state.voice = null;
  document.body.dataset.voice = 'off';
  if (v.mic) v.mic.stop();
  if (v.player) v.player.stop();
  if (v.ws.readyState <= WebSocket.OPEN) v.ws.close();
  $('voice-agent').classList.remove('on');
  $('voice-agent').textContent = 'Voice';
  if (!state.dictation) hideLive();
}

// ---- wiring ------------------------------------------------------------------------------

function init() {
  loadSettings();
  for (const id of ['temperature', 'top_p', 'speed']) {
    $(id).addEventListener('input', () => { $(`${id}-v`).textContent = $(id).value; });
  }
  for (const id of PARAMS) $(id).addEventListener('change', saveSettings);
  $('api-key').addEventListener('change', () => {
    state.key = $('api-key').value.trim();
    if (state.key) localStorage.setItem(KEY_STORE, state.key);
    else localStorage.removeItem(KEY_STORE);
    refresh();
  });
  $('key-form').addEventListener('submit', (e) => {
    e.preventDefault();
    $('api-key').dispatchEvent(new Event('change'));
  });
  $('settings-toggle').addEventListener('click', () => {
    openSettings(document.body.classList.contains('settings-closed'));
  });
  if (window.matchMedia('(max-width: 820px)').matches) openSettings(false);
  $('clear').addEventListener('click', () => {
    if (state.abort) state.abort.abort();
    if (speaking) speaking.stop();
    state.history = [];
    $('log').replaceChildren($('empty'));
    $('empty').classList.remove('hidden');
  });
  $('composer').addEventListener('submit', (e) => {
    e.preventDefault();
    if (state.abort) { state.abort.abort(); return; }
    const text = $('input').value.trim();
    if (!text && !state.attachments.length) return;
    $('input').value = '';
    sendChat(text);
  });
  $('input').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      $('composer').requestSubmit();
    }
  });
  $('attach').addEventListener('click', () => $('file').click());
  $('file').addEventListener('change', () => {
    addFiles([...$('file').files]);
    $('file').value = '';
  });
  const composer = $('composer');
  composer.addEventListener('dragover', (e) => {
    if (state.info && state.info.vision) { e.preventDefault(); composer.classList.add('drop'); }
  });
  composer.addEventListener('dragleave', () => composer.classList.remove('drop'));
  composer.addEventListener('drop', (e) => {
    composer.classList.remove('drop');
    if (!state.info || !state.info.vision) return;
    e.preventDefault();
    addFiles([...e.dataTransfer.files]);
  });
  $('mic').addEventListener('click', () => {
    if (state.dictation) finishDictation();
    else startDictation();
  });
  $('voice-agent').addEventListener('click', () => {
    if (state.voice) stopVoice();
    else startVoice();
  });
  document.body.dataset.voice = 'off';
  refresh();
}

init();
