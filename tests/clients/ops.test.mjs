// ops.test.mjs - the operational side: API keys (Bearer and x-api-key, /health
// open), --strict-model-id, --max-body (413), Content-Type checks (415), a
// full queue (429 with Retry-After), keep-alive comments while queued, a
// server without a model, the probes (/health readiness, /livez liveness,
// HEAD), /metrics (ours and the vLLM names routers read), and graceful
// shutdown on SIGTERM with a stream in flight (/health 503, new work 503).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer, testModel, modelSkip, metric, rawSSE, waitFor, probe, postJSON } from './server.mjs';

const skip = testModel() ? false : modelSkip;
const say = [{ role: 'user', content: 'Once upon a time' }];
const openai = (srv, apiKey = 'unused') => new OpenAI({ baseURL: `${srv.url}/v1`, apiKey, maxRetries: 0 });

test('api key, strict model id, body limit', { skip }, async () => {
  const srv = await startServer(['--api-key', 'k1', '--strict-model-id', '--served-model-name', 'tiny', '--max-body', '2K']);
  try {
    assert.equal((await fetch(`${srv.url}/health`)).status, 200);
    await assert.rejects(openai(srv, 'nope').models.list(), (e) => e.status === 401 && e.code === 'invalid_api_key');
    assert.equal((await fetch(`${srv.url}/v1/models`)).status, 401);
    assert.equal((await fetch(`${srv.url}/metrics`)).status, 401);
    const ok = await openai(srv, 'k1').models.list();
    assert.equal(ok.data[0].id, 'tiny');
    assert.equal((await fetch(`${srv.url}/v1/models`, { headers: { 'x-api-key': 'k1' } })).status, 200);
    const c = openai(srv, 'k1');
    const r = await c.chat.completions.create({ model: 'tiny', messages: say, max_tokens: 3 });
    assert.equal(r.model, 'tiny');
    await assert.rejects(c.chat.completions.create({ model: 'gpt-4o', messages: say, max_tokens: 3 }),
      (e) => e.status === 404 && e.code === 'model_not_found' && /gpt-4o/.test(e.message));
    await assert.rejects(c.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'x'.repeat(4000) }] }),
      (e) => e.status === 413);
    assert.equal((await fetch(`${srv.url}/health`)).status, 200);
  } finally {
    await srv.stop();
  }
});

test('JSON routes need a JSON Content-Type, audio routes multipart: else 415', { skip }, async () => {
  const srv = await startServer();
  try {
    const body = JSON.stringify({ messages: say, max_tokens: 2 });
    const post = (route, type, b = body) => fetch(`${srv.url}${route}`, { method: 'POST', headers: type ? { 'content-type': type } : {}, body: b });
    // what a web page can send without a CORS preflight
    for (const type of ['text/plain', 'text/plain;charset=UTF-8', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', null]) {
      const r = await post('/v1/chat/completions', type, type === null ? new Uint8Array(Buffer.from(body)) : body);
      assert.equal(r.status, 415, String(type));
      const e = (await r.json()).error;
      assert.equal(e.type, 'invalid_request_error');
      assert.equal(e.code, 'unsupported_media_type');
      assert.match(e.message, /application\/json/);
    }
    const a = await post('/v1/messages', 'text/plain', JSON.stringify({ max_tokens: 2, messages: say }));
    assert.equal(a.status, 415);
    const aj = await a.json();
    assert.equal(aj.type, 'error');
    assert.equal(aj.error.type, 'invalid_request_error');
    for (const route of ['/v1/completions', '/tokenize', '/detokenize', '/v1/messages/count_tokens'])
      assert.equal((await post(route, 'text/plain', '{}')).status, 415, route);
    assert.equal((await post('/v1/audio/transcriptions', 'application/json', '{}')).status, 415);
    // parameters and +json types are fine
    for (const type of ['application/json; charset=utf-8', 'Application/JSON', 'application/vnd.omni+json']) {
      const r = await post('/v1/chat/completions', type);
      assert.equal(r.status, 200, type);
      await r.arrayBuffer();
    }
    // the cancel route reads no body
    assert.equal((await fetch(`${srv.url}/v1/requests/none/cancel`, { method: 'POST' })).status, 404);
  } finally {
    await srv.stop();
  }
});

test('probes: /health readiness, /livez liveness, HEAD of both', { skip }, async () => {
  const srv = await startServer(['--api-key', 'k1']);
  try {
    const h = await fetch(`${srv.url}/health`);
    assert.equal(h.status, 200);
    assert.equal((await h.json()).status, 'ok');
    const l = await fetch(`${srv.url}/livez`);
    assert.equal(l.status, 200);
    assert.equal((await l.json()).status, 'alive');
    for (const route of ['/health', '/livez']) {
      const r = await fetch(`${srv.url}${route}`, { method: 'HEAD' });
      assert.equal(r.status, 200, route);
      assert.equal((await r.arrayBuffer()).byteLength, 0);
    }
    // HEAD of another GET route, with the key; the probes then still answer on this connection
    assert.equal((await fetch(`${srv.url}/v1/models`, { method: 'HEAD', headers: { 'x-api-key': 'k1' } })).status, 200);
    assert.equal((await fetch(`${srv.url}/metrics`, { method: 'HEAD' })).status, 401);
    const wrong = await fetch(`${srv.url}/livez`, { method: 'POST' });
    assert.equal(wrong.status, 405);
    assert.equal(wrong.headers.get('allow'), 'GET, HEAD');
    assert.equal((await fetch(`${srv.url}/health`)).status, 200);
  } finally {
    await srv.stop();
  }
});

test('queue full -> 429 with Retry-After', { skip }, async () => {
  const srv = await startServer(['--max-queue', '0']);
  try {
    await assert.rejects(openai(srv).chat.completions.create({ model: 'x', messages: say, max_tokens: 3 }), (e) => {
      assert.equal(e.status, 429);
      assert.equal(e.headers.get('retry-after'), '1');
      return true;
    });
    await waitFor(async () => (await metric(srv.url,
      'omniserve_http_requests_total{route="/v1/chat/completions",method="POST",status="429"}')) === 1, 'the 429 in /metrics');
  } finally {
    await srv.stop();
  }
});

test('keep-alive comments while a stream waits in the queue', { skip }, async () => {
  const srv = await startServer(['--max-seqs', '1', '--sse-keepalive', '0.005']);
  try {
    const body = { messages: say, max_tokens: 460, stream: true };
    const [first, second] = await Promise.all([rawSSE(`${srv.url}/v1/chat/completions`, body),
      rawSSE(`${srv.url}/v1/chat/completions`, body)]);
    assert.equal(first.frames.at(-1).data, '[DONE]');
    assert.equal(second.frames.at(-1).data, '[DONE]');
    assert.ok([first, second].some((r) => r.frames.some((f) => f.comment === 'keep-alive')), 'no keep-alive comment');
  } finally {
    await srv.stop();
  }
});

test('without a model: health, metrics and models work, generation is 404 model_not_found (not retried)', { skip: modelSkip.includes('not built') ? modelSkip : false }, async () => {
  const srv = await startServer([], { model: null });
  try {
    const h = await (await fetch(`${srv.url}/health`)).json();
    assert.equal(h.status, 'no_model');
    assert.match(h.message, /-m FILE.gguf/);
    assert.deepEqual((await openai(srv).models.list()).data, []);
    // A 503 would be retried by the SDKs (seconds of backoff) for a
    // condition that lasts until a restart: 404 model_not_found is final.
    const t0 = Date.now();
    await assert.rejects(openai(srv).chat.completions.create({ model: 'x', messages: say }), (e) => e.status === 404 && e.code === 'model_not_found' && /no model/.test(e.message));
    assert.ok(Date.now() - t0 < 5000, 'the SDK did not retry');
    const a = await fetch(`${srv.url}/v1/messages`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
    assert.equal(a.status, 404);
    assert.equal(a.headers.get('retry-after'), null);
    assert.equal((await a.json()).error.type, 'not_found_error');
    assert.match(await (await fetch(`${srv.url}/metrics`)).text(), /omniserve_build_info/);
  } finally {
    const { code } = await srv.stop();
    assert.equal(code, 0);
  }
});

test('metrics: counters, histograms and engine gauges', { skip }, async () => {
  const srv = await startServer();
  try {
    await openai(srv).chat.completions.create({ model: 'x', messages: say, max_tokens: 5 });
    // The request is counted when its transaction closes, just after the
    // client has the last byte.
    let text = '';
    await waitFor(async () => (text = await (await fetch(`${srv.url}/metrics`)).text())
      .includes('route="/v1/chat/completions",method="POST",status="200"} 1'), 'the request in /metrics');
    for (const name of ['omniserve_http_requests_total{route="/v1/chat/completions",method="POST",status="200"} 1',
      'omniserve_http_request_duration_seconds_bucket{le="+Inf"}', 'omniserve_time_to_first_token_seconds_count 1',
      'omniserve_inter_token_latency_seconds_count 4', 'omniserve_generation_tokens_total 5',
      'omniserve_requests_running ', 'omniserve_kv_blocks_total', 'omniserve_build_info{version='])
      assert.ok(text.includes(name), `missing ${name}`);
    // The names an inference gateway scrapes (vLLM's), labelled with the served model.
    const m = 'model_name="stories260K"';
    for (const [name, type] of [['vllm:num_requests_running', 'gauge'], ['vllm:num_requests_waiting', 'gauge'],
      ['vllm:num_requests_swapped', 'gauge'], ['vllm:kv_cache_usage_perc', 'gauge'], ['vllm:gpu_cache_usage_perc', 'gauge'],
      ['vllm:prompt_tokens_total', 'counter'], ['vllm:generation_tokens_total', 'counter'],
      ['vllm:time_to_first_token_seconds', 'histogram']])
      assert.ok(text.includes(`# TYPE ${name} ${type}\n`), `missing ${name} ${type}`);
    assert.ok(text.includes(`vllm:num_requests_waiting{${m}} 0\n`));
    // The engine publishes its counters after the step that ended the request.
    await waitFor(async () => (text = await (await fetch(`${srv.url}/metrics`)).text())
      .includes(`vllm:generation_tokens_total{${m}} 5\n`), 'the engine counters');
    assert.ok(text.includes(`vllm:time_to_first_token_seconds_count{${m}} 1\n`));
    const kv = Number(text.match(/^vllm:kv_cache_usage_perc\{[^}]*\} (\S+)$/m)[1]);
    assert.ok(kv >= 0 && kv <= 1, String(kv));
  } finally {
    await srv.stop();
  }
});

test('SIGTERM: in-flight stream completes, exit code 0', { skip }, async () => {
  const srv = await startServer(['--shutdown-timeout', '20']);
  const stream = await openai(srv).chat.completions.create({ model: 'x', messages: say, max_tokens: 450, stream: true });
  let n = 0, finish;
  for await (const c of stream) {
    if (n++ === 1) srv.proc.kill('SIGTERM');
    finish = c.choices[0]?.finish_reason ?? finish;
  }
  assert.equal(finish, 'length');
  const { code } = await srv.exited;
  assert.equal(code, 0, srv.log());
  assert.match(srv.log(), /shutting down/);
});

test('SIGTERM: draining - /health 503, /livez 200, new generations 503, the stream finishes', { skip }, async () => {
  const srv = await startServer(['--shutdown-timeout', '20', '--max-seqs', '1']);
  const stream = await openai(srv).chat.completions.create({ model: 'x', messages: say, max_tokens: 450, stream: true });
  let n = 0, finish, checked = false;
  for await (const c of stream) {
    if (n++ === 1) {
      // The probes and requests come on new connections, as a load balancer's
      // would: the drain closes idle keep-alive ones.
      srv.proc.kill('SIGTERM');
      await waitFor(async () => (await probe(srv.url, '/health')).status === 503, 'the drain');
      assert.equal(JSON.parse((await probe(srv.url, '/health')).text).status, 'draining');
      assert.equal((await probe(srv.url, '/health', 'HEAD')).status, 503);
      assert.equal((await probe(srv.url, '/livez')).status, 200);
      const o = await postJSON(srv.url, '/v1/chat/completions', JSON.stringify({ messages: say, max_tokens: 3 })).done;
      assert.equal(o.status, 503);
      assert.equal(JSON.parse(o.text).error.type, 'service_unavailable_error');
      assert.match(JSON.parse(o.text).error.message, /shutting down/);
      const a = await postJSON(srv.url, '/v1/messages', JSON.stringify({ max_tokens: 3, messages: say })).done;
      assert.equal(a.status, 503);
      assert.equal(JSON.parse(a.text).error.type, 'overloaded_error');
      checked = true;
    }
    finish = c.choices[0]?.finish_reason ?? finish;
  }
  assert.ok(checked);
  assert.equal(finish, 'length');
  const { code } = await srv.exited;
  assert.equal(code, 0, srv.log());
});

test('a second SIGTERM during the drain exits at once', { skip }, async () => {
  const srv = await startServer(['--shutdown-timeout', '60', '--max-seqs', '1']);
  const body = { messages: say, max_tokens: 460, stream: true };
  const runs = [1, 2, 3].map(() => rawSSE(`${srv.url}/v1/chat/completions`, body).catch((e) => e));
  await waitFor(async () => (await metric(srv.url, 'omniserve_requests_running')) === 1, 'a running stream');
  srv.proc.kill('SIGTERM');
  await waitFor(async () => (await probe(srv.url, '/health')).status === 503, 'the drain');
  srv.proc.kill('SIGTERM');
  const { code } = await srv.exited;
  assert.equal(code, 1, srv.log());
  assert.match(srv.log(), /second signal/);
  await Promise.all(runs);
});

test('SIGTERM with --shutdown-timeout 0: the stream still ends properly, exit code 0', { skip }, async () => {
  const srv = await startServer(['--shutdown-timeout', '0', '--max-seqs', '1']);
  const body = { messages: say, max_tokens: 460, stream: true };
  const runs = [rawSSE(`${srv.url}/v1/chat/completions`, body), rawSSE(`${srv.url}/v1/chat/completions`, body)];
  await new Promise((r) => setTimeout(r, 20));
  srv.proc.kill('SIGTERM');
  for (const run of await Promise.all(runs)) {
    if (run.status === 503) continue; // arrived after the shutdown began: refused, also correct
    assert.equal(run.status, 200);
    const data = run.frames.filter((f) => f.data).map((f) => f.data);
    assert.equal(data.at(-1), '[DONE]');
    const finish = JSON.parse(data.at(-2)).choices[0].finish_reason;
    assert.ok(['cancelled', 'length'].includes(finish), finish);
  }
  const { code } = await srv.exited;
  assert.equal(code, 0, srv.log());
});
