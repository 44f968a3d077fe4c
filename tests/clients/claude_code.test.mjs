// claude_code.test.mjs - Anthropic agent clients end to end against
// /v1/messages: @anthropic-ai/claude-code (`claude -p "hello" --output-format
// json`, its default settings, no user config, telemetry and updates off)
// completes a turn with exit status 0 (the model name it sends is answered by
// the served model);
// the Vercel AI SDK's @ai-sdk/anthropic generateText and generateObject
// (output_config.format, the JSON-schema grammar; and for model ids the SDK
// does not know, its "json" tool forced with tool_choice any).
//
// The model for Claude Code: its request is a ~6 KB system prompt plus ~64 KB
// of tool schemas, a system turn in the middle of `messages`,
// `thinking: {type: "adaptive"}`, `output_config: {effort}`,
// `context_management` and `max_tokens: 64000` - far past stories260K's
// 512-token context. So it gets the agent model of agent_model.mjs (shared
// with codex.test.mjs): random weights in a tiny Qwen2 shape with the real
// Qwen2.5 vocabulary, a ChatML template that prints the tools, and a
// 32768-token context; Claude Code's prompt is ~20 K tokens there, prefilled
// in seconds on one thread, and `max_tokens: 64000` is clamped to what the
// context leaves. Random weights never pick <|im_end|> by themselves, and
// Claude Code treats a `max_tokens` stop as an error, so the server runs with
// agentServerArgs: `--logit-bias` (the llama.cpp-style server default) making
// <|im_end|> likely and banning <tool_call>, so answers end after a few
// random tokens with `end_turn` and never ask Claude Code to run a tool. A
// small proxy in front of the server records what Claude Code sends, so the
// test shows which of those fields it used.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { createAnthropic } from '@ai-sdk/anthropic';
import { generateText, generateObject, jsonSchema } from 'ai';
import { startServer, testModel, modelSkip, omni, root } from './server.mjs';
import { agentModel, agentModelSkip, agentServerArgs } from './agent_model.mjs';

const shared = path.join(root, '..', 'shared');
const claudeBin = path.join(root, 'tests', 'clients', 'node_modules', '.bin', 'claude');
const python = process.env.PYTHON || 'python3';
const IM_END = 151645; // <|im_end|> in the Qwen2.5 vocabulary (checked below)

function agentSkip() {
  if (!fs.existsSync(omni)) return `${omni} is not built`;
  if (!fs.existsSync(path.join(shared, 'vocab'))) return `no ${shared}/vocab (the Qwen2.5 vocabulary)`;
  if (!fs.existsSync(claudeBin)) return 'no node_modules/.bin/claude (npm ci in tests/clients)';
  const r = spawnSync(python, ['-c', 'import numpy'], { encoding: 'utf8' });
  if (r.status !== 0) return `${python} cannot import numpy (set PYTHON)`;
  return agentModel() ? false : agentModelSkip;
}
const skipAgent = agentSkip();
const skipSdk = testModel() ? false : modelSkip;

let tmp, agentSrv, proxy;
const seen = []; // {method, url, body} of every request Claude Code sent

// A pass-through proxy that keeps each request's method, path and JSON body.
function startProxy(target) {
  return new Promise((resolve) => {
    const srv = http.createServer((req, res) => {
      const chunks = [];
      req.on('data', (d) => chunks.push(d));
      req.on('end', () => {
        const body = Buffer.concat(chunks);
        let json = null;
        try { json = body.length ? JSON.parse(body) : null; } catch { /* not JSON */ }
        seen.push({ method: req.method, url: req.url, body: json });
        const up = http.request(`${target}${req.url}`, { method: req.method, headers: req.headers }, (ur) => {
          res.writeHead(ur.statusCode, ur.headers);
          ur.pipe(res);
        });
        up.on('error', () => { res.writeHead(502); res.end(); });
        up.end(body);
      });
    });
    srv.listen(0, '127.0.0.1', () => resolve({ srv, url: `http://127.0.0.1:${srv.address().port}` }));
  });
}

before(async () => {
  if (skipAgent) return;
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'omni-claude-'));
  // two threads: the ~20 K-token prompt is prefilled in seconds on a 2-core machine
  agentSrv = await startServer([...agentServerArgs, '--kv-memory', '64M', '--threads', '2'], { model: agentModel() });
  proxy = await startProxy(agentSrv.url);
});

after(async () => {
  if (proxy) proxy.srv.close();
  if (agentSrv) {
    const { code } = await agentSrv.stop();
    assert.equal(code, 0, agentSrv.log().slice(-3000)); // a clean exit (no leak under ASan)
  }
  if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
});

// `claude -p PROMPT --output-format json` with a fresh HOME and config dir
// (no user settings, no login), against base; resolves {code, json, stderr}.
function claude(base, args) {
  const home = fs.mkdtempSync(path.join(tmp, 'home-'));
  const env = {
    PATH: process.env.PATH,
    HOME: home,
    CLAUDE_CONFIG_DIR: path.join(home, '.claude'),
    ANTHROPIC_BASE_URL: base,
    ANTHROPIC_API_KEY: 'dummy',
    DISABLE_TELEMETRY: '1',
    DISABLE_AUTOUPDATER: '1',
    DISABLE_ERROR_REPORTING: '1',
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
  };
  return new Promise((resolve) => {
    const p = spawn(claudeBin, args, { env, cwd: home, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '', err = '';
    p.stdout.on('data', (d) => { out += d; });
    p.stderr.on('data', (d) => { err += d; });
    const timer = setTimeout(() => p.kill('SIGKILL'), 90000); // a hang, not a slow machine
    p.on('exit', (code) => {
      clearTimeout(timer);
      let json = null;
      try { json = JSON.parse(out.trim().split('\n').pop()); } catch { /* printed below */ }
      resolve({ code, json, out, stderr: err });
    });
  });
}

test('the agent model: <|im_end|> is the biased token', { skip: skipAgent }, async () => {
  assert.ok(agentServerArgs.join(' ').includes(`${IM_END}+`));
  const r = await fetch(`${agentSrv.url}/tokenize`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: '<|im_end|>', add_special_tokens: false }),
  });
  assert.deepEqual((await r.json()).tokens, [IM_END]);
});

test('claude -p completes a turn (exit 0) with its default settings', { skip: skipAgent }, async () => {
  seen.length = 0;
  const r = await claude(proxy.url, ['-p', 'hello', '--output-format', 'json']);
  const why = `exit ${r.code}\nstdout: ${r.out}\nstderr: ${r.stderr}\nserver:\n${agentSrv.log().slice(-3000)}`;
  assert.equal(r.code, 0, why);
  assert.ok(r.json, why);
  assert.equal(r.json.type, 'result');
  assert.equal(r.json.is_error, false, why);
  assert.equal(r.json.stop_reason, 'end_turn');
  assert.equal(typeof r.json.result, 'string');
  assert.ok(r.json.usage.input_tokens + r.json.usage.cache_read_input_tokens > 512, 'a prompt past 512 tokens was answered');

  // What it sent, and so what this test covers.
  assert.ok(seen.some((s) => s.method === 'HEAD' && s.url === '/'), 'HEAD / first');
  const m = seen.find((s) => s.method === 'POST' && s.url.startsWith('/v1/messages') && s.body?.tools);
  assert.ok(m, `a /v1/messages request with tools: ${seen.map((s) => `${s.method} ${s.url}`).join(', ')}`);
  assert.ok(m.body.max_tokens > 32768, `max_tokens ${m.body.max_tokens} past the context`);
  assert.ok(m.body.tools.length >= 10, 'many tools');
  assert.equal(m.body.stream, true);
  const features = {
    systemTurn: m.body.messages.some((x) => x.role === 'system'),
    thinking: m.body.thinking?.type,
    effort: m.body.output_config?.effort,
    contextManagement: !!m.body.context_management,
    cacheControl: JSON.stringify(m.body).includes('cache_control'),
  };
  console.log(`claude-code sent: ${JSON.stringify(features)}; model ${m.body.model}`);
  assert.notEqual(m.body.model, 'agent', 'its own model name, answered by the served model');
  // Fields Claude Code sends that this server does not use are logged once each.
  if (features.contextManagement)
    assert.match(agentSrv.log(), /ignoring the field 'context_management'/);
});


// ---- the Vercel AI SDK's Anthropic provider (stories260K) ---------------------

let sdkSrv;
const sdkSetup = async () => {
  if (!sdkSrv) sdkSrv = await startServer();
  return createAnthropic({ baseURL: `${sdkSrv.url}/v1`, apiKey: 'dummy' });
};
after(async () => {
  if (!sdkSrv) return;
  const { code } = await sdkSrv.stop();
  assert.equal(code, 0, sdkSrv.log().slice(-3000));
});

test('@ai-sdk/anthropic generateText', { skip: skipSdk }, async () => {
  const anthropic = await sdkSetup();
  const r = await generateText({
    model: anthropic('claude-sonnet-4-5'), system: 'You tell stories.', prompt: 'Once upon a time',
    maxOutputTokens: 12, temperature: 0,
  });
  assert.equal(typeof r.text, 'string');
  assert.ok(r.text.length > 0);
  assert.equal(r.usage.outputTokens, 12);
  assert.equal(r.finishReason, 'length');
});

test('@ai-sdk/anthropic generateObject through output_config.format', { skip: skipSdk }, async () => {
  const anthropic = await sdkSetup();
  // Only bounded values: a random story model fills free strings for ever.
  const schema = jsonSchema({
    type: 'object',
    properties: {
      mood: { type: 'string', enum: ['happy', 'sad', 'scared'] },
      friends: { type: 'boolean' },
    },
    required: ['mood', 'friends'],
    additionalProperties: false,
  });
  for (const seed of [1, 2, 3]) {
    const r = await generateObject({
      model: anthropic('claude-sonnet-4-5'), schema, prompt: `Story ${seed}: how did Lily feel?`,
      maxOutputTokens: 60,
      // the SDK's default for this id; structuredOutputMode 'outputFormat' forces it for any id
      ...(seed === 3 && { providerOptions: { anthropic: { structuredOutputMode: 'outputFormat' } } }),
    });
    assert.ok(['happy', 'sad', 'scared'].includes(r.object.mood), JSON.stringify(r.object));
    assert.equal(typeof r.object.friends, 'boolean');
    assert.deepEqual(Object.keys(r.object).sort(), ['friends', 'mood']);
    const sent = r.request.body;
    const body = typeof sent === 'string' ? JSON.parse(sent) : sent;
    assert.equal(body.output_config.format.type, 'json_schema', 'the SDK used output_config.format');
  }
});

test('@ai-sdk/anthropic generateObject with an unknown model id: the forced json tool', { skip: skipSdk }, async () => {
  const anthropic = await sdkSetup();
  const schema = jsonSchema({
    type: 'object',
    properties: { mood: { type: 'string', enum: ['happy', 'sad'] }, friends: { type: 'boolean' } },
    required: ['mood', 'friends'],
    additionalProperties: false,
  });
  for (const seed of [1, 2, 3]) {
    // no structured-output support known for this id: the SDK asks for a tool call
    const r = await generateObject({ model: anthropic('omniserve-local'), schema, prompt: `Lily ${seed}`, maxOutputTokens: 80 });
    assert.ok(['happy', 'sad'].includes(r.object.mood), JSON.stringify(r.object));
    assert.equal(typeof r.object.friends, 'boolean');
    const sent = r.request.body;
    const body = typeof sent === 'string' ? JSON.parse(sent) : sent;
    assert.equal(body.tool_choice.type, 'any');
    assert.equal(body.tools[0].name, 'json');
  }
});
