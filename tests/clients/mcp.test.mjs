// mcp.test.mjs - MCP tools (serve --mcp-config, docs/mcp.md) with the tiny
// stories260K model and the node MCP server of mcp_server.mjs, over stdio
// and Streamable HTTP: the listing routes, the server-side tool loop of
// "tool_execution": "server" through the official `openai` SDK (streamed
// and not), a tool that hangs (error result after --mcp-tool-timeout), a
// server that crashes (error result, restarted), output over the cap, bad
// requests, bad config files, and children reaped at shutdown. The model's
// text is nonsense: a named tool_choice makes the first turn call the tool.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { startServer, testModel, modelSkip, omni, waitFor } from './server.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const mcpServer = path.join(here, 'mcp_server.mjs');
const skip = testModel() ? false : modelSkip;
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'omni-mcp-'));
let srv, client, web;

// The HTTP MCP server on a free port (it prints "PORT n").
function startWeb() {
  return new Promise((resolve, reject) => {
    const p = spawn(process.execPath, [mcpServer, '--http', '0', '--name', 'web'], {
      stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, MCP_TEST_LATE_TOOL: '1', MCP_TEST_HEADER: 'yes' },
    });
    let out = '';
    p.stdout.on('data', (d) => {
      out += d;
      const m = /PORT (\d+)/.exec(out);
      if (m) resolve({ proc: p, port: Number(m[1]) });
    });
    p.on('exit', (code) => reject(new Error(`HTTP MCP server exited (${code})`)));
  });
}

const servers = async () => (await (await fetch(`${srv.url}/v1/mcp/servers`)).json()).data;
const byName = async (n) => (await servers()).find((s) => s.name === n);

before(async () => {
  if (skip) return;
  web = await startWeb();
  const cfg = path.join(dir, 'mcp.json');
  fs.writeFileSync(cfg, JSON.stringify({
    mcpServers: {
      local: { command: process.execPath, args: [mcpServer, '--name', 'local'], env: { MCP_TEST_LATE_TOOL: '1' } },
      web: { url: `http://127.0.0.1:${web.port}/mcp`, headers: { 'X-Test': 'yes' } },
      broken: { command: path.join(dir, 'no-such-program') },
    },
  }));
  srv = await startServer(['--tool-parser', 'hermes', '--mcp-config', cfg, '--mcp-tool-timeout', '3',
    '--mcp-restart-delay', '0.1', '--mcp-max-result', '128']);
  client = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  await waitFor(async () => {
    const s = await servers();
    return s.find((x) => x.name === 'local').status === 'connected' && s.find((x) => x.name === 'web').status === 'connected';
  }, 'the MCP servers to connect', 60000);
});

after(async () => {
  if (srv) {
    const pids = [...srv.log().matchAll(/mcp local: started '.*' \(pid (\d+)\)/g)].map((m) => Number(m[1]));
    const { code } = await srv.stop();
    assert.equal(code, 0, srv.log());
    // every stdio server it started is gone (reaped, not left running)
    for (const pid of pids) assert.throws(() => process.kill(pid, 0), /ESRCH/, `MCP child ${pid} still runs`);
  }
  if (web) web.proc.kill();
  fs.rmSync(dir, { recursive: true, force: true });
});

// One chat completion with the server running the MCP tools.
const chat = (extra) => client.chat.completions.create({
  model: 'stories260K', messages: [{ role: 'user', content: 'Use the tool.' }],
  max_tokens: 40, temperature: 0, tool_execution: 'server', ...extra,
});
const force = (name) => ({ tool_choice: { type: 'function', function: { name } } });

test('mcp: /v1/mcp/servers lists every server with its status', { skip }, async () => {
  const s = await servers();
  assert.deepEqual(s.map((x) => x.name), ['local', 'web', 'broken']);
  const local = s[0], webS = s[1];
  assert.equal(local.transport, 'stdio');
  assert.equal(webS.transport, 'http');
  assert.ok(webS.tools >= 3);
  assert.match(local.server_info, /omniserve-test-local/);
  await waitFor(async () => (await byName('broken')).restarts >= 1, 'a retry of the broken server', 30000);
  const broken = await byName('broken');
  assert.equal(broken.status === 'failed' || broken.status === 'starting', true);
  assert.match(broken.error, /cannot run .*no-such-program.*No such file/);
  assert.equal(broken.tools, 0);
});

test('mcp: /v1/mcp/tools lists the tools of every server, duplicates prefixed', { skip }, async () => {
  // the late tools come with notifications/tools/list_changed (stdio, and the HTTP GET stream)
  await waitFor(async () => (await (await fetch(`${srv.url}/v1/mcp/tools`)).json()).data.filter((t) => t.name === 'late').length === 2,
    'the list_changed refreshes', 30000);
  const { object, data } = await (await fetch(`${srv.url}/v1/mcp/tools`)).json();
  assert.equal(object, 'list');
  const names = data.map((t) => `${t.server}/${t.name}=${t.function_name}`).sort();
  assert.deepEqual(names, [
    'local/big=local__big', 'local/crash=crash', 'local/echo=local__echo', 'local/late=local__late', 'local/slow=local__slow',
    'web/big=web__big', 'web/echo=web__echo', 'web/late=web__late', 'web/slow=web__slow',
  ]);
  const echo = data.find((t) => t.function_name === 'web__echo');
  assert.equal(echo.description, 'Says the text back');
  assert.deepEqual(echo.inputSchema.properties, { text: { type: 'string' } });
});

test('mcp: a tool loop round trip over stdio returns the answer and the steps', { skip }, async () => {
  const r = await chat({ mcp_servers: ['local'], ...force('local__echo') });
  const ext = r.omniserve;
  assert.equal(ext.tool_execution, 'server');
  assert.ok(ext.turns >= 2, JSON.stringify(ext));
  const [call, result] = ext.messages;
  assert.equal(call.role, 'assistant');
  assert.equal(call.tool_calls[0].function.name, 'local__echo');
  assert.equal(result.role, 'tool');
  assert.equal(result.tool_call_id, call.tool_calls[0].id);
  assert.equal(result.server, 'local');
  assert.equal(result.is_error, false);
  assert.match(result.content, /^echo\(local\): /);
  // the final message is the last turn's answer, not a tool call
  const c = r.choices[0];
  assert.equal(c.message.role, 'assistant');
  assert.equal(typeof c.message.content, 'string');
  assert.ok(['stop', 'length'].includes(c.finish_reason));
  assert.ok(r.usage.prompt_tokens > 0 && r.usage.completion_tokens > 0);
});

test('mcp: a tool loop over Streamable HTTP (SSE answer, session, headers)', { skip }, async () => {
  const r = await chat({ mcp_servers: ['web'], ...force('web__echo') });
  const result = r.omniserve.messages[1];
  assert.equal(result.server, 'web');
  assert.equal(result.is_error, false);
  assert.match(result.content, /^echo\(web\): /);
});

test('mcp: Responses-style {type: "mcp", server_label} tools select the servers', { skip }, async () => {
  const r = await client.chat.completions.create({
    model: 'stories260K', messages: [{ role: 'user', content: 'Use the tool.' }], max_tokens: 40, temperature: 0,
    tools: [{ type: 'mcp', server_label: 'web', require_approval: 'never' }], ...force('web__echo'),
  });
  assert.equal(r.omniserve.tool_execution, 'server');
  assert.match(r.omniserve.messages[1].content, /^echo\(web\): /);
  for (const [tool, re] of [
    [{ type: 'mcp', server_label: 'nope' }, /no MCP server 'nope'/],
    [{ type: 'mcp', server_label: 'web', require_approval: 'always' }, /require_approval/],
    [{ type: 'mcp' }, /server_label/],
  ]) {
    await assert.rejects(client.chat.completions.create({
      model: 'stories260K', messages: [{ role: 'user', content: 'x' }], max_tokens: 4, tools: [tool],
    }), (e) => e.status === 400 && e.param === 'tools' && re.test(e.message), JSON.stringify(tool));
  }
});

test('mcp: streamed, the steps come as omniserve chunks with empty choices', { skip }, async () => {
  const stream = await chat({ mcp_servers: ['local'], ...force('local__echo'), stream: true, stream_options: { include_usage: true } });
  const steps = [];
  let finish = null, usage = null, text = '';
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    if (chunk.omniserve && chunk.omniserve.type) {
      assert.deepEqual(chunk.choices, []);
      steps.push(chunk.omniserve);
    }
    for (const ch of chunk.choices) {
      assert.equal(ch.delta.tool_calls, undefined, 'MCP calls never show as client tool calls');
      if (ch.delta.content) text += ch.delta.content;
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  assert.deepEqual(steps.map((s) => s.type), ['tool_call', 'tool_result']);
  assert.equal(steps[0].server, 'local');
  assert.equal(steps[0].tool_call.function.name, 'local__echo');
  assert.equal(steps[1].message.tool_call_id, steps[0].tool_call.id);
  assert.match(steps[1].message.content, /^echo\(local\): /);
  assert.ok(['stop', 'length'].includes(finish));
  assert.ok(usage && usage.total_tokens > 0);
  assert.equal(typeof text, 'string');
});

test('mcp: a tool that hangs gives the model an error result after the timeout', { skip }, async () => {
  for (const name of ['local__slow', 'web__slow']) {
    const r = await chat({ ...force(name) });
    const result = r.omniserve.messages[1];
    assert.equal(result.is_error, true, name);
    assert.match(result.content, /no answer within 3 s/, name);
  }
  // the servers are still fine
  assert.equal((await byName('local')).status, 'connected');
});

test('mcp: a crashing stdio server gives an error result and is restarted', { skip }, async () => {
  const before = (await byName('local')).restarts;
  const r = await chat({ ...force('crash') });
  const result = r.omniserve.messages[1];
  assert.equal(result.is_error, true);
  assert.match(result.content, /exited/);
  await waitFor(async () => {
    const s = await byName('local');
    return s.restarts > before && s.status === 'connected';
  }, 'the restart of the crashed server', 60000);
  assert.match(srv.log(), /mcp local \(stderr\): local: crashing on purpose/);
  // and it works again
  const again = await chat({ mcp_servers: ['local'], ...force('local__echo') });
  assert.equal(again.omniserve.messages[1].is_error, false);
});

test('mcp: tool output over --mcp-max-result is cut with a note', { skip }, async () => {
  const r = await chat({ mcp_servers: ['local'], ...force('local__big') });
  const result = r.omniserve.messages[1];
  assert.equal(result.is_error, false);
  assert.ok(result.content.length < 200, String(result.content.length));
  assert.ok(result.content.startsWith('x'.repeat(128)));
  assert.match(result.content, /truncated/);
});

test('mcp: a call of a client tool ends the loop and goes to the client', { skip }, async () => {
  const tools = [{ type: 'function', function: { name: 'client_fn', parameters: { type: 'object', properties: {} } } }];
  const r = await chat({ mcp_servers: ['local'], tools, ...force('client_fn') });
  assert.equal(r.omniserve.stopped, 'client_tool');
  assert.equal(r.omniserve.turns, 1);
  assert.deepEqual(r.omniserve.messages, []);
  assert.equal(r.choices[0].message.tool_calls[0].function.name, 'client_fn');
  // streamed, the client's call comes in the finish chunk as a tool_calls delta
  const stream = await chat({ mcp_servers: ['local'], tools, ...force('client_fn'), stream: true });
  const calls = [];
  for await (const chunk of stream) {
    assert.equal(chunk.omniserve && chunk.omniserve.type, undefined);
    for (const ch of chunk.choices) if (ch.delta.tool_calls) calls.push(...ch.delta.tool_calls);
  }
  assert.equal(calls.length, 1);
  assert.equal(calls[0].function.name, 'client_fn');
});

test('mcp: the last allowed turn runs without tools (--mcp-max-turns 1)', { skip }, async () => {
  const cfg = path.join(dir, 'one.json');
  fs.writeFileSync(cfg, JSON.stringify({ mcpServers: { local: { command: process.execPath, args: [mcpServer] } } }));
  const one = await startServer(['--tool-parser', 'hermes', '--mcp-config', cfg, '--mcp-max-turns', '1']);
  try {
    await waitFor(async () => (await (await fetch(`${one.url}/v1/mcp/servers`)).json()).data[0].status === 'connected',
      'the MCP server to connect', 60000);
    const c1 = new OpenAI({ baseURL: `${one.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const r = await c1.chat.completions.create({
      model: 'stories260K', messages: [{ role: 'user', content: 'Use the tool.' }], max_tokens: 20,
      temperature: 0, tool_execution: 'server', ...force('echo'),
    });
    assert.equal(r.omniserve.turns, 1);
    assert.equal(r.omniserve.stopped, 'answer');
    assert.deepEqual(r.omniserve.messages, []);
    assert.equal(r.choices[0].message.tool_calls, undefined);
    assert.equal(typeof r.choices[0].message.content, 'string');
  } finally {
    assert.equal((await one.stop()).code, 0);
  }
});

// A stream up to its first "omniserve" tool_call step; returns the reader
// (the caller cancels it or reads on).
async function streamToFirstCall(url, body, signal) {
  const r = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), signal,
  });
  assert.equal(r.status, 200);
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  let text = '';
  while (!/"type":"tool_call"/.test(text)) {
    const { done, value } = await reader.read();
    assert.ok(!done, `stream ended before the tool call: ${text}`);
    text += dec.decode(value);
  }
  return reader;
}

test('mcp: a client that leaves during a tool call does not disturb the server', { skip }, async () => {
  const ac = new AbortController();
  await streamToFirstCall(srv.url, {
    messages: [{ role: 'user', content: 'x' }], max_tokens: 40, temperature: 0, stream: true,
    tool_execution: 'server', ...force('local__slow'),
  }, ac.signal);
  ac.abort();
  // the call times out with nobody to answer; meanwhile others are served
  const r = await chat({ mcp_servers: ['local'], ...force('local__echo') });
  assert.equal(r.omniserve.messages[1].is_error, false);
  await waitFor(async () => /mcp local: slow failed/.test(srv.log()), 'the abandoned call to end', 30000);
  assert.equal((await fetch(`${srv.url}/health`)).status, 200);
});

test('mcp: SIGTERM during a hanging tool call: the server exits 0, children reaped', { skip }, async () => {
  const cfg = path.join(dir, 'term.json');
  fs.writeFileSync(cfg, JSON.stringify({ mcpServers: { local: { command: process.execPath, args: [mcpServer] } } }));
  const s2 = await startServer(['--tool-parser', 'hermes', '--mcp-config', cfg, '--mcp-tool-timeout', '600',
    '--shutdown-timeout', '1']);
  await waitFor(async () => (await (await fetch(`${s2.url}/v1/mcp/servers`)).json()).data[0].status === 'connected',
    'the MCP server to connect', 60000);
  const pid = Number(/mcp local: started '.*' \(pid (\d+)\)/.exec(s2.log())[1]);
  const reader = await streamToFirstCall(s2.url, {
    messages: [{ role: 'user', content: 'x' }], max_tokens: 40, temperature: 0, stream: true,
    tool_execution: 'server', ...force('slow'),
  });
  const { code } = await s2.stop();
  assert.equal(code, 0, s2.log());
  assert.throws(() => process.kill(pid, 0), /ESRCH/);
  await reader.cancel().catch(() => {});
});

test('mcp: bad tool_execution requests get 400 naming the field', { skip }, async () => {
  const cases = [
    [{ tool_execution: 'client-side' }, 'tool_execution'],
    [{ mcp_servers: ['nope'] }, 'mcp_servers'],
    [{ mcp_servers: 'local' }, 'mcp_servers'],
    [{ mcp_servers: [] }, 'mcp_servers'],   // no MCP tools and none of its own: nothing to run
    [{ n: 2 }, 'n'],
    [{ tools: [{ type: 'function', function: { name: 'local__echo' } }] }, 'tools'],
  ];
  for (const [extra, param] of cases) {
    await assert.rejects(chat(extra), (e) => e.status === 400 && e.param === param, JSON.stringify(extra));
  }
});

test('mcp: without --mcp-config the routes answer 404', { skip }, async () => {
  const plain = await startServer([]);
  try {
    const r = await fetch(`${plain.url}/v1/mcp/servers`);
    assert.equal(r.status, 404);
    assert.match((await r.json()).error.message, /--mcp-config/);
  } finally {
    assert.equal((await plain.stop()).code, 0);
  }
});

test('mcp: a bad config file stops the server, naming the file and the field', { skip: fs.existsSync(omni) ? false : 'not built' }, () => {
  const write = (name, text) => {
    const p = path.join(dir, name);
    fs.writeFileSync(p, text);
    return p;
  };
  const cases = [
    [path.join(dir, 'missing.json'), /missing\.json: cannot open/],
    [write('notjson.json', '{"mcpServers": {'), /notjson\.json: not valid JSON/],
    [write('noservers.json', '{"servers": {}}'), /noservers\.json: 'mcpServers' must be an object/],
    [write('nocmd.json', '{"mcpServers": {"a": {"args": []}}}'), /nocmd\.json: 'mcpServers\.a' needs 'command'/],
    [write('badcmd.json', '{"mcpServers": {"a": {"command": 5}}}'), /badcmd\.json: 'mcpServers\.a\.command' must be a non-empty string/],
    [write('badargs.json', '{"mcpServers": {"a": {"command": "x", "args": [1]}}}'), /badargs\.json: 'mcpServers\.a\.args\[0\]' must be a string/],
    [write('badurl.json', '{"mcpServers": {"a": {"url": "ftp://x"}}}'), /badurl\.json: 'mcpServers\.a\.url' must be an http/],
    [write('badenv.json', '{"mcpServers": {"a": {"command": "x", "env": {"K": 1}}}}'), /badenv\.json: 'mcpServers\.a\.env\.K' must be a string/],
    [write('sse.json', '{"mcpServers": {"a": {"type": "sse", "url": "http://x"}}}'), /sse\.json: 'mcpServers\.a\.type' must be "stdio" or "http"/],
  ];
  for (const [file, re] of cases) {
    const r = spawnSync(omni, ['serve', '--port', '1', '--mcp-config', file], { encoding: 'utf8', timeout: 10000 });
    assert.equal(r.status, 2, `${file}: ${r.stderr}`);
    assert.match(r.stderr, re);
  }
});
