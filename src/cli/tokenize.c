/* tokenize.c - `omniserve tokenize -m FILE.gguf TEXT`: the token ids a model's
 * vocabulary gives for a text, one line per token (id, tab, piece quoted
 * with C-style escapes) or, with --ids, one JSON array. Works on full models
 * and on vocabulary-only GGUF files; the text may come from the command line,
 * a file (-f) or stdin (-). */
#include "src/cli/cli.h"
#include "llm/tokenizer.h"
#include "llm/unicode.h"
#include "src/core/gguf.h"
#include "src/core/omni.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void tokenize_usage(FILE *f)
{
    fprintf(f,
            "usage: omniserve tokenize -m FILE.gguf [options] TEXT\n"
            "       omniserve tokenize -m FILE.gguf [options] -f FILE\n"
            "       omniserve tokenize -m FILE.gguf [options] -      (text from stdin)\n"
            "  -m, --model FILE   GGUF file with a tokenizer (a model or a vocabulary)\n"
            "  -f, --file FILE    tokenize the contents of FILE (bytes as they are)\n"
            "  --ids              print only the ids as one JSON array: [1, 15043, 3186]\n"
            "  --no-bos           do not add the BOS/EOS tokens the vocabulary asks for\n"
            "  --parse-special    text of special tokens (<|im_start|>, <s>) becomes those tokens\n"
            "  --                 what follows is TEXT even if it starts with -\n"
            "Without --ids each token is one line: id, a tab, and the piece in double quotes\n"
            "(\\\" \\\\ \\n \\r \\t, other control bytes and partial UTF-8 as \\xNN).\n");
}

/* Read all of f; NULL on a read error or out of memory. */
static char *tokenize_slurp(FILE *f, size_t *len)
{
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap)
            break;
        char *nb = cap > SIZE_MAX / 2 ? NULL : realloc(buf, cap * 2);
        if (!nb) {
            free(buf);
            return NULL;
        }
        buf = nb;
        cap *= 2;
    }
    if (buf && ferror(f)) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

/* The piece quoted so that every byte is visible and the line stays one line. */
static void tokenize_put_piece(const char *s, size_t n)
{
    putchar('"');
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        uint32_t cp;
        int k = unicode_utf8_decode(s + i, n - i, &cp);
        if (k > 1 && !(cp >= 0x80 && cp <= 0x9f) && cp != 0x2028 && cp != 0x2029) {
            fwrite(s + i, 1, (size_t)k, stdout);
            i += (size_t)k;
            continue;
        }
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c == '\n')
            fputs("\\n", stdout);
        else if (c == '\r')
            fputs("\\r", stdout);
        else if (c == '\t')
            fputs("\\t", stdout);
        else if (c < 0x20 || c >= 0x7f)
            printf("\\x%02x", c);
        else
            putchar(c);
        i++;
    }
    putchar('"');
}

int cli_tokenize(int argc, char **argv)
{
    const char *model = NULL, *file = NULL, *text_arg = NULL;
    bool ids_only = false, no_bos = false, parse_special = false, from_stdin = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            tokenize_usage(stdout);
            return 0;
        } else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && i + 1 < argc) {
            model = argv[++i];
        } else if ((!strcmp(a, "-f") || !strcmp(a, "--file")) && i + 1 < argc) {
            file = argv[++i];
        } else if (!strcmp(a, "--ids")) {
            ids_only = true;
        } else if (!strcmp(a, "--no-bos")) {
            no_bos = true;
        } else if (!strcmp(a, "--parse-special")) {
            parse_special = true;
        } else if (!strcmp(a, "-")) {
            from_stdin = true;
        } else if (a[0] == '-' && a[1] && strcmp(a, "--") != 0) {
            fprintf(stderr, "tokenize: unknown option '%s'%s\n", a,
                    !strcmp(a, "-m") || !strcmp(a, "-f") || !strcmp(a, "--model") || !strcmp(a, "--file")
                        ? " (needs a value)" : "");
            tokenize_usage(stderr);
            return 2;
        } else {
            if (!strcmp(a, "--") && i + 1 < argc)
                a = argv[++i];
            if (text_arg) {
                fprintf(stderr, "tokenize: more than one TEXT argument (quote the text)\n");
                return 2;
            }
            text_arg = a;
        }
    }
    if (!model) {
        fprintf(stderr, "tokenize: no model given (-m FILE.gguf)\n");
        tokenize_usage(stderr);
        return 2;
    }
    if ((text_arg != NULL) + (file != NULL) + from_stdin != 1) {
        fprintf(stderr, "tokenize: give exactly one of TEXT, -f FILE or - (stdin)\n");
        return 2;
    }

    char *text = NULL;
    size_t len = 0;
    if (text_arg) {
        len = strlen(text_arg);
        text = malloc(len + 1);
        if (text)
            memcpy(text, text_arg, len + 1);
    } else {
        FILE *f = from_stdin ? stdin : fopen(file, "rb");
        if (!f) {
            fprintf(stderr, "tokenize: cannot open %s: ", file);
            perror(NULL);
            return 1;
        }
        text = tokenize_slurp(f, &len);
        if (f != stdin)
            fclose(f);
    }
    if (!text) {
        fprintf(stderr, "tokenize: cannot read %s\n", text_arg ? "the text" : from_stdin ? "stdin" : file);
        return 1;
    }

    char err[512];
    int status = 1;
    int32_t *ids = NULL;
    struct tokenizer *tok = NULL;
    struct gguf *g = gguf_open(model, err, sizeof err);
    if (!g) {
        fprintf(stderr, "tokenize: %s\n", err);
        goto done;
    }
    tok = tokenizer_from_gguf(g, err, sizeof err);
    gguf_free(g);
    if (!tok) {
        fprintf(stderr, "tokenize: %s: %s\n", model, err);
        goto done;
    }
    int flags = (no_bos ? 0 : TOK_ADD_SPECIAL) | (parse_special ? TOK_PARSE_SPECIAL : 0);
    /* One token per byte plus BOS/EOS is the most any vocabulary produces;
     * the retry covers tokenizers that could exceed it. */
    int cap = len < (size_t)INT32_MAX / 2 ? (int)len + 4 : INT32_MAX / 2, needed = 0;
    ids = malloc((size_t)cap * sizeof *ids);
    int n = ids ? tokenizer_encode(tok, text, len, flags, ids, cap, &needed) : OMNI_ERR_NOMEM;
    if (n == OMNI_ERR_LIMIT && needed > cap) {
        int32_t *more = realloc(ids, (size_t)needed * sizeof *ids);
        if (more) {
            ids = more;
            n = tokenizer_encode(tok, text, len, flags, ids, needed, NULL);
        }
    }
    if (n < 0) {
        if (n == OMNI_ERR_FORMAT)
            fprintf(stderr, "tokenize: the text is not valid UTF-8\n");
        else
            fprintf(stderr, "tokenize: %s\n", omni_strerror(n));
        goto done;
    }
    if (ids_only) {
        putchar('[');
        for (int i = 0; i < n; i++)
            printf(i ? ", %d" : "%d", ids[i]);
        puts("]");
    } else {
        char piece[512];
        for (int i = 0; i < n; i++) {
            size_t pl = tokenizer_piece(tok, ids[i], true, piece, sizeof piece);
            printf("%d\t", ids[i]);
            if (pl <= sizeof piece) {
                tokenize_put_piece(piece, pl);
            } else {
                char *big = malloc(pl);
                if (big)
                    tokenizer_piece(tok, ids[i], true, big, pl);
                tokenize_put_piece(big ? big : piece, big ? pl : sizeof piece);
                free(big);
            }
            putchar('\n');
        }
    }
    status = fflush(stdout) == 0 ? 0 : 1;
done:
    free(ids);
    tokenizer_free(tok);
    free(text);
    return status;
}
