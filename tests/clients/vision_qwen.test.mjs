// vision_qwen.test.mjs - a Qwen2.5-VL model end to end through the official
// `openai` npm package: the tiny random Qwen2_5_VLForConditionalGeneration of
// tests/fixtures/vision/qwen2_5_vl (tools/make_vision_golden.py), converted
// here by tools/hf_mmproj_to_gguf.py (mmproj + qwen2vl LM), served with
// --mmproj; a message with two pictures as image_url parts gives the
// reference's prompt length, greedy tokens and top-5 logprobs (M-RoPE ids
// over the image grids), also on a repeat served from the caches; the same two
// pictures and a {"type": "video", "video": [5 frames]} part give the video
// golden's answer (clip_reference.json, tools/qwen_video_golden.sh: the video
// as temporal patches with its time in the M-RoPE ids); a video_url part of
// ../shared/video/sample.mp4 becomes frame pairs (its fps chooses how many),
// and a request aborted by the client leaves the server serving.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { startServer, root, omni } from './server.mjs';
import { assertGoldenAnswer } from './vision_golden.mjs';

const fixture = path.join(root, 'tests', 'fixtures', 'vision', 'qwen2_5_vl');
const ref = JSON.parse(fs.readFileSync(path.join(fixture, 'reference.json'), 'utf8'));
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'omni-qwen-vl-'));
const mmproj = path.join(dir, 'mmproj.gguf'), lm = path.join(dir, 'lm.gguf');

let skip = fs.existsSync(omni) ? false : `${omni} is not built`;
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

test('qwen2.5-vl: two images -> the reference greedy tokens and top-5 logprobs', { skip }, async () => {
  await assertGoldenAnswer(client, messages, ref); // the second round: vision and prefix caches
});

const clipRef = path.join(fixture, 'clip_reference.json');
test('qwen2.5-vl: two images and a video of 5 frames -> the reference greedy tokens and top-5 logprobs',
  { skip: skip || (!fs.existsSync(clipRef) && 'no clip_reference.json (GPU job e_video)') }, async () => {
    const cref = JSON.parse(fs.readFileSync(clipRef, 'utf8'));
    const frames = [0, 1, 2, 3, 4].map((k) => dataUrl(path.join(fixture, 'video', `frame${k}.png`)));
    const withVideo = [{ role: 'user', content: [...messages[0].content,
      { type: 'video', video: frames }, { type: 'text', text: 'What happens?' }] }];
    await assertGoldenAnswer(client, withVideo, cref);
    // the same frames at another rate: the same rows, other temporal ids
    const r = await client.chat.completions.create({ model: 'lm', messages: [{ role: 'user', content: [
      ...messages[0].content, { type: 'video', video: frames, fps: 0.5 }, { type: 'text', text: 'What happens?' }] }],
    max_tokens: 1, temperature: 0 });
    assert.equal(r.usage.prompt_tokens, cref.n_tokens);
  });

test('qwen2.5-vl: a video_url part as frame pairs (fps chooses), an aborted request leaves it serving', { skip }, async () => {
  const mp4 = path.join(root, '..', 'shared', 'video', 'sample.mp4');
  if (!fs.existsSync(mp4)) return; // no ../shared samples
  const url = `data:video/mp4;base64,${fs.readFileSync(mp4).toString('base64')}`;
  const video = (fps) => [{ role: 'user', content: [
    { type: 'video_url', video_url: { url, fps } }, { type: 'text', text: 'What happens?' }] }];
  const ask = (fps, opts) => client.chat.completions.create(
    { model: 'lm', messages: video(fps), max_tokens: 2, temperature: 0 }, opts);
  const one = await ask(0.5); // 2 frames: one temporal patch
  const two = await ask(1); // 4 frames: two
  assert.ok(two.usage.prompt_tokens > one.usage.prompt_tokens + 8,
    `fps 1: ${two.usage.prompt_tokens} prompt tokens, fps 0.5: ${one.usage.prompt_tokens}`);
  const ac = new AbortController();
  const gone = ask(1, { signal: ac.signal });
  ac.abort();
  await assert.rejects(gone);
  const again = await ask(1);
  assert.equal(again.usage.prompt_tokens, two.usage.prompt_tokens);
  assert.equal(again.choices[0].message.content, two.choices[0].message.content);
  await assert.rejects(ask(0), (e) => e.status === 400 && /fps/.test(e.message));
});
