// responses.test.mjs - POST /v1/responses and the stored-response routes
// through real clients: the official `openai` SDK (plain, streamed with the
// exact event order and sequence numbers, the SDK's stream helper, a function
// tool round trip, previous_response_id chaining that hits the prefix cache,
// retrieve / input_items / delete, json_schema output, errors naming the
// field), the Vercel AI SDK's default OpenAI factory (which speaks the
// Responses API) and LangChain's ChatOpenAI with useResponsesApi. The tiny
// model's text is nonsense; the protocol is what is tested. Codex runs in
// codex.test.mjs (it needs a model with a long context).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { createOpenAI } from '@ai-sdk/openai';
import { generateText, generateObject, streamText, tool, jsonSchema } from 'ai';
import { ChatOpenAI } from '@langchain/openai';
import { AIMessage, HumanMessage, ToolMessage } from '@langchain/core/messages';
import { startServer, testModel, modelSkip, rawSSE } from './server.mjs';

const skip = testModel() ? false : modelSkip;
let srv, client;

const weather = {
  type: 'function', name: 'get_weather', description: 'Weather of a city', strict: true,
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'], additionalProperties: false },
};

before(async () => {
  if (skip) return;
  // hermes: the tiny model's template has no tool format of its own
  srv = await startServer(['--tool-parser', 'hermes', '--responses-store', '8']);
  client = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'unused', maxRetries: 0 });
});
after(async () => {
  if (!srv) return;
  const { code } = await srv.stop();
  assert.equal(code, 0, srv.log());
});

// ---- the openai SDK -------------------------------------------------------------

test('responses: plain create, the response object and usage', { skip }, async () => {
  const r = await client.responses.create({
    model: 'stories260K', instructions: 'Tell a story.', input: 'Once upon a time',
    max_output_tokens: 12, temperature: 0,
  });
  assert.match(r.id, /^resp_[0-9a-f]{24}$/);
  assert.equal(r.object, 'response');
  assert.equal(typeof r.created_at, 'number');
  assert.equal(r.model, 'stories260K');
  assert.equal(r.instructions, 'Tell a story.');
  assert.equal(r.max_output_tokens, 12);
  assert.equal(r.status, 'incomplete');
  assert.deepEqual(r.incomplete_details, { reason: 'max_output_tokens' });
  assert.equal(r.output.length, 1);
  const m = r.output[0];
  assert.equal(m.type, 'message');
  assert.equal(m.role, 'assistant');
  assert.match(m.id, /^msg_/);
  assert.equal(m.content[0].type, 'output_text');
  assert.equal(m.status, 'incomplete');           // the item the answer stopped in
  assert.ok(r.output_text.length > 0);              // the SDK's convenience field
  assert.equal(r.output_text, m.content[0].text);
  assert.equal(r.usage.output_tokens, 12);
  assert.ok(r.usage.input_tokens > 0);
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + 12);
  assert.equal(typeof r.usage.input_tokens_details.cached_tokens, 'number');
  assert.equal(r.usage.output_tokens_details.reasoning_tokens, 0);
  // greedy is repeatable
  const again = await client.responses.create({
    model: 'stories260K', instructions: 'Tell a story.', input: 'Once upon a time',
    max_output_tokens: 12, temperature: 0, store: false,
  });
  assert.equal(again.output_text, r.output_text);
  assert.equal(again.store, false);
});

test('responses: a stream has the full event sequence, numbered', { skip }, async () => {
  const stream = await client.responses.create({
    model: 'stories260K', input: [{ role: 'user', content: [{ type: 'input_text', text: 'Once upon a time' }] }],
    max_output_tokens: 16, temperature: 0, stream: true,
  });
  const events = [];
  for await (const ev of stream) events.push(ev);
  events.forEach((ev, i) => assert.equal(ev.sequence_number, i, ev.type));
  const types = events.map((e) => e.type);
  const deltas = types.filter((t) => t === 'response.output_text.delta').length;
  assert.ok(deltas > 0);
  assert.deepEqual(types, [
    'response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added',
    ...Array(deltas).fill('response.output_text.delta'),
    'response.output_text.done', 'response.content_part.done', 'response.output_item.done', 'response.incomplete',
  ]);
  assert.equal(events[0].response.status, 'in_progress');
  assert.deepEqual(events[0].response.output, []);
  const text = events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('');
  const done = events.find((e) => e.type === 'response.output_text.done');
  assert.equal(done.text, text);
  const item = events.find((e) => e.type === 'response.output_item.added').item;
  assert.ok(events.filter((e) => e.item_id !== undefined).every((e) => e.item_id === item.id));
  const last = events.at(-1).response;
  assert.equal(last.status, 'incomplete');
  assert.equal(last.output[0].content[0].text, text);
  assert.equal(last.usage.output_tokens, 16);
  // the same answer as a non-streamed request
  const plain = await client.responses.create({
    model: 'stories260K', input: [{ role: 'user', content: [{ type: 'input_text', text: 'Once upon a time' }] }],
    max_output_tokens: 16, temperature: 0,
  });
  assert.equal(plain.output_text, text);
});

test('responses: the SDK stream helper accepts the events', { skip }, async () => {
  // the helper checks every event against the state it built from the earlier ones
  const s = client.responses.stream({ model: 'stories260K', input: 'Once upon a time', max_output_tokens: 40, seed: 3 });
  let deltas = '';
  s.on('response.output_text.delta', (e) => { deltas += e.delta; });
  const final = await s.finalResponse();
  assert.equal(final.status, 'incomplete');
  assert.equal(final.output_text, deltas);
  // a forced call ends the answer: status completed
  const c = client.responses.stream({
    model: 'stories260K', input: 'Weather?', tools: [weather], tool_choice: 'required', parallel_tool_calls: false,
    max_output_tokens: 200, temperature: 0, store: false,
  });
  const cf = await c.finalResponse();
  assert.equal(cf.status, 'completed');
  assert.equal(cf.incomplete_details, null);
  assert.equal(cf.output.filter((o) => o.type === 'function_call').length, 1);
  // raw frames: the SSE event name is the type
  const raw = await rawSSE(`${srv.url}/v1/responses`, { model: 'x', input: 'Hi', max_output_tokens: 2, stream: true });
  assert.equal(raw.status, 200);
  assert.match(raw.headers.get('content-type'), /^text\/event-stream/);
  const data = raw.frames.filter((f) => f.data !== undefined);
  assert.ok(data.length > 4);
  for (const f of data) assert.equal(f.event, JSON.parse(f.data).type);
});

test('responses: a function tool round trip', { skip }, async () => {
  const r1 = await client.responses.create({
    model: 'stories260K', input: 'Weather in Paris?', tools: [weather], tool_choice: 'required',
    parallel_tool_calls: false, max_output_tokens: 200, temperature: 0,
  });
  const calls = r1.output.filter((o) => o.type === 'function_call');
  assert.equal(calls.length, 1, JSON.stringify(r1.output));
  const call = calls[0];
  assert.equal(call.name, 'get_weather');
  assert.match(call.call_id, /^call_/);
  assert.match(call.id, /^fc_/);
  assert.equal(call.status, 'completed');
  assert.equal(typeof JSON.parse(call.arguments).city, 'string');
  assert.equal(r1.tools[0].name, 'get_weather');
  // chained: only the output goes back
  const r2 = await client.responses.create({
    model: 'stories260K', previous_response_id: r1.id, tools: [weather],
    input: [{ type: 'function_call_output', call_id: call.call_id, output: '{"temp": 21}' }],
    max_output_tokens: 8, temperature: 0,
  });
  assert.equal(r2.previous_response_id, r1.id);
  assert.equal(r2.output.at(-1).type, 'message');
  assert.ok(r2.usage.input_tokens_details.cached_tokens > 0, JSON.stringify(r2.usage));
  // stateless: the call and its output sent back as items give the same prompt
  const r3 = await client.responses.create({
    model: 'stories260K', tools: [weather], store: false,
    input: [{ role: 'user', content: 'Weather in Paris?' }, call,
      { type: 'function_call_output', call_id: call.call_id, output: '{"temp": 21}' }],
    max_output_tokens: 8, temperature: 0,
  });
  assert.equal(r3.usage.input_tokens, r2.usage.input_tokens);
  assert.equal(r3.output_text, r2.output_text);
  // streamed: the call's events
  const stream = await client.responses.create({
    model: 'stories260K', input: 'Weather in Oslo?', tools: [weather], tool_choice: { type: 'function', name: 'get_weather' },
    parallel_tool_calls: false, max_output_tokens: 200, temperature: 0, stream: true, store: false,
  });
  const events = [];
  for await (const ev of stream) events.push(ev);
  const added = events.find((e) => e.type === 'response.output_item.added' && e.item.type === 'function_call');
  assert.ok(added, events.map((e) => e.type).join(' '));
  assert.equal(added.item.arguments, '');
  const args = events.filter((e) => e.type === 'response.function_call_arguments.delta').map((e) => e.delta).join('');
  const argsDone = events.find((e) => e.type === 'response.function_call_arguments.done');
  assert.equal(argsDone.arguments, args);
  assert.equal(typeof JSON.parse(args).city, 'string');
  assert.equal(events.at(-1).type, 'response.completed');
  events.forEach((ev, i) => assert.equal(ev.sequence_number, i));
});

test('responses: previous_response_id chains and hits the prefix cache', { skip }, async () => {
  const r1 = await client.responses.create({
    model: 'stories260K', instructions: 'Tell a story.', input: 'Once upon a time there was a girl named Lily.',
    max_output_tokens: 40, temperature: 0,
  });
  const r2 = await client.responses.create({
    model: 'stories260K', instructions: 'Tell a story.', previous_response_id: r1.id, input: 'What happened next?',
    max_output_tokens: 8, temperature: 0,
  });
  // the first prompt and its answer come back as the same tokens
  assert.ok(r2.usage.input_tokens > r1.usage.input_tokens + r1.usage.output_tokens);
  const full = 16 * Math.floor((r1.usage.input_tokens + r1.usage.output_tokens - 1) / 16);
  assert.ok(r2.usage.input_tokens_details.cached_tokens >= full - 16, JSON.stringify([r1.usage, r2.usage]));
  await assert.rejects(
    client.responses.create({ model: 'x', input: 'x', previous_response_id: 'resp_000000000000000000000000' }),
    (e) => e.status === 404 && e.param === 'previous_response_id');
});

test('responses: retrieve, input items, delete', { skip }, async () => {
  const r = await client.responses.create({
    model: 'stories260K', input: [{ role: 'user', content: 'Once' }, { role: 'user', content: 'upon a time' }],
    max_output_tokens: 4, metadata: { k: 'v' },
  });
  const got = await client.responses.retrieve(r.id);
  assert.equal(got.id, r.id);
  assert.deepEqual(got.output, r.output);
  assert.deepEqual(got.usage, r.usage);
  assert.deepEqual(got.metadata, { k: 'v' });
  const items = await client.responses.inputItems.list(r.id);
  assert.equal(items.data.length, 2);
  assert.equal(items.data[1].content, 'upon a time');
  assert.ok(items.data.every((i) => typeof i.id === 'string' && i.type === 'message'));
  await client.responses.delete(r.id);
  await assert.rejects(client.responses.retrieve(r.id), (e) => e.status === 404);
  await assert.rejects(client.responses.delete(r.id), (e) => e.status === 404);
  // store: false keeps nothing
  const s = await client.responses.create({ model: 'x', input: 'Hi', max_output_tokens: 2, store: false });
  await assert.rejects(client.responses.retrieve(s.id), (e) => e.status === 404);
});

test('responses: json_schema output', { skip }, async () => {
  const schema = {
    type: 'object', properties: { name: { type: 'string', maxLength: 12 }, age: { type: 'integer', minimum: 0, maximum: 99 } },
    required: ['name', 'age'], additionalProperties: false,
  };
  const r = await client.responses.create({
    model: 'stories260K', input: 'Tell me about a girl.', max_output_tokens: 400, temperature: 0,
    text: { format: { type: 'json_schema', name: 'person', schema, strict: true } },
  });
  assert.equal(r.status, 'completed', r.output_text);
  const v = JSON.parse(r.output_text);
  assert.equal(typeof v.name, 'string');
  assert.ok(Number.isInteger(v.age));
  assert.equal(r.text.format.type, 'json_schema');
  const o = await client.responses.create({
    model: 'stories260K', input: 'Tell me about a girl.', max_output_tokens: 400, temperature: 0, text: { format: { type: 'json_object' } },
  });
  // json_object bounds nothing, so the tiny model may not close it in time
  assert.equal(o.text.format.type, 'json_object');
  assert.match(o.output_text, /^\s*\{/);
});

test('responses: bad requests get 400 naming the field', { skip }, async () => {
  const bad = async (body, param) => {
    await assert.rejects(client.responses.create({ model: 'stories260K', max_output_tokens: 4, ...body }), (e) => {
      assert.equal(e.status, 400, e.message);
      assert.equal(e.param, param, e.message);
      assert.equal(e.error.type, 'invalid_request_error');
      return true;
    });
  };
  await bad({ input: 'x', tools: [{ type: 'web_search' }] }, 'tools[0].type');
  await bad({ input: 'x', tools: [weather, { type: 'file_search', vector_store_ids: ['v'] }] }, 'tools[1].type');
  // mcp tools are the server's (--mcp-config, responses_mcp.test.mjs); without one: 400
  await bad({ input: 'x', tools: [{ type: 'mcp', server_label: 's', server_url: 'http://127.0.0.1:1' }] }, 'tools');
  await bad({ input: 'x', tools: [{ type: 'mcp', server_label: 's' }] }, 'tools');
  await bad({ input: 'x', tools: [{ type: 'code_interpreter', container: { type: 'auto' } }] }, 'tools[0].type');
  await bad({ input: [] }, 'input');
  await bad({ input: [{ type: 'item_reference', id: 'x' }] }, 'input[0]');
  await bad({ input: 'x', max_output_tokens: 0 }, 'max_output_tokens');
  await bad({ input: 'x', text: { format: { type: 'json_schema', name: 'x' } } }, 'text.format.schema');
  await bad({ input: 'x', tools: [weather], tool_choice: { type: 'function', name: 'nope' } }, 'tool_choice.name');
  await bad({ input: 'x', temperature: 'hot' }, 'temperature');
  // errors of the chat path name the Responses field
  await bad({ input: 'x', reasoning: { effort: 'extreme' } }, 'reasoning.effort');
  await bad({ input: 'x', text: { format: { type: 'json_schema', name: 'x', schema: { type: 'object', properties: { a: { type: 'string', pattern: '(' } } } } } },
    'text.format.schema');
  // an image part without a vision model (--mmproj)
  await assert.rejects(client.responses.create({
    model: 'x', input: [{ role: 'user', content: [{ type: 'input_text', text: 'What is this?' },
      { type: 'input_image', image_url: 'data:image/png;base64,iVBORw0KGgo=' }] }],
  }), (e) => e.status === 400 && /image|vision/i.test(e.message));
  // a JSON body that is not an object, and a GET of an id with a slash
  const r = await fetch(`${srv.url}/v1/responses`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '[1]' });
  assert.equal(r.status, 400);
  await r.arrayBuffer();
  const g = await fetch(`${srv.url}/v1/responses/a%2Fb`);
  assert.equal(g.status, 404);
  assert.equal((await g.json()).error.param, 'response_id');
});

test('responses: a client that leaves mid-stream does not hold up the others', { skip }, async () => {
  const ac = new AbortController();
  const r = await fetch(`${srv.url}/v1/responses`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, signal: ac.signal,
    body: JSON.stringify({ model: 'x', input: 'Once upon a time', max_output_tokens: 400, stream: true, store: false }),
  });
  const reader = r.body.getReader();
  const first = await reader.read();   // at least response.created
  assert.match(new TextDecoder().decode(first.value), /response\.created/);
  ac.abort();
  const after = await client.responses.create({ model: 'x', input: 'Hi', max_output_tokens: 3, store: false });
  assert.equal(after.usage.output_tokens, 3);
});

// ---- the Vercel AI SDK: createOpenAI(...)('model') is the Responses API -------------

test('ai sdk: generateText and streamText through the default factory', { skip }, async () => {
  const openai = createOpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'unused' });
  const g = await generateText({ model: openai('stories260K'), prompt: 'Once upon a time', maxOutputTokens: 12, temperature: 0, maxRetries: 0 });
  assert.ok(g.text.length > 0);
  assert.equal(g.finishReason, 'length');
  assert.equal(g.usage.outputTokens, 12);
  assert.ok(g.response.id.startsWith('resp_'));
  const s = streamText({ model: openai('stories260K'), prompt: 'Once upon a time', maxOutputTokens: 12, temperature: 0, maxRetries: 0 });
  let text = '';
  for await (const part of s.textStream) text += part;
  assert.equal(text, g.text);
  assert.equal(await s.finishReason, 'length');
  assert.equal((await s.usage).outputTokens, 12);
});

test('ai sdk: a tool call through the Responses API', { skip }, async () => {
  const openai = createOpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'unused' });
  const g = await generateText({
    model: openai('stories260K'), prompt: 'Weather in Paris?', maxOutputTokens: 200, temperature: 0, maxRetries: 0,
    tools: { get_weather: tool({ description: 'Weather of a city', inputSchema: jsonSchema(weather.parameters) }) },
    toolChoice: 'required', providerOptions: { openai: { parallelToolCalls: false } },
  });
  assert.equal(g.finishReason, 'tool-calls');
  assert.equal(g.toolCalls.length, 1);
  assert.equal(g.toolCalls[0].toolName, 'get_weather');
  assert.equal(typeof g.toolCalls[0].input.city, 'string');
});

test('ai sdk: generateObject sends text.format json_schema', { skip }, async () => {
  const openai = createOpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'unused' });
  const o = await generateObject({
    model: openai('stories260K'), prompt: 'Tell me about a girl.', maxOutputTokens: 400, temperature: 0, maxRetries: 0,
    schema: jsonSchema({ type: 'object', properties: { name: { type: 'string', maxLength: 12 }, age: { type: 'integer', minimum: 0, maximum: 99 } },
      required: ['name', 'age'], additionalProperties: false }),
  });
  assert.equal(typeof o.object.name, 'string');
  assert.ok(Number.isInteger(o.object.age));
});

// ---- LangChain: ChatOpenAI({ useResponsesApi: true }) -----------------------------

test('langchain: ChatOpenAI with useResponsesApi, invoke and stream', { skip }, async () => {
  const llm = new ChatOpenAI({
    model: 'stories260K', apiKey: 'unused', useResponsesApi: true, maxTokens: 12, temperature: 0, maxRetries: 0,
    configuration: { baseURL: `${srv.url}/v1` },
  });
  const m = await llm.invoke('Once upon a time');
  assert.ok(typeof m.content === 'string' || Array.isArray(m.content));
  const text = typeof m.content === 'string' ? m.content : m.content.map((c) => c.text || '').join('');
  assert.ok(text.length > 0);
  assert.ok(m.id === undefined || typeof m.id === 'string');
  assert.equal(m.usage_metadata.output_tokens, 12);
  let streamed = '';
  for await (const chunk of await llm.stream('Once upon a time')) {
    streamed += typeof chunk.content === 'string' ? chunk.content : chunk.content.map((c) => c.text || '').join('');
  }
  assert.equal(streamed, text);
  // bound tools and a tool round trip in the history: AIMessage tool_calls
  // and ToolMessage become function_call and function_call_output items
  const withTool = llm.bindTools([{ type: 'function', function: { name: weather.name, description: weather.description, parameters: weather.parameters } }]);
  const tm = await withTool.invoke([
    new HumanMessage('Weather in Paris?'),
    new AIMessage({ content: '', tool_calls: [{ id: 'call_1', name: 'get_weather', args: { city: 'Paris' } }] }),
    new ToolMessage({ tool_call_id: 'call_1', content: '{"temp": 21}' }),
  ]);
  assert.equal(tm.usage_metadata.output_tokens, 12);
  assert.ok(tm.usage_metadata.input_tokens > 30);
});
