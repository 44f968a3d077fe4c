#!/bin/sh
# test_stories260k.sh - converts ../shared/models/stories260K with tools/llama2c_to_gguf
# and checks `omniserve run` against all five llama2.c reference outputs byte for byte
# (reference.json; case 1 also on 3 threads), plus the prompt token ids through
# `omniserve tokenize`.
S=../shared/models/stories260K
if [ ! -f "$S/stories260K.bin" ] || [ ! -f "$S/reference.json" ]; then
    echo "skip: $S not present"
    exit 77
fi
M="$TMP/stories260K.gguf"
$PYTHON tools/llama2c_to_gguf "$S/stories260K.bin" "$S/tok512.bin" "$M" || exit 1

$PYTHON - "$S/reference.json" "$M" "$OMNI" <<'EOF'
import json, subprocess, sys

ref_path, model, omni = sys.argv[1:4]
cases = json.load(open(ref_path))["cases"]
bad = 0
# the thread count must not change the result: case 1 runs a second time on 3 threads
for c in cases + [dict(cases[0], name="case1 (3 threads)", threads=3)]:
    args = [omni, "run", "-m", model, "--temp", "0", "--threads", str(c.get("threads", 1))]
    if c["prompt"] is not None:
        args += ["-p", c["prompt"]]
    if c["steps"] != 256:  # case 5 also checks the default -n
        args += ["-n", str(c["steps"])]
    r = subprocess.run(args, capture_output=True)
    want = c["stdout"].encode()
    if r.returncode != 0 or r.stdout != want:
        bad += 1
        print(f"{c['name']}: exit {r.returncode}\n  args: {args[2:]}\n"
              f"  want: {want!r}\n  got:  {r.stdout!r}\n  stderr: {r.stderr.decode()[-400:]}")
        continue
    if c["prompt"] is not None:
        t = subprocess.run([omni, "tokenize", "-m", model, "--ids", c["prompt"]],
                           capture_output=True, text=True)
        ids = json.loads(t.stdout) if t.returncode == 0 else None
        if ids != c["prompt_token_ids"]:
            bad += 1
            print(f"{c['name']}: prompt ids {ids}, want {c['prompt_token_ids']}")
            continue
    print(f"{c['name']}: ok")
sys.exit(1 if bad else 0)
EOF
