// anthropic_agent.test.mjs - the /v1/messages fields agent clients (Claude
// Code, the Agent SDK, the Vercel AI SDK) send, through the official
// @anthropic-ai/sdk against stories260K: system turns in the middle of
// `messages`, thinking adaptive, output_config (effort; format = JSON-schema
// constrained output), context_management and other unknown fields ignored
// and logged once, cache_control on every kind of block and tool, the same
// usage streamed and not (cache_read_input_tokens in message_start too),
// the models list in the Anthropic shape too, max_tokens 64000 clamped to
// the context (stop_reason model_context_window_exceeded) and max_tokens 0
// refused.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { startServer, testModel, modelSkip, rawSSE } from './server.mjs';

const skip = testModel() ? false : modelSkip;
let srv, client;
const story = 'Once upon a time there was a little girl named Lily who loved to play in the park with her dog.';

before(async () => {
  if (skip) return;
  srv = await startServer();
  client = new Anthropic({ baseURL: srv.url, apiKey: 'dummy', maxRetries: 0 });
});
after(async () => {
  if (!srv) return;
  const { code } = await srv.stop();
  assert.equal(code, 0, srv.log());
});

const usageKeys = ['cache_creation_input_tokens', 'cache_read_input_tokens', 'input_tokens', 'output_tokens'];

test('a system turn mid-conversation, thinking adaptive, output_config.effort, context_management, cache_control', { skip }, async () => {
  const cc = { cache_control: { type: 'ephemeral' } };
  // streamed: the SDK refuses a plain request whose max_tokens could take 10 minutes
  const m = await client.messages.stream({
    model: 'claude-opus-4-1', max_tokens: 64000, temperature: 0,
    system: [{ type: 'text', text: 'You tell stories.', ...cc }],
    messages: [
      { role: 'user', content: [{ type: 'text', text: 'hello', ...cc }] },
      { role: 'system', content: 'Keep it short.' },
      { role: 'assistant', content: [{ type: 'text', text: 'Hi.', ...cc }] },
      { role: 'user', content: [{ type: 'text', text: story, cache_control: { type: 'ephemeral', ttl: '1h' } }] },
    ],
    tools: [{ name: 'noop', description: 'does nothing', input_schema: { type: 'object', properties: {} }, ...cc }],
    thinking: { type: 'adaptive' },
    output_config: { effort: 'high' },
    context_management: { edits: [{ type: 'clear_thinking_20251015', keep: 'all' }] },
    metadata: { user_id: 'u1' },
  }).finalMessage();
  assert.equal(m.type, 'message');
  assert.equal(m.model, 'stories260K'); // any model name is served by the one model
  // 64000 is past the 512-token context: clamped, the answer runs to the end
  // of the context, which the API names model_context_window_exceeded
  assert.equal(m.stop_reason, 'model_context_window_exceeded');
  assert.equal(m.usage.input_tokens + m.usage.cache_read_input_tokens + m.usage.output_tokens, 512);
  // the system turn is in the prompt: count_tokens sees it
  const base = { model: 'x', messages: [{ role: 'user', content: 'hello' }] };
  const a = await client.messages.countTokens(base);
  const b = await client.messages.countTokens({ ...base, messages: [...base.messages, { role: 'system', content: 'Keep it short.' }, { role: 'user', content: 'go' }] });
  assert.ok(b.input_tokens > a.input_tokens + 3);
  // unknown top-level fields: one log line per name, not one per request
  await client.messages.create({ model: 'x', max_tokens: 2, messages: base.messages, context_management: {} });
  const log = srv.log();
  assert.equal(log.match(/ignoring the field 'context_management'/g).length, 1, log);
  assert.equal(log.match(/ignoring the field 'metadata'/g).length, 1);
});

test('thinking: enabled, disabled and adaptive accepted; other types 400 naming the field', { skip }, async () => {
  for (const thinking of [{ type: 'enabled', budget_tokens: 1024 }, { type: 'disabled' }, { type: 'adaptive' }]) {
    const m = await client.messages.create({ model: 'x', max_tokens: 3, messages: [{ role: 'user', content: 'hi' }], thinking });
    assert.equal(m.usage.output_tokens, 3);
  }
  await assert.rejects(
    client.messages.create({ model: 'x', max_tokens: 3, messages: [{ role: 'user', content: 'hi' }], thinking: { type: 'sometimes' } }),
    (e) => e.status === 400 && /thinking\.type/.test(e.message));
  await assert.rejects(
    client.messages.create({ model: 'x', max_tokens: 3, messages: [{ role: 'user', content: 'hi' }], output_config: { effort: 'extreme' } }),
    (e) => e.status === 400 && /output_config\.effort/.test(e.message));
});

test('output_config.format: the answer is JSON valid against the schema', { skip }, async () => {
  const schema = {
    type: 'object',
    properties: { mood: { type: 'string', enum: ['happy', 'sad'] }, age: { type: 'integer', minimum: 1, maximum: 9 } },
    required: ['mood', 'age'], additionalProperties: false,
  };
  for (const stream of [false, true]) {
    const body = {
      model: 'x', max_tokens: 60, messages: [{ role: 'user', content: story }],
      output_config: { format: { type: 'json_schema', schema } },
    };
    const m = stream ? await client.messages.stream(body).finalMessage() : await client.messages.create(body);
    const o = JSON.parse(m.content[0].text);
    assert.ok(['happy', 'sad'].includes(o.mood), m.content[0].text);
    assert.ok(Number.isInteger(o.age) && o.age >= 1 && o.age <= 9);
    assert.equal(m.stop_reason, 'end_turn');
  }
  await assert.rejects(
    client.messages.create({ model: 'x', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }], output_config: { format: { type: 'json_schema' } } }),
    (e) => e.status === 400 && /output_config\.format/.test(e.message));
});

test('usage: the same four fields streamed and not; message_start carries them', { skip }, async () => {
  const body = { model: 'x', max_tokens: 8, temperature: 0, messages: [{ role: 'user', content: story }] };
  await client.messages.create(body); // the prompt's full blocks are in the prefix cache from here on
  const plain = await client.messages.create(body);
  assert.deepEqual(Object.keys(plain.usage).sort(), usageKeys);
  assert.ok(plain.usage.cache_read_input_tokens > 0, JSON.stringify(plain.usage));
  const { frames } = await rawSSE(`${srv.url}/v1/messages`, { ...body, stream: true });
  const ev = (name) => frames.filter((f) => f.event === name).map((f) => JSON.parse(f.data));
  const start = ev('message_start')[0].message.usage;
  assert.deepEqual(Object.keys(start).sort(), usageKeys);
  assert.equal(start.output_tokens, 0);
  assert.equal(start.input_tokens + start.cache_read_input_tokens, plain.usage.input_tokens + plain.usage.cache_read_input_tokens);
  const delta = ev('message_delta')[0].usage;
  assert.deepEqual(delta, plain.usage);
  const final = await client.messages.stream(body).finalMessage();
  assert.deepEqual(final.usage, plain.usage);
});

test('max_tokens: 0 is a 400, 64000 is clamped to the context', { skip }, async () => {
  await assert.rejects(
    client.messages.create({ model: 'x', max_tokens: 0, messages: [{ role: 'user', content: 'hi' }] }),
    (e) => e.status === 400 && /max_tokens/.test(e.message));
  const m = await client.messages.stream({ model: 'x', max_tokens: 64000, messages: [{ role: 'user', content: 'hi' }] }).finalMessage();
  assert.equal(m.stop_reason, 'model_context_window_exceeded');
  assert.ok(m.usage.output_tokens < 512);
  // a max_tokens that fits ends as max_tokens
  const n = await client.messages.create({ model: 'x', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] });
  assert.equal(n.stop_reason, 'max_tokens');
});

test('models: the Anthropic SDK lists and retrieves the served model (/v1/models in both shapes)', { skip }, async () => {
  const list = [];
  for await (const m of client.models.list()) list.push(m);
  assert.equal(list.length, 1);
  assert.equal(list[0].id, 'stories260K');
  assert.equal(list[0].type, 'model');
  assert.equal(list[0].display_name, 'stories260K');
  assert.ok(!Number.isNaN(Date.parse(list[0].created_at)));
  const one = await client.models.retrieve('stories260K');
  assert.equal(one.id, 'stories260K');
  assert.equal(one.type, 'model');
  // the OpenAI fields stay
  const raw = await (await fetch(`${srv.url}/v1/models`)).json();
  assert.equal(raw.object, 'list');
  assert.equal(raw.data[0].object, 'model');
  assert.equal(raw.has_more, false);
  assert.equal(raw.first_id, 'stories260K');
});
