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

# A ChatML template that prints the tools and takes and writes hermes-style
# <tool_call> calls, as tool-capable Qwen templates do (the Qwen2 vocabulary
# file's own template has no tools): agents' prompts then carry their tool
# schemas, and the server picks the hermes tool parser from it.
TEMPLATE = (
    "{%- if tools %}<|im_start|>system\n"
    "{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}\n\n{% endif %}"
    "# Tools\n\nFunction signatures in <tools></tools>:\n<tools>\n"
    "{% for t in tools %}{{ t | tojson }}\n{% endfor %}</tools>\n\n"
    "A call is written <tool_call>{\"name\": NAME, \"arguments\": ARGS}</tool_call>.<|im_end|>\n"
    "{%- elif messages[0]['role'] == 'system' %}<|im_start|>system\n{{ messages[0]['content'] }}<|im_end|>\n"
    "{%- endif %}"
    "{%- for m in messages %}"
    "{%- if m['role'] == 'system' and loop.first %}"
    "{%- elif m['role'] == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m['content'] }}\n</tool_response><|im_end|>\n"
    "{%- else %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
    "{%- if m['tool_calls'] %}{% for c in m['tool_calls'] %}\n<tool_call>\n"
    "{\"name\": \"{{ c['function']['name'] }}\", \"arguments\": {{ c['function']['arguments'] | tojson }}}\n"
    "</tool_call>{% endfor %}{% endif %}<|im_end|>\n"
    "{%- endif %}{% endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")

qwen_vocab = rm._qwen_vocab


def agent_vocab(added):
    kv = qwen_vocab(added)
    rm._set(kv, "tokenizer.chat_template", TEMPLATE, rm.GGUF_STRING)
    return kv


rm._qwen_vocab = agent_vocab
rm.SHAPES["agent-test"] = dict(
    hf="(test shape)", name="omniserve agent-test", arch="qwen2",
    n_embd=64, n_layer=1, n_head=4, n_head_kv=2, n_ff=128, n_vocab=151936,
    n_ctx=32768, rope_theta=1000000.0, eps=1e-6, tied=True, qkv_bias=True, vocab="qwen2.5")
rm.build(types.SimpleNamespace(shape="agent-test", type="q8_0", output=sys.argv[1], seed=1,
                               vocab=None, layers=None))
