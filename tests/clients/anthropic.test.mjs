// anthropic.test.mjs - omniserve through the official `@anthropic-ai/sdk`:
// messages (plain and streamed with the exact event sequence), system
// prompts, stop_sequences, count_tokens, x-api-key and the error shape.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { startServer, testModel, modelSkip, rawSSE } from './server.mjs';

const skip = testModel() ? false : modelSkip;
let srv, client;
const say = [{ role: 'user', content: 'Once upon a time' }];

before(async () => {
  if (skip) return;
  srv = await startServer(['--api-key', 'sekret']);
  client = new Anthropic({ baseURL: srv.url, apiKey: 'sekret', maxRetries: 0 });
});
after(async () => {
  if (!srv) return;
  const { code } = await srv.stop();
  assert.equal(code, 0, srv.log());
});

test('messages: plain response', { skip }, async () => {
  const m = await client.messages.create({ model: 'stories260K', max_tokens: 10, messages: say, temperature: 0 });
  assert.equal(m.type, 'message');
  assert.equal(m.role, 'assistant');
  assert.match(m.id, /^msg_/);
  assert.equal(m.content[0].type, 'text');
  assert.ok(m.content[0].text.length > 0);
  assert.equal(m.stop_reason, 'max_tokens');
  assert.equal(m.stop_sequence, null);
  assert.equal(m.usage.output_tokens, 10);
  assert.ok(m.usage.input_tokens > 0);
});

test('messages: system as string and blocks, stop_sequences', { skip }, async () => {
  const a = await client.messages.create({ model: 'x', max_tokens: 30, system: 'Tell a story.', messages: say, temperature: 0 });
  const b = await client.messages.create({ model: 'x', max_tokens: 30, system: [{ type: 'text', text: 'Tell a story.' }], messages: say, temperature: 0 });
  assert.equal(a.content[0].text, b.content[0].text);
  const text = a.content[0].text;
  const stop = text.slice(4, 6);
  const s = await client.messages.create({ model: 'x', max_tokens: 30, system: 'Tell a story.', messages: say, temperature: 0, stop_sequences: [stop] });
  assert.equal(s.stop_reason, 'stop_sequence');
  assert.equal(s.stop_sequence, stop);
  assert.equal(s.content[0].text, text.slice(0, text.indexOf(stop)));
});

test('messages: streamed with the SDK', { skip }, async () => {
  const stream = client.messages.stream({ model: 'x', max_tokens: 8, messages: say, temperature: 0 });
  const types = [];
  let text = '';
  for await (const ev of stream) {
    types.push(ev.type);
    if (ev.type === 'content_block_delta') text += ev.delta.text;
  }
  const final = await stream.finalMessage();
  assert.equal(final.content[0].text, text);
  assert.equal(final.stop_reason, 'max_tokens');
  assert.equal(final.usage.output_tokens, 8);
  assert.equal(types[0], 'message_start');
  assert.equal(types[1], 'content_block_start');
  assert.deepEqual(types.slice(-3), ['content_block_stop', 'message_delta', 'message_stop']);
  const plain = await client.messages.create({ model: 'x', max_tokens: 8, messages: say, temperature: 0 });
  assert.equal(plain.content[0].text, text);
});

test('messages: exact event sequence on the wire, ping included', { skip }, async () => {
  const raw = await rawSSE(`${srv.url}/v1/messages`, { model: 'x', max_tokens: 4, messages: say, stream: true },
    { 'x-api-key': 'sekret', 'anthropic-version': '2023-06-01' });
  assert.equal(raw.status, 200);
  const events = raw.frames.map((f) => f.event);
  assert.deepEqual(events.slice(0, 3), ['message_start', 'content_block_start', 'ping']);
  assert.deepEqual(events.slice(-3), ['content_block_stop', 'message_delta', 'message_stop']);
  assert.ok(events.slice(3, -3).every((e) => e === 'content_block_delta'));
  for (const f of raw.frames) assert.equal(JSON.parse(f.data).type, f.event);
  const delta = JSON.parse(raw.frames.at(-2).data);
  assert.equal(delta.delta.stop_reason, 'max_tokens');
  assert.equal(delta.usage.output_tokens, 4);
});

test('count_tokens', { skip }, async () => {
  const r = await client.messages.countTokens({ model: 'x', messages: say });
  assert.ok(r.input_tokens > 3);
  const s = await client.messages.countTokens({ model: 'x', system: 'Tell a long story.', messages: say });
  assert.ok(s.input_tokens > r.input_tokens);
});

test('errors in Anthropic shape; key required', { skip }, async () => {
  await assert.rejects(client.messages.create({ model: 'x', messages: say }), (e) => {
    assert.equal(e.status, 400);
    assert.equal(e.error.type, 'error');
    assert.equal(e.error.error.type, 'invalid_request_error');
    assert.match(e.error.error.message, /max_tokens/);
    return true;
  });
  // system turns are accepted anywhere (anthropic_agent.test.mjs); other roles are not
  await assert.rejects(client.messages.create({ model: 'x', max_tokens: 5, messages: [{ role: 'developer', content: 'x' }] }), (e) => e.status === 400);
  const nokey = new Anthropic({ baseURL: srv.url, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(nokey.messages.create({ model: 'x', max_tokens: 5, messages: say }), (e) => {
    assert.equal(e.status, 401);
    assert.equal(e.error.error.type, 'authentication_error');
    return true;
  });
  const r = await fetch(`${srv.url}/v1/messages`, { method: 'POST', body: '{', headers: { 'x-api-key': 'sekret', 'content-type': 'application/json' } });
  assert.equal(r.status, 400);
  assert.equal((await r.json()).error.type, 'invalid_request_error');
});
