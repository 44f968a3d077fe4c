#!/usr/bin/env python3
"""template_sweep.py - renders every template of a directory (e.g. llama.cpp's
models/templates) with every message case of tests/fixtures/templates/cases,
through jinja2 (render_template_ref.py's environment) and through `omniserve
template --file`, and counts byte-identical renderings, cases where both
raise, and differences (listed). strftime_now's clock is fixed with
SOURCE_DATE_EPOCH for both. Needs Debian's python3-jinja2 (/usr/bin/python3).

  template_sweep.py --omniserve build/omniserve --templates /tmp/llama.cpp/models/templates
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import render_template_ref as ref  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--omniserve", required=True)
    ap.add_argument("--templates", required=True, help="directory of *.jinja")
    ap.add_argument("--cases", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                    "..", "tests", "fixtures", "templates", "cases"))
    a = ap.parse_args()
    os.environ["SOURCE_DATE_EPOCH"] = ref.FIXTURE_EPOCH
    same = both = 0
    diffs = []
    tmp = tempfile.mkdtemp(prefix="template_sweep.")
    for t in sorted(glob.glob(os.path.join(a.templates, "*.jinja"))):
        with open(t, encoding="utf-8") as f:
            src = f.read()
        for c in sorted(glob.glob(os.path.join(a.cases, "*.json"))):
            with open(c, encoding="utf-8") as f:
                case = json.load(f)
            kw = {"bos_token": "<s>", "eos_token": "</s>"}
            kw.update(case.get("kwargs", {}))
            gen = case.get("add_generation_prompt", True)
            try:
                want = ref.render(src, case["messages"], case.get("tools"), kw, gen)
            except Exception:  # what jinja2 raises: compared as "both raise"
                want = None
            mpath = os.path.join(tmp, "messages.json")
            with open(mpath, "w", encoding="utf-8") as f:
                json.dump(case["messages"], f)
            cmd = [a.omniserve, "template", "--file", t, "--messages", mpath, "--kwargs", json.dumps(kw)]
            if case.get("tools") is not None:
                tpath = os.path.join(tmp, "tools.json")
                with open(tpath, "w", encoding="utf-8") as f:
                    json.dump(case["tools"], f)
                cmd += ["--tools", tpath]
            if not gen:
                cmd.append("--no-gen-prompt")
            p = subprocess.run(cmd, capture_output=True)
            got = p.stdout.decode("utf-8", "replace") if p.returncode == 0 else None
            if want is None and got is None:
                both += 1
            elif want is not None and got == want:
                same += 1
            else:
                diffs.append("%s %s: %s" % (os.path.basename(t), os.path.basename(c),
                                            "jinja2 raised, we rendered" if want is None else
                                            "we failed: " + p.stderr.decode()[:120].strip() if got is None
                                            else "renderings differ"))
    print("template_sweep: %d renderings: %d identical, %d both raise, %d differ"
          % (same + both + len(diffs), same, both, len(diffs)))
    for d in diffs:
        print("  " + d)
    return 0


if __name__ == "__main__":
    sys.exit(main())
