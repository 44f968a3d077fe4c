/* fuzz_api_realtime.c - the Realtime transcription WebSocket: the handshake
 * on GET /v1/realtime, then client events (transcription_session.update,
 * session.update, input_audio_buffer.append / commit / clear, anything
 * else) in one connection, through the real src/api/realtime.c; the speech
 * session is a stand-in that counts audio and answers commits (fz_api.h).
 *
 * Input: byte 0 flags (bit 7: intent other than transcription), byte 1
 * unused, then the messages separated by NUL bytes; a message starting
 * with byte 0x01 is sent as a binary frame. */
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
                         .query = data[0] & 128 ? "intent=conversation" : "intent=transcription" };
    fz_api_flags(&h, data[0], data[1]);
    fz_api_ws(&h, part, len, n);
    return 0;
}
