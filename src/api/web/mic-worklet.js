// mic-worklet.js - AudioWorklet processor: the microphone (first channel)
// resampled from the context's rate to targetRate by linear interpolation,
// posted as int16 little-endian chunks of chunkMs with their RMS level.
// When it downsamples (48 kHz -> 24 kHz), two low-pass biquads at 0.45 x
// the target rate first keep what lies above the new Nyquist frequency from
// folding back into the speech band.
// Runs on the audio rendering thread; the buffer is transferred, not copied.

// RBJ audio-EQ-cookbook low-pass, normalised: [b0, b1, b2, a1, a2].
function lowpass(cutoffHz, rate) {
  const w = 2 * Math.PI * cutoffHz / rate;
  const alpha = Math.sin(w) / (2 * Math.SQRT1_2);
  const c = Math.cos(w);
  const a0 = 1 + alpha;
  return [(1 - c) / 2 / a0, (1 - c) / a0, (1 - c) / 2 / a0, -2 * c / a0, (1 - alpha) / a0];
}

class Pcm16Capture extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const o = (options && options.processorOptions) || {};
    this.target = o.targetRate || 24000;
    this.step = sampleRate / this.target;          // input samples per output sample
    this.pos = 0;                                  // next output's position in the input
    this.prev = 0;                                 // last input sample of the previous block
    this.size = Math.round(this.target * (o.chunkMs || 100) / 1000);   // samples per chunk
    this.chunk = new Int16Array(this.size);
    this.fill = 0;
    this.sumSq = 0;
    this.coef = this.step > 1 ? lowpass(0.45 * this.target, sampleRate) : null;
    this.z = [new Float64Array(4), new Float64Array(4)];   // x1 x2 y1 y2 per stage
    this.buf = new Float32Array(128);
  }

  // Two cascaded biquads over the block (into this.buf).
  filter(ch) {
    if (this.buf.length < ch.length) this.buf = new Float32Array(ch.length);
    const [b0, b1, b2, a1, a2] = this.coef;
    const out = this.buf;
    for (let i = 0; i < ch.length; i++) {
      let x = ch[i];
      for (const z of this.z) {
        const y = b0 * x + b1 * z[0] + b2 * z[1] - a1 * z[2] - a2 * z[3];
        z[1] = z[0]; z[0] = x; z[3] = z[2]; z[2] = y;
        x = y;
      }
      out[i] = x;
    }
    return out.subarray(0, ch.length);
  }

  process(inputs) {
    const raw = inputs[0] && inputs[0][0];
    if (!raw) return true;
    const ch = this.coef ? this.filter(raw) : raw;
    // input index -1 is this.prev; positions are relative to this block
    while (this.pos < ch.length) {
      const i = Math.floor(this.pos);
      const frac = this.pos - i;
      const a = i === 0 ? this.prev : ch[i - 1];
      const b = ch[i];
      const v = a + (b - a) * frac;
      const s = Math.max(-1, Math.min(1, v));
      this.sumSq += s * s;
      this.chunk[this.fill++] = s < 0 ? s * 32768 : s * 32767;
      if (this.fill === this.size) {
        const level = Math.sqrt(this.sumSq / this.fill);
        const out = this.chunk.buffer;
        this.port.postMessage({ pcm: out, level }, [out]);
        this.chunk = new Int16Array(this.size);   // the old one's buffer is gone with the message
        this.fill = 0;
        this.sumSq = 0;
      }
      this.pos += this.step;
    }
    this.pos -= ch.length;
    this.prev = ch[ch.length - 1];
    return true;
  }
}

registerProcessor('pcm16-capture', Pcm16Capture);
