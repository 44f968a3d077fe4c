"""agent_model.py OUT.gguf - the model the agent-client tests (codex.test.mjs)
serve: random weights in a tiny Qwen2 shape (1 layer, 64 wide) with the real
Qwen2.5 vocabulary and chat template and a 32768-token context, so that an
agent's prompt of many thousand tokens (Codex sends its whole instructions
and ~20 tool schemas) is accepted and answered in seconds. Its text is
random; the tests check the protocol. Built with tools/random_model's own
writer, vocabulary and generators (a shape registered here, nothing copied)."""
import importlib.machinery
import importlib.util
import os
import sys
import types

here = os.path.dirname(os.path.abspath(__file__))
tools = os.path.join(here, "..", "..", "tools")
sys.path.insert(0, tools)
loader = importlib.machinery.SourceFileLoader("random_model", os.path.join(tools, "random_model"))
spec = importlib.util.spec_from_loader("random_model", loader)
rm = importlib.util.module_from_spec(spec)
loader.exec_module(rm)

rm.SHAPES["agent-test"] = dict(
    hf="(test shape)", name="omniserve agent-test", arch="qwen2",
    n_embd=64, n_layer=1, n_head=4, n_head_kv=2, n_ff=128, n_vocab=151936,
    n_ctx=32768, rope_theta=1000000.0, eps=1e-6, tied=True, qkv_bias=True, vocab="qwen2.5")
rm.build(types.SimpleNamespace(shape="agent-test", type="q8_0", output=sys.argv[1], seed=1,
                               vocab=None, layers=None))
