#!/usr/bin/env python3
"""cuda_c_headline.py - the first lines of tools/cuda_c_run.sh's summary:
ours (the defaults, mean of the runs in the job) against llama.cpp on each
file (tg128, pp512), bandwidth of the decode, bench-engine 64 vs 1 against
llama-batched-bench, and the test/sanitizer lines.
Usage: cuda_c_headline.py results.jsonl summary.txt"""
import json
import re
import sys

# nominal DRAM bandwidth of the card named on the summary's first line
# (GB/s): H100 SXM 3.35 TB/s, H200 4.8 TB/s
CARDS = (("H200", 4800.0), ("H100", 3350.0))


def main():
    rows = []
    for line in open(sys.argv[1]):
        try:
            rows.append(json.loads(line))
        except ValueError:
            pass
    summ = open(sys.argv[2]).read().split("\n")
    ours = {}
    for r in rows:
        m = re.match(r"(\S+) X=1( |$)", r.get("label", ""))
        if m and "tok_s" in r and r.get("test") in ("tg128", "pp512"):
            ours.setdefault((m.group(1), r["test"]), []).append(r)
    llama = {}
    for r in rows:
        if r.get("label") == "llama-bench" and "avg_ts" in r:
            t = "pp%d" % r["n_prompt"] if r.get("n_prompt") else "tg%d" % r["n_gen"]
            f = re.sub(r"\.gguf$", "", r.get("model_filename", "").split("/")[-1])
            llama[(f, t)] = r["avg_ts"]
    print("HEADLINE: %s" % summ[0])
    bw_gbs = next((b for name, b in CARDS if name in summ[0]), 3350.0)
    for (f, t), rs in sorted(ours.items()):
        ts = sorted(r["tok_s"] for r in rs)
        mean = sum(ts) / len(ts)
        s = "%-22s %-5s ours %9.1f tok/s (mean of %d, %.1f-%.1f)" % (f, t, mean, len(ts), ts[0], ts[-1])
        bws = [r["weights_gb_s"] for r in rs if r.get("weights_gb_s")]
        if bws and t == "tg128":
            bw = sum(bws) / len(bws)
            s += " %4.0f GB/s = %4.1f%% of %.2f TB/s" % (bw, 100 * bw / bw_gbs, bw_gbs / 1000)
        if (f, t) in llama:
            s += "  llama.cpp %9.1f  ours/llama %.2fx" % (llama[(f, t)], mean / llama[(f, t)])
        print(s)
    # variants against the defaults of the same A B A B runs (means of the reps)
    var = {}
    for r in rows:
        m = re.match(r"(\S+) (\S+) #\d+$", r.get("label", ""))
        if m and r.get("test") == "tg128":
            var.setdefault((m.group(1), m.group(2)), []).append(r["tok_s"])
    for (f, v), ts in sorted(var.items()):
        base = var.get((f, "X=1"))
        if v != "X=1" and base:
            mean, bmean = sum(ts) / len(ts), sum(base) / len(base)
            print("variant %-22s %-50s tg128 %8.1f vs defaults %8.1f: %.3fx" % (f, v, mean, bmean, mean / bmean))
    eng = {}  # env -> concurrency -> [tok/s of each run]
    for r in rows:
        lab = r.get("label", "")
        if lab.startswith("engine ") and "concurrency" in r:
            eng.setdefault(lab[7:], {}).setdefault(r["concurrency"], []).append(r["aggregate_tok_s"])
    for env in sorted(eng, key=lambda e: (e != "X=1", e)):
        e = {c: sum(v) / len(v) for c, v in eng[env].items()}
        s = "engine %-28s tok/s " % ("defaults" if env == "X=1" else env)
        s += " / ".join("%d: %.1f" % (c, e[c]) for c in sorted(e))
        if 1 in e and 64 in e:
            s += "  64/1 = %.2fx" % (e[64] / e[1])
        s += "  (%d run%s)" % (len(eng[env].get(64, [])), "" if len(eng[env].get(64, [])) == 1 else "s, means")
        print(s)
    lb = {r["pl"]: r["speed_tg"] for r in rows if r.get("label") == "llama-batched" and "pl" in r}
    if lb:
        s = "llama-batched-bench S_TG " + " / ".join("%d: %.1f" % (c, lb[c]) for c in sorted(lb))
        if 1 in lb and 64 in lb:
            s += "  64/1 = %.2fx" % (lb[64] / lb[1])
        print(s)
    for line in summ:
        if re.match(r"(test_cuda|sanitizer|build rc|llama\.cpp:)", line):
            print(line)
    print("----")


if __name__ == "__main__":
    main()
