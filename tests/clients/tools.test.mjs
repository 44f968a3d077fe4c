// tools.test.mjs - tools and reasoning fields through the official `openai`
// SDK: tool definitions, assistant tool_calls and tool turns go through the
// chat template; answers without calls keep their shape (finish_reason stop,
// no tool_calls), usage reports reasoning tokens, bad tool fields give 400.
// The tiny model never writes calls by itself: the parsers are tested on
// recorded outputs in tests/test_tools.c.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer, testModel, modelSkip } from './server.mjs';

const skip = testModel() ? false : modelSkip;
let srv, client;
const tools = [{
  type: 'function',
  function: {
    name: 'get_weather', description: 'Weather of a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
}];
const history = [
  { role: 'user', content: 'Weather in Paris?' },
  { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
  { role: 'tool', tool_call_id: 'call_1', content: '{"temp": 21}' },
];

before(async () => {
  if (skip) return;
  srv = await startServer(['--tool-parser', 'hermes']);
  client = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'unused', maxRetries: 0 });
});
after(async () => {
  if (!srv) return;
  const { code } = await srv.stop();
  assert.equal(code, 0, srv.log());
});

test('tools: a tool round trip renders and answers', { skip }, async () => {
  const r = await client.chat.completions.create({
    model: 'stories260K', messages: history, tools, tool_choice: 'auto', parallel_tool_calls: false,
    max_tokens: 8, temperature: 0,
  });
  const c = r.choices[0];
  assert.equal(c.message.role, 'assistant');
  assert.equal(typeof c.message.content, 'string');
  assert.equal(c.message.tool_calls, undefined);
  assert.ok(['stop', 'length'].includes(c.finish_reason));
  assert.equal(r.usage.completion_tokens_details.reasoning_tokens, 0);
});

test('tools: streamed answer without calls has only content deltas', { skip }, async () => {
  const stream = await client.chat.completions.create({
    model: 'stories260K', messages: history, tools, max_tokens: 8, temperature: 0, stream: true,
    stream_options: { include_usage: true },
  });
  let text = '', finish = null, usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const ch of chunk.choices) {
      assert.equal(ch.delta.tool_calls, undefined);
      text += ch.delta.content ?? '';
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  assert.ok(text.length > 0);
  assert.ok(['stop', 'length'].includes(finish));
  assert.equal(usage.completion_tokens_details.reasoning_tokens, 0);
});

test('tools: thinking switches and kwargs are accepted', { skip }, async () => {
  const r = await client.chat.completions.create({
    model: 'stories260K', messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 4,
    temperature: 0, reasoning_effort: 'low', enable_thinking: false,
    chat_template_kwargs: { enable_thinking: false },
  });
  assert.equal(typeof r.choices[0].message.content, 'string');
});

test('tools: bad tool fields give 400 naming the field', { skip }, async () => {
  const bad = [
    [{ tools: 'nope' }, 'tools'],
    [{ tools: [{ type: 'function' }] }, 'tools'],
    [{ tools, tool_choice: 'sometimes' }, 'tool_choice'],
    [{ tools, parallel_tool_calls: 'yes' }, 'parallel_tool_calls'],
    [{ chat_template_kwargs: 3 }, 'chat_template_kwargs'],
    [{ reasoning_effort: 'extreme' }, 'reasoning_effort'],
  ];
  for (const [extra, param] of bad) {
    await assert.rejects(client.chat.completions.create({
      model: 'stories260K', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2, ...extra,
    }), (e) => e.status === 400 && e.param === param, JSON.stringify(extra));
  }
});
