/* template.c - `omniserve template`: renders a chat template (a model's
 * tokenizer.chat_template, or a .jinja file) for messages given as JSON and
 * writes exactly the prompt to stdout, nothing added. With -m, bos_token and
 * eos_token come from the model's tokenizer (no weights are loaded) and an
 * unusable template falls back to the built-in family format, as serving does. */
#include "src/cli/cli.h"
#include "llm/template/template.h"
#include "llm/tokenizer.h"
#include "src/core/gguf.h"
#include "src/core/omni.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void template_usage(FILE *f)
{
    fprintf(f,
            "usage: omniserve template (-m MODEL.gguf | --file T.jinja) --messages MSGS.json\n"
            "                          [--tools TOOLS.json] [--kwargs JSON] [--no-gen-prompt]\n"
            "  -m, --model FILE   render the GGUF's tokenizer.chat_template; bos_token and\n"
            "                     eos_token from its tokenizer\n"
            "  --file FILE        render a Jinja template file (no fallback)\n"
            "  --messages FILE    JSON array of messages (- for stdin)\n"
            "  --tools FILE       JSON array of tools (OpenAI function format)\n"
            "  --kwargs JSON      JSON object of extra variables: {\"enable_thinking\": false,\n"
            "                     \"date_string\": \"26 Jul 2024\", \"bos_token\": \"<s>\"}\n"
            "  --no-gen-prompt    add_generation_prompt = false (default true)\n"
            "The prompt goes to stdout byte for byte; an error the template raises goes to\n"
            "stderr and the exit status is 1.\n");
}

/* Whole file (or stdin for "-"), NUL-terminated; NULL with a message. */
static char *template_slurp(const char *path, size_t *len)
{
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) {
        fprintf(stderr, "template: cannot open %s: ", path);
        perror(NULL);
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n - 1, f);
        if (n < cap - 1)
            break;
        char *nb = realloc(buf, cap * 2);
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    bool bad = !buf || ferror(f);
    if (f != stdin)
        fclose(f);
    if (bad) {
        free(buf);
        fprintf(stderr, "template: cannot read %s\n", path);
        return NULL;
    }
    buf[n] = 0;
    if (len)
        *len = n;
    return buf;
}

int cli_template(int argc, char **argv)
{
    const char *model = NULL, *file = NULL, *messages = NULL, *tools = NULL, *kwargs = NULL;
    bool gen_prompt = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            template_usage(stdout);
            return 0;
        } else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && has_val)
            model = argv[++i];
        else if (!strcmp(a, "--file") && has_val)
            file = argv[++i];
        else if (!strcmp(a, "--messages") && has_val)
            messages = argv[++i];
        else if (!strcmp(a, "--tools") && has_val)
            tools = argv[++i];
        else if (!strcmp(a, "--kwargs") && has_val)
            kwargs = argv[++i];
        else if (!strcmp(a, "--no-gen-prompt"))
            gen_prompt = false;
        else {
            fprintf(stderr, "template: unknown option or missing value: '%s'\n", a);
            template_usage(stderr);
            return 2;
        }
    }
    if ((model != NULL) == (file != NULL) || !messages) {
        fprintf(stderr, "template: give one of -m MODEL.gguf or --file T.jinja, and --messages FILE\n");
        template_usage(stderr);
        return 2;
    }

    int status = 1;
    char err[1024] = "";
    char *msgs = NULL, *tls = NULL, *src = NULL, *out = NULL;
    struct gguf *g = NULL;
    struct tokenizer *tok = NULL;
    struct tpl *t = NULL;
    size_t out_len = 0, src_len = 0;
    if (!(msgs = template_slurp(messages, NULL)) || (tools && !(tls = template_slurp(tools, NULL))))
        goto done;
    int rc;
    if (model) {
        if (!(g = gguf_open(model, err, sizeof err)) || !(tok = tokenizer_from_gguf(g, err, sizeof err))) {
            fprintf(stderr, "template: %s\n", err);
            goto done;
        }
        rc = tpl_render_gguf(g, tok, msgs, tls, kwargs, gen_prompt, &out, &out_len, NULL, err, sizeof err);
    } else {
        if (!(src = template_slurp(file, &src_len)))
            goto done;
        if (!(t = tpl_parse(src, src_len, err, sizeof err))) {
            fprintf(stderr, "template: %s: %s\n", file, err);
            goto done;
        }
        rc = tpl_render_chat(t, msgs, tls, kwargs, gen_prompt, &out, &out_len, err, sizeof err);
    }
    if (rc) {
        fprintf(stderr, "template: %s\n", err);
        goto done;
    }
    if (fwrite(out, 1, out_len, stdout) != out_len || fflush(stdout)) {
        fprintf(stderr, "template: cannot write the prompt\n");
        goto done;
    }
    status = 0;
done:
    free(out);
    tpl_free(t);
    tokenizer_free(tok);
    gguf_free(g);
    free(src);
    free(tls);
    free(msgs);
    return status;
}
