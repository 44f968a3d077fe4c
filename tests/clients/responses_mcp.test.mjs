// responses_mcp.test.mjs - {"type": "mcp", "server_label"} tools on
// POST /v1/responses (serve --mcp-config): the server runs the MCP tools the
// model calls (the tool loop of src/api/mcploop.h) and the answer carries an
// mcp_call item per call (server_label, name, arguments, output or error)
// before the final message, plain and streamed, through the official
// `openai` SDK; a chained request renders the tool turns; a bad label is a
// 400. The MCP server is mcp_server.mjs over stdio; a named tool_choice
// makes the tiny model's first turn call the tool.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { startServer, testModel, modelSkip, waitFor } from './server.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const skip = testModel() ? false : modelSkip;
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'omni-resp-mcp-'));
let srv, client;
const mcp = [{ type: 'mcp', server_label: 'local', require_approval: 'never' }];
const ask = (extra) => ({
  model: 'stories260K', input: 'Use the tool.', tools: mcp, tool_choice: { type: 'function', name: 'echo' },
  max_output_tokens: 60, temperature: 0, ...extra,
});

before(async () => {
  if (skip) return;
  const cfg = path.join(dir, 'mcp.json');
  fs.writeFileSync(cfg, JSON.stringify({
    mcpServers: { local: { command: process.execPath, args: [path.join(here, 'mcp_server.mjs'), '--name', 'local'] } },
  }));
  srv = await startServer(['--tool-parser', 'hermes', '--mcp-config', cfg]);
  client = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  await waitFor(async () => {
    const s = (await (await fetch(`${srv.url}/v1/mcp/servers`)).json()).data;
    return s.find((x) => x.name === 'local').status === 'connected';
  }, 'the MCP server to connect', 60000);
});
after(async () => {
  if (srv) {
    const { code } = await srv.stop();
    assert.equal(code, 0, srv.log());
  }
  fs.rmSync(dir, { recursive: true, force: true });
});

test('responses mcp: the server runs the tool, an mcp_call item then the answer', { skip }, async () => {
  const r = await client.responses.create(ask());
  const types = r.output.map((o) => o.type);
  assert.deepEqual(types, ['mcp_call', 'message'], JSON.stringify(r.output));
  const call = r.output[0];
  assert.match(call.id, /^mcp_/);
  assert.equal(call.server_label, 'local');
  assert.equal(call.name, 'echo');
  assert.equal(typeof JSON.parse(call.arguments), 'object');
  assert.match(call.output, /^echo\(local\): /);
  assert.equal(call.error, null);
  assert.equal(typeof r.output_text, 'string');
  assert.ok(r.usage.output_tokens > 60);   // two turns
  // chained: the tool turn is part of the stored conversation
  const r2 = await client.responses.create({
    model: 'stories260K', previous_response_id: r.id, input: 'And then?', max_output_tokens: 4, temperature: 0,
  });
  assert.ok(r2.usage.input_tokens > r.usage.input_tokens, JSON.stringify([r.usage, r2.usage]));
});

test('responses mcp: streamed, the mcp_call item comes between the turns', { skip }, async () => {
  const stream = await client.responses.create(ask({ stream: true, store: false }));
  const events = [];
  for await (const ev of stream) events.push(ev);
  events.forEach((ev, i) => assert.equal(ev.sequence_number, i));
  const added = events.filter((e) => e.type === 'response.output_item.added').map((e) => e.item.type);
  assert.deepEqual(added, ['mcp_call', 'message']);
  const done = events.find((e) => e.type === 'response.output_item.done' && e.item.type === 'mcp_call');
  assert.match(done.item.output, /^echo\(local\): /);
  assert.equal(done.output_index, 0);
  assert.ok(!events.some((e) => e.type.startsWith('response.function_call_arguments')));
  assert.ok(['response.completed', 'response.incomplete'].includes(events.at(-1).type));
});

test('responses mcp: an unknown server_label is a 400', { skip }, async () => {
  await assert.rejects(client.responses.create({ model: 'x', input: 'x', tools: [{ type: 'mcp', server_label: 'nope' }] }),
    (e) => e.status === 400 && e.param === 'tools' && /nope/.test(e.message));
});
