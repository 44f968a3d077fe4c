// vision_gemma3.test.mjs - a Gemma 3 model end to end through the official
// `openai` npm package: the tiny random Gemma3ForConditionalGeneration of
// tests/fixtures/vision/gemma3 (tools/make_vision_golden.py --case gemma3),
// converted here by tools/hf_mmproj_to_gguf.py (mmproj + gemma3 LM), served
// with --mmproj; a message [image, text] rendered by the published Gemma 3
// template gives the reference's prompt length, greedy tokens and top-5
// logprobs (the image's tokens attending to each other both ways), also on
// a repeat served from the caches. Skipped until the fixture exists.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { startServer, root, omni } from './server.mjs';
import { assertGoldenAnswer } from './vision_golden.mjs';

const fixture = path.join(root, 'tests', 'fixtures', 'vision', 'gemma3');
const refPath = path.join(fixture, 'reference.json');
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'omni-gemma3-vl-'));
const mmproj = path.join(dir, 'mmproj.gguf'), lm = path.join(dir, 'lm.gguf');

let skip = fs.existsSync(omni) ? false : `${omni} is not built`;
if (!skip && !fs.existsSync(refPath)) skip = 'no tests/fixtures/vision/gemma3';
const ref = skip ? null : JSON.parse(fs.readFileSync(refPath, 'utf8'));
// the server joins a message's parts with a newline: the reference must be that rendering
if (!skip && !ref.rendered.includes('<start_of_image>\nWhat is this?'))
  skip = 'the reference prompt is not the server\'s rendering of [image, text] (parts joined by a newline)';
if (!skip) {
  const py = process.env.PYTHON || 'python3';
  const r = spawnSync(py, [path.join(root, 'tools', 'hf_mmproj_to_gguf.py'), fixture, mmproj, '--type', 'f32',
    '--lm', lm, '--lm-type', 'f32'], { encoding: 'utf8' });
  if (r.status !== 0) skip = `conversion failed: ${r.stderr || r.error}`;
}

let srv, client;
const dataUrl = (f) => `data:image/png;base64,${fs.readFileSync(f).toString('base64')}`;
const messages = [{
  role: 'user',
  content: [
    { type: 'image_url', image_url: { url: dataUrl(path.join(root, 'tests', 'fixtures', 'vision', 'image.png')) } },
    { type: 'text', text: 'What is this?' },
  ],
}];

before(async () => {
  if (skip) return;
  srv = await startServer(['--mmproj', mmproj], { model: lm });
  client = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'unused', maxRetries: 0 });
});
after(async () => {
  fs.rmSync(dir, { recursive: true, force: true });
  if (!srv) return;
  const { code } = await srv.stop();
  assert.equal(code, 0, srv.log());
});

test('gemma3: one image -> the reference greedy tokens and top-5 logprobs', { skip }, async () => {
  await assertGoldenAnswer(client, messages, ref); // the second round: vision and prefix caches
});
