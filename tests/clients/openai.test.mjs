// openai.test.mjs - omniserve through the official `openai` npm package:
// models, chat completions and completions (plain and streamed, exact chunk
// sequence), n > 1, logprobs, stop, seeds, tokenize/detokenize, cancel,
// client aborts, CORS, request ids and error shapes.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer, testModel, modelSkip, metric, waitFor, rawSSE } from './server.mjs';

const skip = testModel() ? false : modelSkip;
let srv, client;
const say = [{ role: 'user', content: 'Once upon a time' }];

before(async () => {
  if (skip) return;
  srv = await startServer(['--cors-origin', '*']);
  client = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'unused', maxRetries: 0 });
});
after(async () => {
  if (!srv) return;
  const { code } = await srv.stop();
  assert.equal(code, 0, srv.log());
});

test('models: list and retrieve', { skip }, async () => {
  const list = await client.models.list();
  assert.equal(list.data.length, 1);
  assert.equal(list.data[0].id, 'stories260K');
  assert.equal(list.data[0].object, 'model');
  const m = await client.models.retrieve('stories260K');
  assert.equal(m.id, 'stories260K');
  await assert.rejects(client.models.retrieve('nope'), (e) => e.status === 404);
});

test('chat: non-streamed response fields and usage', { skip }, async () => {
  const r = await client.chat.completions.create({ model: 'stories260K', messages: say, max_tokens: 12, temperature: 0 });
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.object, 'chat.completion');
  assert.equal(typeof r.created, 'number');
  assert.equal(r.model, 'stories260K');
  assert.ok(r.system_fingerprint);
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.ok(r.choices[0].message.content.length > 0);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 12);
  assert.ok(r.usage.prompt_tokens > 0);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 12);
  assert.equal(typeof r.usage.prompt_tokens_details.cached_tokens, 'number');
});

test('chat: system and content parts, greedy is repeatable, seeds reproduce', { skip }, async () => {
  const messages = [{ role: 'system', content: 'Tell a story.' },
    { role: 'user', content: [{ type: 'text', text: 'Once upon' }, { type: 'text', text: 'a time' }] }];
  const a = await client.chat.completions.create({ messages, model: 'x', max_tokens: 16, temperature: 0 });
  const b = await client.chat.completions.create({ messages, model: 'x', max_tokens: 16, temperature: 0 });
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
  const s1 = await client.chat.completions.create({ messages, model: 'x', max_tokens: 16, temperature: 1, seed: 7 });
  const s2 = await client.chat.completions.create({ messages, model: 'x', max_tokens: 16, temperature: 1, seed: 7 });
  assert.equal(s1.choices[0].message.content, s2.choices[0].message.content);
});

test('chat: streamed chunk sequence (role first, deltas, finish, usage, [DONE])', { skip }, async () => {
  const stream = await client.chat.completions.create({
    model: 'stories260K', messages: say, max_tokens: 8, temperature: 0, stream: true,
    stream_options: { include_usage: true },
  });
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  assert.deepEqual(chunks[0].choices[0].delta, { role: 'assistant', content: '' });
  const usage = chunks.at(-1);
  assert.deepEqual(usage.choices, []);
  assert.equal(usage.usage.completion_tokens, 8);
  const fin = chunks.at(-2);
  assert.equal(fin.choices[0].finish_reason, 'length');
  assert.deepEqual(fin.choices[0].delta, {});
  for (const c of chunks.slice(1, -2)) {
    assert.equal(c.choices[0].finish_reason, null);
    assert.equal(typeof c.choices[0].delta.content, 'string');
  }
  assert.ok(chunks.every((c) => c.id === chunks[0].id && c.object === 'chat.completion.chunk'));
  // The same text as the non-streamed answer.
  const text = chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('');
  const whole = await client.chat.completions.create({ model: 'x', messages: say, max_tokens: 8, temperature: 0 });
  assert.equal(text, whole.choices[0].message.content);
  // On the wire: a usage chunk only when asked, and the [DONE] sentinel last.
  const raw = await rawSSE(`${srv.url}/v1/chat/completions`, { messages: say, max_tokens: 3, stream: true });
  assert.equal(raw.headers.get('content-type'), 'text/event-stream');
  const data = raw.frames.filter((f) => f.data).map((f) => f.data);
  assert.equal(data.at(-1), '[DONE]');
  assert.ok(!data.slice(0, -1).some((d) => JSON.parse(d).usage));
});

test('chat: n = 2 streamed and not', { skip }, async () => {
  const r = await client.chat.completions.create({ model: 'x', messages: say, max_tokens: 6, n: 2, temperature: 1, seed: 3 });
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1]);
  assert.equal(r.usage.completion_tokens, 12);
  const stream = await client.chat.completions.create({ model: 'x', messages: say, max_tokens: 6, n: 2, stream: true });
  const seen = { 0: { role: 0, finish: 0 }, 1: { role: 0, finish: 0 } };
  for await (const c of stream) {
    const ch = c.choices[0];
    if (ch.delta.role) seen[ch.index].role++;
    if (ch.finish_reason) seen[ch.index].finish++;
  }
  assert.deepEqual(seen, { 0: { role: 1, finish: 1 }, 1: { role: 1, finish: 1 } });
});

test('chat: logprobs and top_logprobs', { skip }, async () => {
  const r = await client.chat.completions.create({ model: 'x', messages: say, max_tokens: 4, temperature: 0, logprobs: true, top_logprobs: 3 });
  const lp = r.choices[0].logprobs.content;
  assert.equal(lp.length, 4);
  for (const t of lp) {
    assert.equal(typeof t.token, 'string');
    assert.ok(t.logprob <= 0);
    assert.equal(t.top_logprobs.length, 3);
    assert.ok(Array.isArray(t.bytes));
  }
  // Greedy: the chosen token is the most likely one.
  assert.equal(lp[0].top_logprobs[0].token, lp[0].token);
  const stream = await client.chat.completions.create({ model: 'x', messages: say, max_tokens: 3, temperature: 0, logprobs: true, stream: true });
  let n = 0;
  for await (const c of stream) n += c.choices[0]?.logprobs?.content?.length ?? 0;
  assert.equal(n, 3);
});

test('chat: stop strings end the answer before them', { skip }, async () => {
  const free = await client.chat.completions.create({ model: 'x', messages: say, max_tokens: 40, temperature: 0 });
  const text = free.choices[0].message.content;
  const stop = text.slice(5, 7);
  const r = await client.chat.completions.create({ model: 'x', messages: say, max_tokens: 40, temperature: 0, stop: [stop] });
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.equal(r.choices[0].message.content, text.slice(0, text.indexOf(stop)));
});

test('completions: string and token prompts, echo, logprobs, streamed', { skip }, async () => {
  const r = await client.completions.create({ model: 'x', prompt: 'Once upon a time', max_tokens: 10, temperature: 0 });
  assert.equal(r.object, 'text_completion');
  assert.match(r.id, /^cmpl-/);
  assert.equal(r.usage.completion_tokens, 10);
  const tok = await (await fetch(`${srv.url}/tokenize`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ prompt: 'Once upon a time' }) })).json();
  const r2 = await client.completions.create({ model: 'x', prompt: tok.tokens, max_tokens: 10, temperature: 0 });
  assert.equal(r2.choices[0].text, r.choices[0].text);
  const e = await client.completions.create({ model: 'x', prompt: 'Once upon a time', max_tokens: 5, temperature: 0, echo: true, logprobs: 2 });
  assert.ok(e.choices[0].text.startsWith('Once upon a time'));
  assert.equal(e.choices[0].logprobs.tokens.length, 5);
  assert.equal(Object.keys(e.choices[0].logprobs.top_logprobs[0]).length, 2);
  const stream = await client.completions.create({ model: 'x', prompt: 'Once upon a time', max_tokens: 10, temperature: 0, stream: true });
  let text = '', finish;
  for await (const c of stream) { text += c.choices[0].text; finish = c.choices[0].finish_reason ?? finish; }
  assert.equal(text, r.choices[0].text);
  assert.equal(finish, 'length');
  await assert.rejects(client.completions.create({ model: 'x', prompt: 'a', suffix: 'b' }),
    (err) => err.status === 400 && /suffix/.test(err.message));
});

test('tokenize and detokenize round trip', { skip }, async () => {
  const post = (p, b) => fetch(`${srv.url}${p}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(b) }).then((r) => r.json());
  const t = await post('/tokenize', { prompt: 'Hello world', add_special_tokens: false });
  assert.equal(t.count, t.tokens.length);
  assert.equal(t.max_model_len, 512);
  const d = await post('/detokenize', { tokens: t.tokens });
  assert.equal(d.prompt.trim(), 'Hello world');
  const c = await post('/tokenize', { messages: say });
  assert.ok(c.count > t.count);
  const bad = await fetch(`${srv.url}/detokenize`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ tokens: [1e9] }) });
  assert.equal(bad.status, 400);
});

test('errors: OpenAI shape, field named, malformed JSON, depth, 404, 405, context overflow', { skip }, async () => {
  await assert.rejects(client.chat.completions.create({ model: 'x', messages: say, temperature: 'hot' }), (e) => {
    assert.equal(e.status, 400);
    assert.equal(e.param, 'temperature');
    assert.equal(e.type, 'invalid_request_error');
    return true;
  });
  await assert.rejects(client.chat.completions.create({ model: 'x', messages: 'hi' }), (e) => e.status === 400 && e.param === 'messages');
  await assert.rejects(client.chat.completions.create({ model: 'x', messages: [{ role: 'wizard', content: 'x' }] }), (e) => e.status === 400 && /role/.test(e.message));
  const post = (p, body) => fetch(`${srv.url}${p}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
  const m = await post('/v1/chat/completions', '{"messages": [');
  assert.equal(m.status, 400);
  const mj = await m.json();
  assert.match(mj.error.message, /malformed JSON/);
  assert.ok('param' in mj.error && 'code' in mj.error && 'type' in mj.error);
  const deep = await post('/v1/chat/completions', '['.repeat(5000) + ']'.repeat(5000));
  assert.equal(deep.status, 400);
  assert.match((await deep.json()).error.message, /nested deeper/);
  const nf = await fetch(`${srv.url}/v1/nothing`);
  assert.equal(nf.status, 404);
  assert.ok((await nf.json()).error.message);
  const na = await fetch(`${srv.url}/v1/chat/completions`);
  assert.equal(na.status, 405);
  assert.equal(na.headers.get('allow'), 'POST');
  // max_tokens past the context is clamped (--max-tokens-policy clamp, the
  // default, as llama.cpp): the answer ends at the context's end
  const clamped = await client.chat.completions.create({ model: 'x', messages: say, max_tokens: 600 });
  assert.equal(clamped.choices[0].finish_reason, 'length');
  assert.equal(clamped.usage.prompt_tokens + clamped.usage.completion_tokens, 512);
  await assert.rejects(client.chat.completions.create({ model: 'x', messages: say, max_tokens: 0 }), (e) => e.status === 400 && e.param === 'max_tokens');
  const long = 'Once upon a time '.repeat(200);
  await assert.rejects(client.completions.create({ model: 'x', prompt: long }), (e) => {
    assert.equal(e.status, 400);
    assert.equal(e.code, 'context_length_exceeded');
    assert.match(e.message, /512/);
    return true;
  });
});

test('client abort mid-stream: server stays healthy and frees the sequence', { skip }, async () => {
  const ac = new AbortController();
  const stream = await client.chat.completions.create({ model: 'x', messages: say, max_tokens: 400, stream: true }, { signal: ac.signal });
  let got = 0;
  try {
    for await (const c of stream) {
      assert.ok(c.id);
      if (++got === 2) {
        ac.abort();
        break;
      }
    }
  } catch (e) {
    assert.equal(e.name, 'APIUserAbortError'); // the SDK's own abort, nothing from the server
  }
  assert.equal(got, 2);
  await waitFor(async () => (await metric(srv.url, 'omniserve_requests_running')) === 0 &&
    (await metric(srv.url, 'omniserve_kv_blocks_used')) === 0, 'the sequence to be freed');
  const r = await client.chat.completions.create({ model: 'x', messages: say, max_tokens: 4 });
  assert.equal(r.choices[0].finish_reason, 'length');
  await waitFor(async () => /client left/.test(srv.log()), 'the abort in the log');
});

test('cancel route ends a running request', { skip }, async () => {
  const id = 'cancel-me-1';
  const stream = await client.chat.completions.create({ model: 'x', messages: say, max_tokens: 460, stream: true },
    { headers: { 'x-request-id': id } });
  let finish, cancelled;
  for await (const c of stream) {
    if (!cancelled) {
      cancelled = await fetch(`${srv.url}/v1/requests/${id}/cancel`, { method: 'POST' });
    }
    finish = c.choices[0]?.finish_reason ?? finish;
  }
  // The request may have finished before the cancel arrived: both are fine.
  assert.ok([200, 404].includes(cancelled.status));
  assert.ok(cancelled.status === 404 || finish === 'cancelled' || finish === 'length');
  const none = await fetch(`${srv.url}/v1/requests/unknown/cancel`, { method: 'POST' });
  assert.equal(none.status, 404);
});

test('per-request timeout field is accepted and validated', { skip }, async () => {
  const r = await client.chat.completions.create({ model: 'x', messages: say, max_tokens: 4, timeout: 30 });
  assert.equal(r.choices[0].finish_reason, 'length');
  await assert.rejects(client.chat.completions.create({ model: 'x', messages: say, timeout: -1 }), (e) => e.status === 400 && e.param === 'timeout');
});

test('request ids and CORS', { skip }, async () => {
  const r = await fetch(`${srv.url}/v1/models`, { headers: { 'x-request-id': 'abc-123', origin: 'http://example.test' } });
  assert.equal(r.headers.get('x-request-id'), 'abc-123');
  assert.equal(r.headers.get('access-control-allow-origin'), '*');
  const g = await fetch(`${srv.url}/v1/models`, { headers: { 'x-request-id': 'not a plain id!' } });
  assert.match(g.headers.get('x-request-id'), /^[0-9a-f]{16}$/);
  const pre = await fetch(`${srv.url}/v1/chat/completions`, { method: 'OPTIONS', headers: { origin: 'http://example.test', 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization, content-type' } });
  assert.equal(pre.status, 204);
  assert.match(pre.headers.get('access-control-allow-methods'), /POST/);
  assert.equal(pre.headers.get('access-control-allow-headers'), 'authorization, content-type');
  assert.match(srv.log(), /GET \/v1\/models 200 .* id abc-123/);
});
