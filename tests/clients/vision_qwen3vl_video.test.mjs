// vision_qwen3vl_video.test.mjs - Qwen3-VL's video through the official
// `openai` npm package: the tiny Qwen3-VL of tests/fixtures/vision/qwen3vl
// (converted here by tools/hf_mmproj_to_gguf.py) served with --mmproj; two
// pictures and a {"type": "video", "video": [5 frames]} part (each temporal
// patch of two frames after its "<t seconds>", as Qwen3VLProcessor lays a
// video out) give the video golden's prompt length, greedy tokens and top-5
// logprobs (q3clip_reference.json, tools/qwen_video_golden.sh ... qwen3vl),
// again from the caches.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { startServer, root, omni } from './server.mjs';
import { assertGoldenAnswer } from './vision_golden.mjs';

const vision = path.join(root, 'tests', 'fixtures', 'vision');
const fixture = path.join(vision, 'qwen3vl');
const refPath = path.join(fixture, 'q3clip_reference.json');
let skip = fs.existsSync(omni) ? false : `${omni} is not built`;
if (!skip && !fs.existsSync(refPath)) skip = 'no q3clip_reference.json (GPU job e_video3)';
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'omni-qwen3vl-video-'));
const mmproj = path.join(dir, 'mmproj.gguf'), lm = path.join(dir, 'lm.gguf');
if (!skip) {
  const py = process.env.PYTHON || 'python3';
  const r = spawnSync(py, [path.join(root, 'tools', 'hf_mmproj_to_gguf.py'), fixture, mmproj, '--type', 'f32',
    '--lm', lm, '--lm-type', 'f32'], { encoding: 'utf8' });
  if (r.status !== 0) skip = `conversion failed: ${r.stderr || r.error}`;
}

let srv, client;
const dataUrl = (f) => `data:image/png;base64,${fs.readFileSync(f).toString('base64')}`;

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

test('qwen3-vl: two images and a video of 5 frames -> the reference greedy tokens and top-5 logprobs', { skip },
  async () => {
    const ref = JSON.parse(fs.readFileSync(refPath, 'utf8'));
    const frames = [0, 1, 2, 3, 4].map((k) => dataUrl(path.join(vision, 'qwen2_5_vl', 'video', `frame${k}.png`)));
    const messages = [{ role: 'user', content: [
      { type: 'image_url', image_url: { url: dataUrl(path.join(vision, 'image.png')) } },
      { type: 'text', text: 'What is this?' },
      { type: 'image_url', image_url: { url: dataUrl(path.join(fixture, 'image2.png')) } },
      { type: 'text', text: 'And this?' },
      { type: 'video', video: frames },
      { type: 'text', text: 'What happens?' },
    ] }];
    await assertGoldenAnswer(client, messages, ref); // the second round: vision and prefix caches
  });
