// embeddings.test.mjs - /v1/embeddings through the official `openai` SDK
// (float, base64, dimensions, batches, token ids), LangChain's
// OpenAIEmbeddings and the Vercel AI SDK's embed/embedMany, the Ollama and llama.cpp shapes, /v1/rerank as raw HTTP,
// errors as 400 with `param`, concurrent requests, clients that leave
// mid-request, and a server with
// embedding models only. The decoder embedder is stories260K (the chat
// model with --embeddings, and --embedding-model alone); the rerank tests
// use the golden bert cross-encoder when it is built
// ($OMNI_GOLDEN_DIR/embed-bert_rank-f32.gguf, make golden-fixtures).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';
import { OpenAIEmbeddings } from '@langchain/openai';
import { embed, embedMany } from 'ai';
import { createOpenAI } from '@ai-sdk/openai';
import { startServer, testModel, modelSkip, root } from './server.mjs';

const skip = testModel() ? false : modelSkip;
const golden = path.resolve(root, process.env.OMNI_GOLDEN_DIR || 'build/fixtures');
const rankFile = path.join(golden, 'embed-bert_rank-f32.gguf');
const bertFile = path.join(golden, 'embed-bert-f32.gguf');
const rankSkip = skip || (fs.existsSync(rankFile) ? false : `${rankFile} is not built (make golden-fixtures)`);
let srv, client;

const norm = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));
const cosine = (a, b) => a.reduce((s, x, i) => s + x * b[i], 0) / (norm(a) * norm(b));

async function post(route, body) {
  const r = await fetch(`${srv.url}${route}`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
  });
  return { status: r.status, json: await r.json() };
}

before(async () => {
  if (skip) return;
  const extra = [];
  if (!rankSkip) extra.push('--rerank-model', rankFile);
  if (fs.existsSync(bertFile)) extra.push('--embedding-model', bertFile);
  srv = await startServer(['--embeddings', ...extra]);
  client = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'unused', maxRetries: 0 });
});
after(async () => {
  if (!srv) return;
  const { code } = await srv.stop();
  assert.equal(code, 0, srv.log());
});

test('openai: embeddings.create with floats, one input and a batch', { skip }, async () => {
  const one = await client.embeddings.create({ model: 'stories260K', input: 'Once upon a time', encoding_format: 'float' });
  assert.equal(one.object, 'list');
  assert.equal(one.model, 'stories260K');
  assert.equal(one.data.length, 1);
  assert.equal(one.data[0].object, 'embedding');
  assert.equal(one.data[0].index, 0);
  const v = one.data[0].embedding;
  assert.ok(Array.isArray(v) && v.length > 8);
  assert.ok(Math.abs(norm(v) - 1) < 1e-4, 'normalized');
  assert.ok(one.usage.prompt_tokens > 0);
  assert.equal(one.usage.total_tokens, one.usage.prompt_tokens);

  const texts = ['Once upon a time', 'a cat sat on the mat', 'Lily went to the park'];
  const many = await client.embeddings.create({ model: 'stories260K', input: texts, encoding_format: 'float' });
  assert.deepEqual(many.data.map((d) => d.index), [0, 1, 2]);
  // batched with each other: the same vectors as alone
  assert.ok(cosine(many.data[0].embedding, v) > 0.9999);
  for (let i = 1; i < 3; i++) {
    const alone = await client.embeddings.create({ model: 'stories260K', input: texts[i], encoding_format: 'float' });
    assert.ok(cosine(many.data[i].embedding, alone.data[0].embedding) > 0.9999);
  }
  assert.ok(cosine(many.data[1].embedding, many.data[2].embedding) < 0.9999, 'different texts differ');
});

test('openai: base64 is little-endian float32 of the same vector; the SDK default decodes it', { skip }, async () => {
  const input = 'The little dog ran home.';
  const f = await client.embeddings.create({ model: 'stories260K', input, encoding_format: 'float' });
  const b = await client.embeddings.create({ model: 'stories260K', input, encoding_format: 'base64' });
  assert.equal(typeof b.data[0].embedding, 'string');
  const buf = Buffer.from(b.data[0].embedding, 'base64');
  const dec = Array.from(new Float32Array(buf.buffer, buf.byteOffset, buf.length / 4));
  assert.equal(dec.length, f.data[0].embedding.length);
  dec.forEach((x, i) => assert.ok(Math.abs(x - f.data[0].embedding[i]) < 1e-6));
  // no encoding_format: the SDK asks for base64 and hands back floats
  const d = await client.embeddings.create({ model: 'stories260K', input });
  assert.ok(Array.isArray(d.data[0].embedding));
  assert.ok(cosine(d.data[0].embedding, f.data[0].embedding) > 0.99999);
});

test('openai: dimensions truncates and re-normalizes', { skip }, async () => {
  const input = 'Tom found a red ball.';
  const full = (await client.embeddings.create({ model: 'stories260K', input, encoding_format: 'float' })).data[0].embedding;
  const r = await client.embeddings.create({ model: 'stories260K', input, dimensions: 16, encoding_format: 'float' });
  const v = r.data[0].embedding;
  assert.equal(v.length, 16);
  assert.ok(Math.abs(norm(v) - 1) < 1e-5);
  const head = full.slice(0, 16), n = norm(head);
  v.forEach((x, i) => assert.ok(Math.abs(x - head[i] / n) < 1e-5));
});

test('openai: token id inputs (int[] and int[][])', { skip }, async () => {
  const a = await client.embeddings.create({ model: 'stories260K', input: [5, 6, 7, 8], encoding_format: 'float' });
  assert.equal(a.data.length, 1);
  assert.equal(a.usage.prompt_tokens, 4);
  const b = await client.embeddings.create({ model: 'stories260K', input: [[5, 6, 7, 8], [9, 10]], encoding_format: 'float' });
  assert.equal(b.data.length, 2);
  assert.equal(b.usage.prompt_tokens, 6);
  assert.ok(cosine(a.data[0].embedding, b.data[0].embedding) > 0.9999);
});

test('langchain: OpenAIEmbeddings embedQuery and embedDocuments', { skip }, async () => {
  const emb = new OpenAIEmbeddings({
    model: 'stories260K', apiKey: 'unused', configuration: { baseURL: `${srv.url}/v1` }, maxRetries: 0,
  });
  const q = await emb.embedQuery('Once upon a time');
  assert.ok(q.length > 8);
  const docs = await emb.embedDocuments(['Once upon a time', 'a cat sat on the mat']);
  assert.equal(docs.length, 2);
  assert.ok(cosine(docs[0], q) > 0.9999);
});

test('vercel ai sdk: embed and embedMany', { skip }, async () => {
  const provider = createOpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'unused' });
  const model = provider.embedding('stories260K');
  const one = await embed({ model, value: 'Once upon a time', maxRetries: 0 });
  assert.ok(one.embedding.length > 8);
  const many = await embedMany({ model, values: ['Once upon a time', 'a cat sat on the mat'], maxRetries: 0 });
  assert.equal(many.embeddings.length, 2);
  assert.ok(cosine(many.embeddings[0], one.embedding) > 0.9999);
});

test('errors: 400 with param for empty, too long and wrongly typed input', { skip }, async () => {
  const cases = [
    [{ model: 'stories260K', input: '' }, 'input'],
    [{ model: 'stories260K', input: [] }, 'input'],
    [{ model: 'stories260K', input: ['ok', 'word '.repeat(5000)] }, 'input[1]'],
    [{ model: 'stories260K', input: ['ok', 42] }, 'input[1]'],
    [{ model: 'stories260K', input: { text: 'x' } }, 'input'],
    [{ model: 'stories260K', input: [[1, 2], [-3]] }, 'input[1]'],
    [{ model: 'stories260K', input: 'x', dimensions: 100000 }, 'dimensions'],
    [{ model: 'stories260K', input: 'x', encoding_format: 'hex' }, 'encoding_format'],
    [{ model: 'stories260K' }, 'input'],
  ];
  for (const [body, param] of cases) {
    const r = await post('/v1/embeddings', body);
    assert.equal(r.status, 400, JSON.stringify(body).slice(0, 80));
    assert.equal(r.json.error.param, param);
    assert.equal(r.json.error.type, 'invalid_request_error');
  }
  const long = await post('/v1/embeddings', { model: 'stories260K', input: ['ok', 'word '.repeat(5000)] });
  assert.equal(long.json.error.code, 'context_length_exceeded');
  // the SDK raises them as BadRequestError
  await assert.rejects(client.embeddings.create({ model: 'stories260K', input: '' }), (e) => e.status === 400);
});

test('concurrent requests are all answered, with the vectors of sequential ones', { skip }, async () => {
  const texts = Array.from({ length: 8 }, (_, i) => `story number ${i} about a happy bird`);
  const seq = [];
  for (const t of texts)
    seq.push((await client.embeddings.create({ model: 'stories260K', input: t, encoding_format: 'float' })).data[0].embedding);
  const par = await Promise.all(texts.map((t) => client.embeddings.create({ model: 'stories260K', input: [t, t], encoding_format: 'float' })));
  par.forEach((r, i) => {
    assert.equal(r.data.length, 2);
    assert.ok(cosine(r.data[0].embedding, seq[i]) > 0.9999);
    assert.ok(cosine(r.data[1].embedding, seq[i]) > 0.9999);
  });
});

test('a client that leaves mid-request cancels its inputs; the server carries on', { skip }, async () => {
  const input = Array.from({ length: 512 }, (_, i) => `input ${i} ` + 'and the bird sang '.repeat(20));
  for (const ms of [5, 50]) {
    const ac = new AbortController();
    const p = fetch(`${srv.url}/v1/embeddings`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'stories260K', input }), signal: ac.signal,
    });
    setTimeout(() => ac.abort(), ms);
    await assert.rejects(p);
  }
  const r = await client.embeddings.create({ model: 'stories260K', input: 'still here', encoding_format: 'float' });
  assert.ok(r.data[0].embedding.length > 8);
});

test('ollama /api/embed and llama.cpp /embedding shapes', { skip }, async () => {
  const o = await post('/api/embed', { model: 'stories260K', input: ['a cat', 'a dog'] });
  assert.equal(o.status, 200);
  assert.equal(o.json.embeddings.length, 2);
  assert.ok(o.json.prompt_eval_count > 0);
  const l = await post('/embedding', { content: 'a cat' });
  assert.equal(l.status, 200);
  assert.equal(l.json[0].index, 0);
  assert.ok(cosine(l.json[0].embedding[0], o.json.embeddings[0]) > 0.9999);
});

test('models: the embedding and rerank models are listed', { skip }, async () => {
  const list = await client.models.list();
  const ids = list.data.map((m) => m.id);
  assert.ok(ids.includes('stories260K'));
  if (!rankSkip) {
    assert.ok(ids.includes('embed-bert_rank-f32'));
    const m = await client.models.retrieve('embed-bert_rank-f32');
    assert.equal(m.type, 'rerank');
  }
});

test('rerank: raw HTTP, sorted by relevance, top_n, return_documents', { skip: rankSkip }, async () => {
  const documents = ['The quick brown fox jumps over the lazy dog.', { text: 'A search query finds the document.' },
    'Paris is the capital of France.'];
  const r = await post('/v1/rerank', { model: 'embed-bert_rank-f32', query: 'what is a fox?', documents, return_documents: true });
  assert.equal(r.status, 200, JSON.stringify(r.json));
  assert.equal(r.json.results.length, 3);
  const scores = r.json.results.map((x) => x.relevance_score);
  assert.deepEqual([...scores].sort((a, b) => b - a), scores);
  scores.forEach((s) => assert.ok(s > 0 && s < 1));
  assert.deepEqual(r.json.results.map((x) => x.index).sort(), [0, 1, 2]);
  for (const x of r.json.results)
    assert.equal(x.document.text, typeof documents[x.index] === 'string' ? documents[x.index] : documents[x.index].text);
  assert.ok(r.json.usage.total_tokens > 0);
  const top = await post('/rerank', { query: 'what is a fox?', documents, top_n: 1 });
  assert.equal(top.status, 200);
  assert.equal(top.json.results.length, 1);
  assert.equal(top.json.results[0].index, r.json.results[0].index);
  assert.equal(top.json.results[0].document, undefined);
  const bad = await post('/v1/rerank', { query: 'q', documents: ['a', 7] });
  assert.equal(bad.status, 400);
  assert.equal(bad.json.error.param, 'documents[1]');
  const none = await post('/v1/rerank', { query: '', documents: ['a'] });
  assert.equal(none.json.error.param, 'query');
});

test('a server with embedding models only', { skip }, async () => {
  const s = await startServer(['--embedding-model', testModel()], { model: null });
  try {
    const c = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const r = await c.embeddings.create({ model: 'stories260K', input: 'hello', encoding_format: 'float' });
    assert.ok(r.data[0].embedding.length > 8);
    const list = await c.models.list();
    assert.deepEqual(list.data.map((m) => m.id), ['stories260K']);
    const chat = await fetch(`${s.url}/v1/chat/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }] }),
    });
    assert.ok(chat.status >= 400);
    await chat.arrayBuffer();
    // no reranker here
    const rr = await fetch(`${s.url}/v1/rerank`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ query: 'q', documents: ['a'] }),
    });
    assert.equal(rr.status, 404);
    await rr.arrayBuffer();
  } finally {
    const { code } = await s.stop();
    assert.equal(code, 0, s.log());
  }
});
