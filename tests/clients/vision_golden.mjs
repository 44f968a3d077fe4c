// vision_golden.mjs - the check the vision client tests share: a chat
// request with images answered with the reference's prompt length, greedy
// length and top-5 logprobs (reference.json of tests/fixtures/vision/<model>,
// written by tools/make_vision_golden.py), twice: the second round comes from
// the vision cache and the prefix cache.
import assert from 'node:assert/strict';

export async function assertGoldenAnswer(client, messages, ref) {
  for (let round = 0; round < 2; round++) {
    const r = await client.chat.completions.create({
      model: 'lm', messages, max_tokens: ref.greedy.length, temperature: 0, logprobs: true, top_logprobs: 5,
    });
    assert.equal(r.usage.prompt_tokens, ref.n_tokens, 'image rows + text tokens = the processor\'s ids');
    assert.equal(r.usage.completion_tokens, ref.greedy.length);
    const lp = r.choices[0].logprobs.content;
    assert.equal(lp.length, ref.greedy.length);
    for (let i = 0; i < lp.length; i++) {
      assert.ok(Math.abs(lp[i].logprob - ref.top5_logprobs[i][0]) < 2e-3,
        `round ${round} token ${i}: logprob ${lp[i].logprob}, reference ${ref.top5_logprobs[i][0]}`);
      const tops = lp[i].top_logprobs.map((t) => t.logprob);
      for (let j = 0; j < 5; j++)
        assert.ok(Math.abs(tops[j] - ref.top5_logprobs[i][j]) < 2e-3,
          `round ${round} token ${i} top ${j}: ${tops[j]}, reference ${ref.top5_logprobs[i][j]}`);
    }
  }
}
