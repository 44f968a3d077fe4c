// forced_tools.test.mjs - forced tool calls stop (issue 15 item 4): with
// tool_choice "required" or a named function (Anthropic "any" / "tool") the
// answer is the calls the model writes, complete, and then the end -
// finish_reason "tool_calls" (stop_reason "tool_use") within max_tokens,
// one call when parallel_tool_calls is false, and arguments valid against
// the tool's schema even where the tiny model would ramble inside a string
// past the limit (the engine closes the call on its shortest way,
// docs/tools.md). Swept over seeds on stories260K without a template (the
// JSON call format) and with real templates (hermes, llama3, mistral), plain
// and streamed, and through the OpenAI SDK's runTools().
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { startServer, testModel, modelSkip, rawSSE, root } from './server.mjs';

const skip = testModel() ? false : modelSkip;
const SEEDS = 20;
const MAX_TOKENS = 120;

// A copy of the test model with tokenizer.chat_template from a fixture and
// room (4096 positions) for the tools preamble of the template.
function withTemplate(name) {
  const out = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'omni-ftpl-')), `${name}.gguf`);
  const code = `
import sys
sys.path.insert(0, sys.argv[4])
from gguf import GGUFReader, GGUFWriter, GGUF_STRING
r = GGUFReader(sys.argv[1])
w = GGUFWriter(sys.argv[2])
for k, (vt, v, el) in r.kv.items():
    w.add(k, 4096 if k.endswith('.context_length') else v, vt, el)
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

// Free strings, a nested object, an array, an enum, a boolean: everything a
// rambling model can leave open when the tokens run out.
const params = {
  get_weather: {
    type: 'object',
    properties: {
      city: { type: 'string' },
      days: { type: 'integer', minimum: 1, maximum: 14 },
      units: { type: 'string', enum: ['celsius', 'fahrenheit'] },
      where: { type: 'object', properties: { lat: { type: 'number' }, lon: { type: 'number' } }, required: ['lat', 'lon'] },
      tags: { type: 'array', items: { type: 'string' } },
    },
    required: ['city', 'days', 'where'],
  },
  add: { type: 'object', properties: { a: { type: 'number' }, b: { type: 'number' } }, required: ['a', 'b'] },
  set_alarm: { type: 'object', properties: { on: { type: 'boolean' }, label: { type: 'string' } }, required: ['on', 'label'] },
};
const names = Object.keys(params);
const tools = names.map((name) => ({ type: 'function', function: { name, description: `the ${name} tool`, parameters: params[name] } }));
const aTools = names.map((name) => ({ name, description: `the ${name} tool`, input_schema: params[name] }));

// The schema subset above, checked strictly (extra keys too: the grammar
// closes objects to the declared properties). Returns the first problem.
function invalid(schema, v, at = '$') {
  const t = schema.type;
  if (t === 'object') {
    if (typeof v !== 'object' || v === null || Array.isArray(v)) return `${at}: not an object`;
    for (const k of schema.required ?? []) if (!(k in v)) return `${at}: required '${k}' missing`;
    for (const [k, x] of Object.entries(v)) {
      if (!schema.properties?.[k]) return `${at}: unknown key '${k}'`;
      const bad = invalid(schema.properties[k], x, `${at}.${k}`);
      if (bad) return bad;
    }
    return null;
  }
  if (t === 'array') {
    if (!Array.isArray(v)) return `${at}: not an array`;
    for (let i = 0; i < v.length; i++) {
      const bad = invalid(schema.items, v[i], `${at}[${i}]`);
      if (bad) return bad;
    }
    return null;
  }
  if (t === 'string' && typeof v !== 'string') return `${at}: not a string`;
  if (t === 'number' && typeof v !== 'number') return `${at}: not a number`;
  if (t === 'integer' && !Number.isInteger(v)) return `${at}: not an integer`;
  if (t === 'boolean' && typeof v !== 'boolean') return `${at}: not a boolean`;
  if (schema.enum && !schema.enum.includes(v)) return `${at}: not one of the enum`;
  if (schema.minimum !== undefined && v < schema.minimum) return `${at}: below minimum`;
  if (schema.maximum !== undefined && v > schema.maximum) return `${at}: above maximum`;
  return null;
}

// Check one OpenAI choice; what: a label for failures.
function checkChoice(choice, usage, { name, parallel }, what) {
  const ctx = `${what}: ${JSON.stringify(choice)}`;
  assert.equal(choice.finish_reason, 'tool_calls', ctx);
  assert.ok(usage.completion_tokens <= MAX_TOKENS, ctx);
  const calls = choice.message.tool_calls;
  assert.ok(calls?.length >= 1, ctx);
  if (!parallel) assert.equal(calls.length, 1, ctx);
  for (const c of calls) {
    assert.equal(c.type, 'function', ctx);
    if (name) assert.equal(c.function.name, name, ctx);
    assert.ok(params[c.function.name], ctx);
    const args = JSON.parse(c.function.arguments);
    const bad = invalid(params[c.function.name], args);
    assert.equal(bad, null, `${bad} in ${ctx}`);
  }
}

let plain, templated = {}, client;
const TEMPLATES = ['qwen3', 'llama3.1', 'mistral-v0.3'];   // hermes, llama3 and mistral call formats

before(async () => {
  if (skip) return;
  plain = await startServer();
  client = new OpenAI({ baseURL: `${plain.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  for (const t of TEMPLATES) templated[t] = await startServer([], { model: withTemplate(t) });
});
after(async () => {
  for (const s of [plain, ...Object.values(templated)]) {
    if (!s) continue;
    const { code } = await s.stop();
    assert.equal(code, 0, s.log());
  }
});

const say = [{ role: 'user', content: 'What is the weather in Paris, and what is 2 + 3?' }];

test(`forced calls stop: ${SEEDS} seeds x (required, named) x (parallel off, on)`, { skip }, async () => {
  for (const parallel of [false, true]) {
    for (let seed = 0; seed < SEEDS; seed++) {
      for (const name of [null, names[seed % names.length]]) {
        const r = await client.chat.completions.create({
          model: 'stories260K', messages: say, tools, max_tokens: MAX_TOKENS, seed, temperature: seed % 4 === 0 ? 0 : 1,
          tool_choice: name ? { type: 'function', function: { name } } : 'required', parallel_tool_calls: parallel,
        });
        checkChoice(r.choices[0], r.usage, { name, parallel }, `seed ${seed} ${name ?? 'required'} parallel ${parallel}`);
      }
    }
  }
});

test('forced calls stop in the hermes, llama3 and mistral call formats', { skip }, async () => {
  for (const t of TEMPLATES) {
    const c = new OpenAI({ baseURL: `${templated[t].url}/v1`, apiKey: 'unused', maxRetries: 0 });
    for (let seed = 0; seed < 6; seed++) {
      const parallel = seed % 2 === 1;
      const name = seed % 3 === 0 ? names[seed % names.length] : null;
      const r = await c.chat.completions.create({
        model: 'x', messages: say, tools, max_tokens: MAX_TOKENS, seed, temperature: 1,
        tool_choice: name ? { type: 'function', function: { name } } : 'required', parallel_tool_calls: parallel,
      });
      checkChoice(r.choices[0], r.usage, { name, parallel }, `${t} seed ${seed}`);
    }
  }
});

test('streamed forced calls: the deltas assemble into complete calls, then tool_calls', { skip }, async () => {
  for (let seed = 0; seed < 6; seed++) {
    const parallel = seed % 2 === 0;
    const stream = await client.chat.completions.create({
      model: 'stories260K', messages: say, tools, max_tokens: MAX_TOKENS, seed, temperature: 1,
      tool_choice: 'required', parallel_tool_calls: parallel, stream: true, stream_options: { include_usage: true },
    });
    const calls = [];
    let finish = null, usage = null;
    for await (const chunk of stream) {
      if (chunk.usage) usage = chunk.usage;
      for (const ch of chunk.choices) {
        for (const d of ch.delta.tool_calls ?? []) {
          calls[d.index] ??= { type: 'function', function: { name: '', arguments: '' } };
          if (d.function?.name) calls[d.index].function.name += d.function.name;
          calls[d.index].function.arguments += d.function?.arguments ?? '';
        }
        if (ch.finish_reason) finish = ch.finish_reason;
      }
    }
    checkChoice({ finish_reason: finish, message: { tool_calls: calls } }, usage, { parallel }, `stream seed ${seed}`);
  }
});

test('runTools() with a forced call finishes (no LengthFinishReasonError)', { skip }, async () => {
  const seen = [];
  const fns = names.map((name) => ({
    type: 'function',
    function: {
      name, description: `the ${name} tool`, parameters: params[name], parse: JSON.parse,
      function: (args) => { seen.push({ name, args }); return { ok: true }; },
    },
  }));
  for (let seed = 0; seed < 4; seed++) {
    // a named function: the runner stops after the call
    const runner = client.chat.completions.runTools({
      model: 'stories260K', messages: say, tools: fns, max_tokens: MAX_TOKENS, seed, temperature: 1,
      tool_choice: { type: 'function', function: { name: 'get_weather' } }, parallel_tool_calls: false,
    });
    const done = await runner.finalChatCompletion();
    assert.equal(done.choices[0].finish_reason, 'tool_calls');
  }
  // "required": every turn is a call again; the runner stops after maxChatCompletions
  const runner = client.chat.completions.runTools({
    model: 'stories260K', messages: say, tools: fns, max_tokens: 60, seed: 7, temperature: 1, tool_choice: 'required',
  }, { maxChatCompletions: 2 });
  await runner.done();
  assert.ok(seen.length >= 5, JSON.stringify(seen));
  for (const s of seen) assert.equal(invalid(params[s.name], s.args), null, JSON.stringify(s));
});

test(`Anthropic tool_choice any / tool stop with tool_use: ${SEEDS} prompts x 2 x parallel off, on`, { skip }, async () => {
  const a = new Anthropic({ baseURL: templated.qwen3.url, apiKey: 'unused', maxRetries: 0 });
  for (const disable of [true, false]) {
    for (let i = 0; i < SEEDS; i++) {
      const name = names[i % names.length];
      for (const tool_choice of [{ type: 'any', disable_parallel_tool_use: disable }, { type: 'tool', name, disable_parallel_tool_use: disable }]) {
        const m = await a.messages.create({
          model: 'x', max_tokens: MAX_TOKENS, temperature: i % 4 === 0 ? 0 : 1, tools: aTools, tool_choice,
          messages: [{ role: 'user', content: `Question ${i}: the weather in city number ${i}?` }],
        });
        const ctx = `${i} ${JSON.stringify(tool_choice)}: ${JSON.stringify(m)}`;
        assert.equal(m.stop_reason, 'tool_use', ctx);
        assert.ok(m.usage.output_tokens <= MAX_TOKENS, ctx);
        const uses = m.content.filter((b) => b.type === 'tool_use');
        assert.ok(uses.length >= 1, ctx);
        if (disable) assert.equal(uses.length, 1, ctx);
        for (const u of uses) {
          if (tool_choice.type === 'tool') assert.equal(u.name, name, ctx);
          const bad = invalid(params[u.name], u.input);
          assert.equal(bad, null, `${bad} in ${ctx}`);
        }
      }
    }
  }
});

test('Anthropic streamed tool_use: input_json_delta assembles valid input, stop_reason tool_use', { skip }, async () => {
  for (let i = 0; i < 4; i++) {
    const body = {
      model: 'x', max_tokens: MAX_TOKENS, temperature: 1, tools: aTools, stream: true,
      tool_choice: { type: 'any', disable_parallel_tool_use: i % 2 === 0 },
      messages: [{ role: 'user', content: `Stream ${i}: weather?` }],
    };
    const raw = await rawSSE(`${templated.qwen3.url}/v1/messages`, body);
    assert.equal(raw.status, 200);
    const evs = raw.frames.filter((f) => f.data).map((f) => JSON.parse(f.data));
    const starts = evs.filter((e) => e.type === 'content_block_start' && e.content_block.type === 'tool_use');
    assert.ok(starts.length >= 1, JSON.stringify(evs));
    for (const s of starts) {
      const json = evs.filter((e) => e.type === 'content_block_delta' && e.index === s.index)
        .map((e) => e.delta.partial_json).join('');
      const bad = invalid(params[s.content_block.name], JSON.parse(json));
      assert.equal(bad, null, `${bad} in ${json}`);
    }
    const delta = evs.find((e) => e.type === 'message_delta');
    assert.equal(delta.delta.stop_reason, 'tool_use', JSON.stringify(evs));
  }
});
