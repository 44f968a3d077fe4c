// anthropic_tools.test.mjs - Anthropic tools and thinking through the
// official `@anthropic-ai/sdk`, on stories260K carrying real chat templates
// (Qwen3 for tools, DeepSeek-R1 whose prompt opens <think> for thinking):
// tool_use / tool_result turns rendered by the template like the OpenAI
// route's, grammar-forced tool_use (tool_choice any / tool) plain and
// streamed, thinking blocks with a budget that forces </think>, and 400s
// naming the bad field.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Anthropic from '@anthropic-ai/sdk';
import { startServer, testModel, modelSkip, rawSSE, root } from './server.mjs';

const skip = testModel() ? false : modelSkip;
let qwen, r1, client, thinker;

// A copy of the test model with tokenizer.chat_template from a fixture
// (and room for the tools preamble).
function withTemplate(name) {
  const out = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'omni-tpl-')), `${name}.gguf`);
  const code = `
import sys
sys.path.insert(0, sys.argv[4])
from gguf import GGUFReader, GGUFWriter, GGUF_STRING
r = GGUFReader(sys.argv[1])
w = GGUFWriter(sys.argv[2])
for k, (vt, v, el) in r.kv.items():
    # templates with tools outgrow 512 positions; RoPE takes longer ones
    w.add(k, 2048 if k.endswith('.context_length') else v, vt, el)
w.add('tokenizer.chat_template', open(sys.argv[3], encoding='utf-8').read(), GGUF_STRING)
for n in r.tensors:
    t, s, _ = r.tensors[n]
    w.add_tensor_raw(n, t, s, bytes(r.tensor_bytes(n)))
w.write()
`;
  const res = spawnSync(process.env.PYTHON || 'python3', ['-c', code, testModel(), out,
    path.join(root, 'tests', 'fixtures', 'templates', `${name}.jinja`), path.join(root, 'tools')], { encoding: 'utf8' });
  assert.equal(res.status, 0, res.stderr);
  return out;
}

const tools = [{
  name: 'get_weather', description: 'Weather of a city',
  input_schema: { type: 'object', properties: { city: { type: 'string', maxLength: 8 } }, required: ['city'] },
}];
const oaTools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather of a city', parameters: tools[0].input_schema } }];
const history = (result) => [
  { role: 'user', content: 'Weather in Paris?' },
  { role: 'assistant', content: [{ type: 'text', text: 'Let me check.' }, { type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } }] },
  { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: result }, { type: 'text', text: 'And tomorrow?' }] },
];
const oaHistory = (result) => [
  { role: 'user', content: 'Weather in Paris?' },
  { role: 'assistant', content: 'Let me check.', tool_calls: [{ id: 'toolu_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
  { role: 'tool', tool_call_id: 'toolu_1', content: result },
  { role: 'user', content: 'And tomorrow?' },
];

async function post(url, route, body) {
  const r = await fetch(`${url}${route}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return r.json();
}

before(async () => {
  if (skip) return;
  qwen = await startServer([], { model: withTemplate('qwen3') });
  r1 = await startServer([], { model: withTemplate('deepseek-r1-distill') });
  client = new Anthropic({ baseURL: qwen.url, apiKey: 'unused', maxRetries: 0 });
  thinker = new Anthropic({ baseURL: r1.url, apiKey: 'unused', maxRetries: 0 });
});
after(async () => {
  for (const s of [qwen, r1]) {
    if (!s) continue;
    const { code } = await s.stop();
    assert.equal(code, 0, s.log());
  }
});

test('tools: tool_use and tool_result turns render through the template like OpenAI tool turns', { skip }, async () => {
  const a = await client.messages.countTokens({ model: 'x', tools, messages: history('{"temp": 21}') });
  const o = await post(qwen.url, '/tokenize', { messages: oaHistory('{"temp": 21}'), tools: oaTools });
  assert.equal(a.input_tokens, o.count);
  const text = (await post(qwen.url, '/detokenize', { tokens: o.tokens })).prompt;
  assert.ok(text.includes('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'), text);
  assert.ok(text.includes('<tool_response>\n{"temp": 21}\n</tool_response>'), text);
  assert.ok(text.includes('"name": "get_weather"'), text);   // the tools block
  const longer = await client.messages.countTokens({ model: 'x', tools, messages: history('{"temp": 21, "sky": "clear"}') });
  assert.ok(longer.input_tokens > a.input_tokens);
  // tool_result content as text blocks counts the same as a string
  const blocks = history('{"temp": 21}');
  blocks[2].content[0].content = [{ type: 'text', text: '{"temp": 21}' }];
  assert.equal((await client.messages.countTokens({ model: 'x', tools, messages: blocks })).input_tokens, a.input_tokens);
  const m = await client.messages.create({ model: 'x', max_tokens: 6, temperature: 0, tools, messages: history('{"temp": 21}') });
  assert.equal(m.content[0].type, 'text');
  assert.ok(['end_turn', 'max_tokens'].includes(m.stop_reason));
});

test('tools: tool_choice any returns a valid tool_use', { skip }, async () => {
  const m = await client.messages.create({
    model: 'x', max_tokens: 120, temperature: 0, tools, tool_choice: { type: 'any', disable_parallel_tool_use: true },
    messages: [{ role: 'user', content: 'Weather in Paris?' }],
  });
  assert.equal(m.stop_reason, 'tool_use');
  const use = m.content.find((b) => b.type === 'tool_use');
  assert.ok(use, JSON.stringify(m.content));
  assert.match(use.id, /^toolu_/);
  assert.equal(use.name, 'get_weather');
  assert.equal(typeof use.input.city, 'string');
  const named = await client.messages.create({
    model: 'x', max_tokens: 120, temperature: 0.7, tools, tool_choice: { type: 'tool', name: 'get_weather', disable_parallel_tool_use: true },
    messages: [{ role: 'user', content: 'Weather?' }],
  });
  assert.equal(named.stop_reason, 'tool_use');
  assert.equal(named.content.at(-1).name, 'get_weather');
});

test('tools: streamed tool_use arrives as content_block_start + input_json_delta', { skip }, async () => {
  const body = { model: 'x', max_tokens: 120, temperature: 0, tools, tool_choice: { type: 'any', disable_parallel_tool_use: true }, messages: [{ role: 'user', content: 'Weather in Paris?' }] };
  const raw = await rawSSE(`${qwen.url}/v1/messages`, { ...body, stream: true });
  assert.equal(raw.status, 200);
  const evs = raw.frames.map((f) => JSON.parse(f.data));
  const start = evs.find((e) => e.type === 'content_block_start' && e.content_block.type === 'tool_use');
  assert.ok(start, JSON.stringify(evs));
  assert.match(start.content_block.id, /^toolu_/);
  assert.equal(start.content_block.name, 'get_weather');
  assert.deepEqual(start.content_block.input, {});
  const deltas = evs.filter((e) => e.type === 'content_block_delta' && e.index === start.index);
  assert.ok(deltas.length > 0 && deltas.every((e) => e.delta.type === 'input_json_delta'));
  const input = JSON.parse(deltas.map((e) => e.delta.partial_json).join(''));
  assert.equal(typeof input.city, 'string');
  assert.ok(evs.some((e) => e.type === 'content_block_stop' && e.index === start.index));
  assert.equal(evs.at(-2).delta.stop_reason, 'tool_use');
  // the SDK assembles the same message as the plain request
  const final = await client.messages.stream(body).finalMessage();
  const plain = await client.messages.create(body);
  const noIds = (c) => c.map(({ id, ...rest }) => rest);   // ids are random
  assert.deepEqual(noIds(final.content), noIds(plain.content));
  assert.deepEqual(final.content.at(-1).input, input);
});

test('thinking: the budget forces </think>, then a text block follows', { skip }, async () => {
  const body = { model: 'x', max_tokens: 24, temperature: 0, thinking: { type: 'enabled', budget_tokens: 6 }, messages: [{ role: 'user', content: 'Once upon a time' }] };
  const m = await thinker.messages.create(body);
  assert.deepEqual(m.content.map((b) => b.type), ['thinking', 'text']);
  assert.ok(m.content[0].thinking.length > 0);
  assert.equal(typeof m.content[0].signature, 'string');
  assert.ok(m.content[1].text.length > 0);
  // a budget beyond max_tokens: the tiny model never closes its reasoning
  const long = await thinker.messages.create({ ...body, thinking: { type: 'enabled', budget_tokens: 1024 } });
  assert.deepEqual(long.content.map((b) => b.type), ['thinking']);
  assert.equal(long.stop_reason, 'max_tokens');
  // streamed: thinking_delta..., signature_delta, stop; then the text block
  const raw = await rawSSE(`${r1.url}/v1/messages`, { ...body, stream: true });
  const evs = raw.frames.map((f) => JSON.parse(f.data));
  const kinds = evs.map((e) => (e.type === 'content_block_delta' ? e.delta.type : e.type === 'content_block_start' ? `start:${e.content_block.type}` : e.type));
  const squeezed = kinds.filter((k, i) => k !== kinds[i - 1]);
  assert.deepEqual(squeezed, ['message_start', 'start:thinking', 'ping', 'thinking_delta', 'signature_delta', 'content_block_stop',
    'start:text', 'text_delta', 'content_block_stop', 'message_delta', 'message_stop']);
  const final = await thinker.messages.stream(body).finalMessage();
  assert.deepEqual(final.content, m.content);
});

test('thinking: OpenAI thinking_budget and reasoning_effort use the same budget', { skip }, async () => {
  const ask = (extra) => post(r1.url, '/v1/chat/completions', { model: 'x', max_tokens: 24, temperature: 0, messages: [{ role: 'user', content: 'Once upon a time' }], ...extra });
  const r = await ask({ thinking_budget: 6 });
  const msg = r.choices[0].message;
  assert.ok(msg.reasoning_content.length > 0);
  assert.ok(msg.content.length > 0);
  assert.ok(r.usage.completion_tokens_details.reasoning_tokens >= 6);
  const free = await ask({});
  assert.equal(free.choices[0].message.content, '');
  assert.equal(free.choices[0].finish_reason, 'length');
  const low = await ask({ reasoning_effort: 'low' });   // 1024 tokens: more than max_tokens
  assert.equal(low.choices[0].message.content, '');
  assert.equal((await ask({ thinking_budget: -1 })).error.param, 'thinking_budget');
});

test('tools and thinking: 400s name the bad field', { skip }, async () => {
  const say = [{ role: 'user', content: 'hi' }];
  const bad = [
    [{ tools: 'nope' }, /tools/],
    [{ tools: [{ name: 'a' }] }, /tools\[0\]\.input_schema/],
    [{ tools: [{ description: 'x', input_schema: {} }] }, /tools\[0\]\.name/],
    [{ tools: [{ type: 'web_search_20250305', name: 'web_search' }] }, /tools\[0\]\.type/],
    [{ tools, tool_choice: { type: 'sometimes' } }, /tool_choice\.type/],
    [{ tools, tool_choice: 'auto' }, /tool_choice/],
    [{ tools, tool_choice: { type: 'tool' } }, /tool_choice\.name/],
    [{ tools, tool_choice: { type: 'tool', name: 'nope' } }, /tool_choice\.name.*nope/],
    [{ tool_choice: { type: 'any' } }, /tool_choice/],
    [{ thinking: { type: 'enabled' } }, /thinking\.budget_tokens/],
    [{ thinking: { type: 'on', budget_tokens: 10 } }, /thinking\.type/],
    [{ messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: '' } }] }] }, /messages\[0\]\.content\[0\]\.type/],
    [{ messages: [...say, { role: 'assistant', content: [{ type: 'tool_use', id: 't', name: 'get_weather' }] }] }, /messages\[1\]\.content\[0\]/],
    [{ messages: [{ role: 'user', content: [{ type: 'tool_result', content: 'x' }] }] }, /messages\[0\]\.content\[0\]\.tool_use_id/],
  ];
  for (const [extra, re] of bad) {
    await assert.rejects(client.messages.create({ model: 'x', max_tokens: 2, messages: say, ...extra }), (e) => {
      assert.equal(e.status, 400, JSON.stringify(extra));
      assert.equal(e.error.error.type, 'invalid_request_error');
      assert.match(e.error.error.message, re, JSON.stringify(extra));
      return true;
    });
  }
});
