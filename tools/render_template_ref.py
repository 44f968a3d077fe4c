#!/usr/bin/env python3
"""render_template_ref.py - reference renderings of chat templates with Python's
jinja2, set up the way transformers' apply_chat_template sets it up: an
ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and loop controls,
tojson without ASCII escaping, raise_exception and strftime_now globals, and the
{% generation %} block rendered as its body. Needs Debian's python3-jinja2.

  render_template_ref.py T.jinja --messages M.json [--tools T.json] [--kwargs JSON] [--no-gen-prompt]
      prints the prompt (exactly, nothing added); a raised error goes to stderr, exit 1
  render_template_ref.py --fixtures tests/fixtures/templates
      renders every *.jinja with every cases/*.json (variables from vars.json) into
      expected/<template>.<case>.txt, or .err ("raise: MSG" or "error: TYPE: MSG"),
      with strftime_now's clock fixed at FIXTURE_EPOCH

strftime_now reads the local clock, as transformers does, unless SOURCE_DATE_EPOCH
is set (seconds since 1970): then that instant in UTC, as the C renderer does.
"""
import argparse
import datetime
import glob
import json
import os
import sys

try:
    import jinja2
    import jinja2.ext
    import jinja2.sandbox
    from jinja2 import nodes
except ImportError:
    sys.exit("render_template_ref.py: needs jinja2 (Debian python3-jinja2; use /usr/bin/python3)")


class RaisedByTemplate(jinja2.exceptions.TemplateError):
    """What raise_exception() raises, told apart from renderer errors."""


class GenerationBlock(jinja2.ext.Extension):
    """{% generation %}...{% endgeneration %}: transformers marks assistant text
    with it; for rendering it is just its body."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body, lineno=lineno)


def make_env():
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True,
        extensions=[GenerationBlock, jinja2.ext.loopcontrols])

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        # transformers replaces jinja2's tojson: no HTML escaping, json.dumps options.
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                          separators=separators, sort_keys=sort_keys)

    def raise_exception(message):
        raise RaisedByTemplate(message)

    def strftime_now(fmt):
        epoch = os.environ.get("SOURCE_DATE_EPOCH")
        if epoch is not None:
            when = datetime.datetime.fromtimestamp(int(epoch), datetime.timezone.utc)
        else:
            when = datetime.datetime.now()
        return when.strftime(fmt)

    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(source, messages, tools=None, kwargs=None, add_generation_prompt=True):
    template = make_env().from_string(source)
    # apply_chat_template passes tools and documents as None when absent.
    return template.render(messages=messages, tools=tools, documents=None,
                           add_generation_prompt=add_generation_prompt, **(kwargs or {}))


# The fixtures' clock (2025-08-05 12:00 UTC), so templates that print
# strftime_now's date render the same every day; test_template.c sets the same.
FIXTURE_EPOCH = "1754395200"


def fixtures(root):
    os.environ["SOURCE_DATE_EPOCH"] = FIXTURE_EPOCH
    with open(os.path.join(root, "vars.json"), encoding="utf-8") as f:
        variables = json.load(f)
    out_dir = os.path.join(root, "expected")
    os.makedirs(out_dir, exist_ok=True)
    for old in glob.glob(os.path.join(out_dir, "*")):
        os.remove(old)
    count = 0
    for tpath in sorted(glob.glob(os.path.join(root, "*.jinja"))):
        name = os.path.basename(tpath)[:-len(".jinja")]
        with open(tpath, encoding="utf-8") as f:
            source = f.read()
        for cpath in sorted(glob.glob(os.path.join(root, "cases", "*.json"))):
            case = os.path.basename(cpath)[:-len(".json")]
            with open(cpath, encoding="utf-8") as f:
                c = json.load(f)
            kwargs = dict(variables.get(name, {}))
            kwargs.update(c.get("kwargs", {}))
            base = os.path.join(out_dir, "%s.%s" % (name, case))
            try:
                text = render(source, c["messages"], c.get("tools"), kwargs,
                              c.get("add_generation_prompt", True))
                with open(base + ".txt", "w", encoding="utf-8", newline="") as f:
                    f.write(text)
            except RaisedByTemplate as e:
                with open(base + ".err", "w", encoding="utf-8", newline="") as f:
                    f.write("raise: %s" % e.message)
            except Exception as e:  # what jinja2 or Python raise while rendering
                with open(base + ".err", "w", encoding="utf-8", newline="") as f:
                    f.write("error: %s: %s" % (type(e).__name__, e))
            count += 1
    print("render_template_ref.py: %d renderings in %s" % (count, out_dir))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("template", nargs="?")
    ap.add_argument("--messages")
    ap.add_argument("--tools")
    ap.add_argument("--kwargs")
    ap.add_argument("--no-gen-prompt", action="store_true")
    ap.add_argument("--fixtures", metavar="DIR")
    a = ap.parse_args()
    if a.fixtures:
        fixtures(a.fixtures)
        return 0
    if not a.template or not a.messages:
        ap.error("give TEMPLATE and --messages (or --fixtures DIR)")
    with open(a.template, encoding="utf-8") as f:
        source = f.read()
    with open(a.messages, encoding="utf-8") as f:
        messages = json.load(f)
    tools = None
    if a.tools:
        with open(a.tools, encoding="utf-8") as f:
            tools = json.load(f)
    kwargs = json.loads(a.kwargs) if a.kwargs else {}
    try:
        text = render(source, messages, tools, kwargs, not a.no_gen_prompt)
    except jinja2.exceptions.TemplateError as e:
        print("template: %s" % e, file=sys.stderr)
        return 1
    sys.stdout.buffer.write(text.encode("utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
