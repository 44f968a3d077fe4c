/* fuzz_api_realtime.c - the Realtime WebSocket: the handshake on GET
 * /v1/realtime, then client events in one connection, through the real
 * src/api/realtime.c and realtime_conv.c. With ?intent=transcription:
 * transcription_session.update / session.update, input_audio_buffer.append /
 * commit / clear; without an intent: a conversation (items, response.create,
 * function calls, truncation), the model's replies coming from the input.
 * The speech session is a stand-in that counts audio and answers commits;
 * the engine answers each response after the message that caused it
 * (fz_api.h).
 *
 * Input: byte 0 flags (bit 7: a conversation, no intent), byte 1 model,
 * then the model's reply up to the first NUL, then the messages separated
 * by NUL bytes; a message starting with byte 0x01 is sent as binary. */
#include "tests/fuzz/fz_api.h"
#include "tests/fuzz/fz_util.h"

#define FZ_MAX_MSG 64

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    fz_api_init();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    const uint8_t *part[FZ_MAX_MSG];
    size_t len[FZ_MAX_MSG];
    int n = fz_split(data + 2, size - 2, part, len, FZ_MAX_MSG);
    struct fz_http h = { .method = "GET", .path = "/v1/realtime",
                         .query = data[0] & 128 ? NULL : "intent=transcription" };
    fz_api_flags(&h, data[0], data[1]);
    fz_api_ws(&h, part + 1, len + 1, n - 1, part[0], len[0]);
    return 0;
}
