// mic-worklet.js - AudioWorklet processor: the microphone (first channel)
// resampled from the context's rate to targetRate by linear interpolation,
// posted as int16 little-endian chunks of chunkMs with their RMS level.
// Runs on the audio rendering thread; the buffer is transferred, not copied.

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
  }

  process(inputs) {
    const ch = inputs[0] && inputs[0][0];
    if (!ch) return true;
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
