// codex.test.mjs - @openai/codex (`codex exec`) against omniserve's
// /v1/responses with a custom model provider (wire_api = "responses") in a
// temporary CODEX_HOME, sandbox read-only: a turn runs to completion with
// exit status 0, a resumed session sends its history back and completes
// too, and Codex's default web_search tool is refused with a 400 naming it
// (the settings in docs/clients.md turn it off). Codex's prompt is ~8.3k
// tokens, so the server runs the long-context random model of
// agent_model.mjs; its text is random, the protocol is what is tested.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { startServer, omni } from './server.mjs';
import { agentModel, agentModelSkip, agentServerArgs } from './agent_model.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const codexBin = path.join(here, 'node_modules', '.bin', 'codex');
const skip = !fs.existsSync(omni) ? `${omni} is not built`
  : !fs.existsSync(codexBin) ? 'node_modules/.bin/codex is not installed'
    : agentModel() ? false : agentModelSkip;
let srv, home, work;

function config(port, extra = '') {
  return `model = "agent"
model_provider = "omni"
${extra}
[model_providers.omni]
name = "omniserve"
base_url = "http://127.0.0.1:${port}/v1"
wire_api = "responses"
env_key = "OMNI_API_KEY"
`;
}

// codex exec ARGS in the work directory; {code, stdout, stderr, events}.
function codex(args, codexHome = home) {
  return new Promise((resolve) => {
    const p = spawn(codexBin, ['exec', '--json', '--skip-git-repo-check', '--sandbox', 'read-only', ...args], {
      cwd: work, env: { ...process.env, CODEX_HOME: codexHome, OMNI_API_KEY: 'unused' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '', stderr = '';
    p.stdout.on('data', (d) => { stdout += d; });
    p.stderr.on('data', (d) => { stderr += d; });
    const timer = setTimeout(() => p.kill('SIGKILL'), 120000);
    p.on('exit', (code) => {
      clearTimeout(timer);
      const events = stdout.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l));
      resolve({ code, stdout, stderr, events });
    });
  });
}

before(async () => {
  if (skip) return;
  srv = await startServer(['--served-model-name', 'agent', ...agentServerArgs], { model: agentModel() });
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'omni-codex-'));
  home = path.join(dir, 'home');
  work = path.join(dir, 'work');
  fs.mkdirSync(home);
  fs.mkdirSync(work);
  // Codex sends a web_search tool unless it is turned off; it cannot run here
  fs.writeFileSync(path.join(home, 'config.toml'), config(srv.port, 'web_search = "disabled"'));
});
after(async () => {
  if (!srv) return;
  const { code } = await srv.stop();
  assert.equal(code, 0, srv.log());
});

test('codex exec: a turn runs to completion', { skip }, async () => {
  const r = await codex(['say hi']);
  assert.equal(r.code, 0, r.stderr + r.stdout + srv.log());
  const types = r.events.map((e) => e.type);
  assert.ok(types.includes('turn.started'), types.join(' '));
  assert.equal(types.at(-1), 'turn.completed', r.stdout);
  const msg = r.events.find((e) => e.type === 'item.completed' && e.item.type === 'agent_message');
  assert.ok(msg, r.stdout);
  assert.equal(typeof msg.item.text, 'string');
  const usage = r.events.at(-1).usage;
  assert.ok(usage.input_tokens > 4000, JSON.stringify(usage));   // the whole agent prompt was read
  assert.ok(usage.output_tokens >= 1);
  assert.match(srv.log(), /POST \/v1\/responses 200/);
  assert.doesNotMatch(srv.log(), /POST \/v1\/responses [45]\d\d/);
});

test('codex exec resume: the history goes back and the turn completes', { skip }, async () => {
  const first = await codex(['tell me a story']);
  assert.equal(first.code, 0, first.stderr);
  const r = await codex(['resume', '--last', 'and then?']);
  assert.equal(r.code, 0, r.stderr + r.stdout);
  assert.equal(r.events.at(-1).type, 'turn.completed', r.stdout);
  // the earlier turns' tokens come from the prefix cache
  assert.ok(r.events.at(-1).usage.cached_input_tokens > 0, JSON.stringify(r.events.at(-1).usage));
});

test('codex exec: its default web_search tool gets a 400 naming it', { skip }, async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'omni-codex-ws-'));
  fs.writeFileSync(path.join(dir, 'config.toml'), config(srv.port));
  const r = await codex(['say hi'], dir);
  assert.notEqual(r.code, 0);
  assert.match(r.stdout + r.stderr, /web_search/);
  assert.match(srv.log(), /POST \/v1\/responses 400/);
});
