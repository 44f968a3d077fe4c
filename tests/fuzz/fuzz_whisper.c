/* fuzz_whisper.c - the whisper.cpp ggml loader (whisper_model_load: magic,
 * hparams, mel filters, vocabulary, every tensor record), then what a
 * loaded model answers without running it: vocabulary pieces, special and
 * language tokens, the greedy prompt tokenizer.
 *
 * Input: a whole .bin file (handed to the loader as an in-memory file). */
#include "tests/fuzz/fz_util.h"

#include "audio/whisper.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256];
    struct whisper_model *m = whisper_model_load(fz_path_open(data, size), err, sizeof err);
    fz_path_close();
    if (!m)
        return 0;
    volatile unsigned sink = 0;
    const struct whisper_hparams *hp = whisper_model_hparams(m);
    const float *filters = whisper_model_mel_filters(m);
    sink += filters[(size_t)hp->n_mels * 201 - 1] != 0;
    for (int32_t id = -1; id <= hp->n_vocab; id++) {
        size_t len;
        const char *s = whisper_token_bytes(m, id, &len);
        sink += len ? (unsigned char)s[len - 1] : 0;
    }
    for (int k = WHISPER_TOKEN_EOT; k <= WHISPER_TOKEN_BEG; k++)
        sink += whisper_token_special(m, (enum whisper_special_token)k) >= 0;
    for (int lang = -1; lang <= whisper_lang_max_id(m) + 1; lang++)
        sink += whisper_token_lang(m, lang) >= 0;
    int32_t ids[64];
    sink += whisper_tokenize(m, " Hello world, the quick brown fox", ids, 64) > 0;
    sink += (unsigned)whisper_model_size_bytes(m) + whisper_is_multilingual(m);
    (void)sink;
    whisper_model_free(m);
    return 0;
}
