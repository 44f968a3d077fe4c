// reliability.test.mjs - heavy requests do not hold up the server (issue 7):
// while a 20 MB prompt is tokenized and a 20,000-property json_schema is
// compiled (each took the lws service thread for 19 s and 40 s before they
// ran on the ws workers), /health answers in well under 100 ms and a
// streamed generation keeps flowing.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer, testModel, modelSkip, postJSON, median } from './server.mjs';

const skip = testModel() ? false : modelSkip;
const say = [{ role: 'user', content: 'Once upon a time' }];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

test('a 20 MB prompt and a 20,000-property schema in flight: /health < 100 ms, a stream keeps flowing', { skip, timeout: 600_000 }, async () => {
  const srv = await startServer();
  const heavy = [];
  let stop = false, streaming = Promise.resolve();
  try {
    const big = JSON.stringify({ messages: [{ role: 'user', content: 'Once upon a time '.repeat(20 * (1 << 20) / 17) }], max_tokens: 5 });
    const props = {};
    for (let i = 0; i < 20000; i++) props[`p${i}`] = { type: 'integer' };
    const schema = JSON.stringify({ messages: say, max_tokens: 5, response_format: { type: 'json_schema',
      json_schema: { name: 'wide', schema: { type: 'object', properties: props, required: Object.keys(props) } } } });
    assert.ok(big.length >= 20 << 20);

    const state = [];   // the heavy requests: { name, done, result }
    const pending = () => state.filter((x) => !x.done).map((x) => x.name);

    // Streams, one after another, for as long as the heavy requests run.
    const client = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    let chunks = 0, maxGap = 0;
    streaming = (async () => {
      while (!stop) {
        const stream = await client.chat.completions.create({ model: 'x', messages: say, max_tokens: 400, stream: true });
        let last = performance.now();
        for await (const c of stream) {
          const now = performance.now();
          if (pending().length) {
            chunks++;
            maxGap = Math.max(maxGap, now - last);
          }
          last = now;
          assert.ok(c.id);
        }
      }
    })();

    for (const [name, body] of [['prompt', big], ['schema', schema]]) {
      const p = postJSON(srv.url, '/v1/chat/completions', body);
      const st = { name, done: false, p };
      p.done.then((r) => { st.done = true; st.result = r; }, () => { st.done = true; });
      heavy.push(p);
      state.push(st);
      await p.sent;   // the server has the whole body: from here on it is processing it
    }

    // Probe /health while both are in flight (checked before and after each probe).
    const both = [], any = [];
    const t0 = performance.now();
    while (pending().length && performance.now() - t0 < 5000) {
      const before = pending().length;
      const s = performance.now();
      const r = await fetch(`${srv.url}/health`);
      await r.arrayBuffer();
      const ms = performance.now() - s;
      assert.equal(r.status, 200);
      const after = pending().length;
      if (before === 2 && after === 2) both.push(ms);
      if (before && after) any.push(ms);
      await sleep(10);
    }
    const fmt = (xs) => xs.map((x) => x.toFixed(1)).join(' ');
    const report = `probes with both in flight: ${fmt(both)}; with one: ${fmt(any)}; stream chunks ${chunks}, ` +
      `max gap ${maxGap.toFixed(0)} ms; still in flight: ${pending()}; ` +
      `finished: ${state.filter((x) => x.done).map((x) => `${x.name} ${x.result?.status} after ${x.result?.ms?.toFixed(0)} ms`)}`;
    console.log(report);
    assert.ok(both.length >= 3, `only ${both.length} probes while both were in flight: ${report}`);
    assert.ok(median(both) < 100, report);
    assert.ok(median(any) < 100, report);
    stop = true;
    assert.ok(chunks >= 20, report);
    assert.ok(maxGap < 2000, report);
    await streaming;
  } finally {
    // The heavy work cannot be interrupted midway (a worker finishes its
    // tokenization or grammar first); this server is not reused.
    stop = true;
    for (const p of heavy) p.abort();
    srv.proc.kill('SIGKILL');
    await srv.exited;
    await streaming.catch(() => {});
  }
});
