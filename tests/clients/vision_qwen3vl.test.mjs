// vision_qwen3vl.test.mjs - a Qwen3-VL model end to end through the official
// `openai` npm package: the tiny random Qwen3VLForConditionalGeneration of
// tests/fixtures/vision/qwen3vl (tools/make_vision_golden.py --case qwen3vl),
// converted here by tools/hf_mmproj_to_gguf.py (qwen3vl_merger mmproj +
// qwen3vl LM), served with --mmproj; a message with two pictures as
// image_url parts gives the reference's prompt length, greedy tokens and
// top-5 logprobs (the DeepStack rows added in the first LM layers,
// interleaved M-RoPE ids over the image grids), again from the caches.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { startServer, root, omni } from './server.mjs';
import { assertGoldenAnswer } from './vision_golden.mjs';

const fixture = path.join(root, 'tests', 'fixtures', 'vision', 'qwen3vl');
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'omni-qwen3vl-'));
const mmproj = path.join(dir, 'mmproj.gguf'), lm = path.join(dir, 'lm.gguf');

let skip = fs.existsSync(omni) ? false : `${omni} is not built`;
if (!skip && !fs.existsSync(path.join(fixture, 'reference.json'))) skip = 'no tests/fixtures/vision/qwen3vl';
const ref = skip ? null : JSON.parse(fs.readFileSync(path.join(fixture, 'reference.json'), 'utf8'));
if (!skip) {
  const py = process.env.PYTHON || 'python3';
  const r = spawnSync(py, [path.join(root, 'tools', 'hf_mmproj_to_gguf.py'), fixture, mmproj, '--type', 'f32',
    '--lm', lm, '--lm-type', 'f32'], { encoding: 'utf8' });
  if (r.status !== 0) skip = `conversion failed: ${r.stderr || r.error}`;
}

let srv, client;
const dataUrl = (f) => `data:image/png;base64,${fs.readFileSync(f).toString('base64')}`;
const messages = skip ? [] : [{
  role: 'user',
  content: [
    { type: 'image_url', image_url: { url: dataUrl(path.join(root, 'tests', 'fixtures', 'vision', 'image.png')) } },
    { type: 'text', text: 'What is this?' },
    { type: 'image_url', image_url: { url: dataUrl(path.join(fixture, 'image2.png')) } },
    { type: 'text', text: 'And this?' },
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

test('qwen3-vl: two images -> the reference greedy tokens and top-5 logprobs', { skip }, async () => {
  await assertGoldenAnswer(client, messages, ref); // the second round: vision and prefix caches
});
