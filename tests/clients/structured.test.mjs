// structured.test.mjs - constrained decoding through the official `openai`
// SDK with stories260K, a model that knows nothing of JSON: response_format
// json_schema (plain and streamed) validates against the schema, json_object
// parses, tool_choice "required" and a named function give a tool call whose
// arguments validate, and bad schemas or grammars get 400 naming the cause.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer, testModel, modelSkip } from './server.mjs';

const skip = testModel() ? false : modelSkip;
let srv, client;
const say = [{ role: 'user', content: 'Tell me about a girl.' }];

before(async () => {
  if (skip) return;
  srv = await startServer();
  client = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'unused', maxRetries: 0 });
});
after(async () => {
  if (!srv) return;
  const { code } = await srv.stop();
  assert.equal(code, 0, srv.log());
});

// The keywords these tests use, checked the way JSON Schema defines them.
function validate(v, s, path = '$') {
  const fail = (why) => { throw new Error(`${path}: ${why} (${JSON.stringify(v)})`); };
  if (s.enum && !s.enum.some((e) => JSON.stringify(e) === JSON.stringify(v))) fail('not in enum');
  const types = s.type ? [].concat(s.type) : [];
  const typeOk = (t) => ({
    object: v !== null && typeof v === 'object' && !Array.isArray(v), array: Array.isArray(v),
    string: typeof v === 'string', integer: Number.isInteger(v), number: typeof v === 'number',
    boolean: typeof v === 'boolean', null: v === null,
  })[t];
  if (types.length && !types.some(typeOk)) fail(`not ${types.join('|')}`);
  if (typeof v === 'number') {
    if (s.minimum !== undefined && v < s.minimum) fail('below minimum');
    if (s.maximum !== undefined && v > s.maximum) fail('above maximum');
  }
  if (typeof v === 'string') {
    const n = [...v].length;
    if (s.minLength !== undefined && n < s.minLength) fail('too short');
    if (s.maxLength !== undefined && n > s.maxLength) fail('too long');
    if (s.pattern && !new RegExp(s.pattern).test(v)) fail('pattern');
  }
  if (Array.isArray(v)) {
    if (s.minItems !== undefined && v.length < s.minItems) fail('too few items');
    if (s.maxItems !== undefined && v.length > s.maxItems) fail('too many items');
    if (s.items) v.forEach((x, i) => validate(x, s.items, `${path}[${i}]`));
  }
  if (typeOk('object') && s.properties) {
    for (const k of s.required || []) if (!(k in v)) fail(`missing ${k}`);
    for (const [k, x] of Object.entries(v)) {
      if (s.properties[k]) validate(x, s.properties[k], `${path}.${k}`);
      else if (s.additionalProperties === false) fail(`extra property ${k}`);
    }
  }
}

const person = {
  type: 'object',
  properties: {
    name: { type: 'string', minLength: 1, maxLength: 16 },
    age: { type: 'integer', minimum: 0, maximum: 120 },
    mood: { enum: ['happy', 'sad', 'brave'] },
    tags: { type: 'array', items: { type: 'string', maxLength: 8 }, maxItems: 3 },
    code: { type: 'string', pattern: '^[A-Z]{2}[0-9]{2}$' },
    pet: { type: ['string', 'null'], maxLength: 10 },
  },
  required: ['name', 'age', 'mood', 'tags', 'code', 'pet'],
  additionalProperties: false,
};
const rf = { type: 'json_schema', json_schema: { name: 'person', strict: true, schema: person } };

test('json_schema: non-streamed output validates', { skip }, async () => {
  for (const seed of [1, 2, 3]) {
    const r = await client.chat.completions.create({
      model: 'stories260K', messages: say, max_tokens: 400, seed, response_format: rf,
    });
    assert.equal(r.choices[0].finish_reason, 'stop', r.choices[0].message.content);
    validate(JSON.parse(r.choices[0].message.content), person);
  }
});

test('json_schema: streamed output validates (greedy too)', { skip }, async () => {
  for (const temperature of [0, 1]) {
    const stream = await client.chat.completions.create({
      model: 'stories260K', messages: say, max_tokens: 400, seed: 7, temperature, stream: true,
      response_format: rf,
    });
    let text = '', finish;
    for await (const chunk of stream) {
      const c = chunk.choices[0];
      if (!c) continue;
      text += c.delta.content || '';
      finish = c.finish_reason || finish;
    }
    assert.equal(finish, 'stop', text);
    validate(JSON.parse(text), person);
  }
});

test('json_object: the output is one JSON object', { skip }, async () => {
  const r = await client.chat.completions.create({
    model: 'stories260K', messages: say, max_tokens: 300, seed: 5, response_format: { type: 'json_object' },
  });
  const c = r.choices[0];
  // a weak model may run out of tokens inside a string; a finished one parses
  if (c.finish_reason === 'stop') assert.equal(typeof JSON.parse(c.message.content), 'object');
  assert.match(c.message.content, /^\{/);
});

test('grammar field: GBNF constrains the output', { skip }, async () => {
  const r = await client.chat.completions.create({
    model: 'stories260K', messages: say, max_tokens: 50, seed: 2,
    grammar: 'root ::= ("yes" | "no") " " [0-9]{2}',
  });
  assert.match(r.choices[0].message.content, /^(yes|no) [0-9]{2}$/);
  assert.equal(r.choices[0].finish_reason, 'stop');
});

const weather = {
  type: 'object',
  properties: {
    city: { type: 'string', minLength: 2, maxLength: 12 },
    days: { type: 'integer', minimum: 1, maximum: 7 },
    unit: { enum: ['c', 'f'] },
  },
  required: ['city', 'days', 'unit'],
  additionalProperties: false,
};
const tools = [
  { type: 'function', function: { name: 'get_weather', description: 'Weather forecast', parameters: weather } },
  { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: { zone: { enum: ['utc', 'local'] } }, required: ['zone'] } } },
];

test('tool_choice required: a tool call whose arguments validate, plain and streamed', { skip }, async () => {
  const r = await client.chat.completions.create({
    model: 'stories260K', messages: say, max_tokens: 300, seed: 3, tools, tool_choice: 'required',
    parallel_tool_calls: false,
  });
  const m = r.choices[0].message;
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  assert.equal(m.tool_calls.length, 1);
  const call = m.tool_calls[0];
  const schema = tools.find((t) => t.function.name === call.function.name).function.parameters;
  validate(JSON.parse(call.function.arguments), schema);

  const stream = await client.chat.completions.create({
    model: 'stories260K', messages: say, max_tokens: 300, seed: 4, tools, tool_choice: 'required',
    parallel_tool_calls: false, stream: true,
  });
  let name = '', args = '', finish;
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    if (!c) continue;
    for (const t of c.delta.tool_calls || []) {
      name += t.function?.name || '';
      args += t.function?.arguments || '';
    }
    finish = c.finish_reason || finish;
  }
  assert.equal(finish, 'tool_calls');
  validate(JSON.parse(args), tools.find((t) => t.function.name === name).function.parameters);
});

test('tool_choice naming a function forces that function', { skip }, async () => {
  const r = await client.chat.completions.create({
    model: 'stories260K', messages: say, max_tokens: 300, seed: 9, tools, parallel_tool_calls: false,
    tool_choice: { type: 'function', function: { name: 'get_weather' } },
  });
  const call = r.choices[0].message.tool_calls[0];
  assert.equal(call.function.name, 'get_weather');
  validate(JSON.parse(call.function.arguments), weather);
});

test('bad schemas, grammars and tool choices: 400 naming the cause', { skip }, async () => {
  const bad = async (extra, param, re) => {
    await assert.rejects(
      client.chat.completions.create({ model: 'stories260K', messages: say, max_tokens: 5, ...extra }),
      (e) => e.status === 400 && e.param === param && re.test(e.message),
    );
  };
  await bad({ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', properties: { a: { not: {} } } } } } },
    'response_format.json_schema.schema', /\/properties\/a: unsupported keyword 'not'/);
  await bad({ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'string', pattern: '(?<=a)b' } } } },
    'response_format.json_schema.schema', /pattern: unsupported group/);
  await bad({ response_format: { type: 'json_schema', json_schema: { name: 'x' } } }, 'response_format.json_schema', /schema/);
  await bad({ response_format: { type: 'xml' } }, 'response_format', /text, json_object or json_schema/);
  await bad({ grammar: 'root ::= "a" (b' }, 'grammar', /line 1 col 14: group without its closing/);
  await bad({ grammar: 'root ::= nope' }, 'grammar', /undefined rule 'nope'/);
  await bad({ tools, tool_choice: { type: 'function', function: { name: 'fly' } } }, 'tool_choice', /no function named 'fly'/);
});
