// agent_model.mjs - the model for agent clients whose prompts pass the tiny
// stories260K's 512-token context (Codex sends ~8.3k tokens of instructions
// and tool schemas): agent_model.py writes a random-weight Qwen2-shaped GGUF
// with the real Qwen2.5 vocabulary, a ChatML template that prints tools and
// a 32768-token context (16 MB, well under a second). Random weights almost never pick the
// end of a turn, so servers for it get agentServerArgs: a logit bias that
// makes <|im_end|> likely (answers of a few tokens) and bans <tool_call>
// (no random tool calls, which an agent would run).
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const IM_END = 151645, TOOL_CALL = 151657;
export const agentServerArgs = ['--logit-bias', `${IM_END}+2,${TOOL_CALL}-inf`];

let cached;
export let agentModelSkip = '';
// Path of the model (built once per process), or null with agentModelSkip set.
export function agentModel() {
  if (cached !== undefined) return cached;
  cached = null;
  if (!fs.existsSync(path.join(here, '..', '..', '..', 'shared', 'vocab', 'ggml-vocab-qwen2.gguf'))) {
    agentModelSkip = 'no ../shared/vocab/ggml-vocab-qwen2.gguf';
    return null;
  }
  const out = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'omni-agent-')), 'agent.gguf');
  const r = spawnSync(process.env.PYTHON || 'python3', [path.join(here, 'agent_model.py'), out], { encoding: 'utf8' });
  if (r.status !== 0) {
    agentModelSkip = `cannot build the agent model: ${(r.stderr || r.error || '').toString().trim().slice(-400)}`;
    return null;
  }
  return (cached = out);
}
