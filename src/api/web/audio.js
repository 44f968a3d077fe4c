// audio.js - sound for the playground, all through the Web Audio API:
// PcmPlayer plays 16-bit PCM as it streams in (a spoken answer from
// /v1/audio/speech, the voice agent's response.output_audio.delta), playEncoded
// plays a whole encoded file (mp3, wav), and Mic captures the microphone as
// 24 kHz PCM16 chunks for the Realtime WebSocket (mic-worklet.js resamples).

export const RATE = 24000;   // OpenAI's pcm16 rate, both directions

let sharedCtx = null;
// One AudioContext for the page, made (or resumed) from a user gesture.
export function audioContext() {
  if (!sharedCtx) sharedCtx = new AudioContext({ latencyHint: 'interactive' });
  if (sharedCtx.state === 'suspended') sharedCtx.resume().catch(() => {});
  return sharedCtx;
}

// Counters the browser test reads (and a curious user in the console).
export const stats = (globalThis.omniStats ??= {
  speechSamples: 0, agentSamples: 0, micChunks: 0, chatDeltas: 0,
});

// Little-endian int16 bytes -> Float32 samples in [-1, 1).
export function pcm16ToFloat(bytes) {
  const n = bytes.byteLength >> 1;
  const dv = new DataView(bytes.buffer, bytes.byteOffset, n * 2);
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = dv.getInt16(i * 2, true) / 32768;
  return out;
}

export function base64ToBytes(b64) {
  const bin = atob(b64);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

export function bytesToBase64(bytes) {
  let bin = '';
  for (let i = 0; i < bytes.length; i += 0x8000)
    bin += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  return btoa(bin);
}

// Streams PCM16 chunks into gap-free playback: each chunk becomes a buffer
// source scheduled right after the previous one. stop() silences everything
// queued (barge-in); playedMs() says how much of the stream was heard.
export class PcmPlayer {
  constructor({ rate = RATE, onSamples = null, onEnded = null } = {}) {
    this.ctx = audioContext();
    this.rate = rate;
    this.onSamples = onSamples;
    this.onEnded = onEnded;
    this.gain = this.ctx.createGain();
    this.gain.connect(this.ctx.destination);
    this.sources = new Set();
    this.next = 0;          // context time where the next chunk starts
    this.startedAt = -1;    // context time of the first sample
    this.samples = 0;       // samples queued
    this.carry = null;      // an odd byte left from the last chunk
    this.stopped = false;
  }

  push(bytes) {
    if (this.stopped) return;
    if (this.carry) {
      const joined = new Uint8Array(bytes.length + 1);
      joined[0] = this.carry[0];
      joined.set(bytes, 1);
      bytes = joined;
      this.carry = null;
    }
    if (bytes.length & 1) {
      this.carry = bytes.slice(bytes.length - 1);
      bytes = bytes.subarray(0, bytes.length - 1);
    }
    if (!bytes.length) return;
    const pcm = pcm16ToFloat(bytes);
    const buf = this.ctx.createBuffer(1, pcm.length, this.rate);
    buf.copyToChannel(pcm, 0);
    const src = this.ctx.createBufferSource();
    src.buffer = buf;
    src.connect(this.gain);
    const now = this.ctx.currentTime;
    if (this.next < now + 0.02) this.next = now + 0.05;   // (re)start with a little slack
    if (this.startedAt < 0) this.startedAt = this.next;
    src.start(this.next);
    this.next += buf.duration;
    this.samples += pcm.length;
    this.sources.add(src);
    src.onended = () => {
      this.sources.delete(src);
      if (!this.sources.size && this.onEnded && !this.stopped) this.onEnded();
    };
    if (this.onSamples) this.onSamples(pcm.length);
  }

  get playing() { return this.sources.size > 0; }

  playedMs() {
    if (this.startedAt < 0) return 0;
    const heard = Math.max(0, this.ctx.currentTime - this.startedAt);
    return Math.round(Math.min(heard, this.samples / this.rate) * 1000);
  }

  stop() {
    this.stopped = true;
    for (const s of this.sources) {
      try { s.stop(); } catch { /* not started */ }
    }
    this.sources.clear();
    this.gain.disconnect();
  }
}

// Plays a complete encoded file (mp3, wav, ...) through decodeAudioData.
export async function playEncoded(arrayBuffer, onSamples) {
  const ctx = audioContext();
  const buf = await ctx.decodeAudioData(arrayBuffer);
  const src = ctx.createBufferSource();
  src.buffer = buf;
  src.connect(ctx.destination);
  if (onSamples) onSamples(buf.length);
  const ended = new Promise((resolve) => { src.onended = resolve; });
  src.start();
  return { stop: () => { try { src.stop(); } catch { /* ended */ } }, ended };
}

// The microphone as 24 kHz PCM16: onChunk(Uint8Array of int16 LE) about every
// 100 ms, onLevel(0..1) for a meter. Echo cancellation is asked for, so that
// the voice agent hears the user rather than itself.
export class Mic {
  constructor({ onChunk, onLevel = null }) {
    this.onChunk = onChunk;
    this.onLevel = onLevel;
    this.stream = null;
    this.node = null;
    this.source = null;
  }

  async start() {
    const ctx = audioContext();
    this.stream = await navigator.mediaDevices.getUserMedia({
      audio: { channelCount: 1, echoCancellation: true, noiseSuppression: true, autoGainControl: true },
    });
    await ctx.audioWorklet.addModule('/web/mic-worklet.js');
    this.source = ctx.createMediaStreamSource(this.stream);
    this.node = new AudioWorkletNode(ctx, 'pcm16-capture', {
      processorOptions: { targetRate: RATE, chunkMs: 100 },
    });
    this.node.port.onmessage = (e) => {
      const { pcm, level } = e.data;
      stats.micChunks++;
      if (this.onLevel) this.onLevel(level);
      this.onChunk(new Uint8Array(pcm));
    };
    this.source.connect(this.node);
    // The worklet outputs silence; connecting it keeps it pulled by the graph.
    this.node.connect(ctx.destination);
  }

  stop() {
    if (this.node) { this.node.port.onmessage = null; this.node.disconnect(); }
    if (this.source) this.source.disconnect();
    if (this.stream) for (const t of this.stream.getTracks()) t.stop();
    this.node = this.source = this.stream = null;
  }
}
