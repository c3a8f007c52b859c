/* fuzz_framing — Jupyter messages from a client in both WebSocket framings (api/framing.c) and
 * their check (message_check with the client channels), then the answer's way back: the decoded
 * message encoded in both framings and decoded again, which must give the same message.
 *
 * Input: one byte choosing legacy text, legacy binary or v1.kernel.websocket.jupyter.org, then
 * the frame. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/framing.h"
#include "kernel/message.h"

static const char *const client_channels[] = {"shell", "control", "stdin", NULL};

static void require(bool condition, const char *what)
{
    if (!condition) {
        fprintf(stderr, "fuzz: %s\n", what);
        abort();
    }
}

/* A reason goes into the close frame (RFC 6455 wants UTF-8) and the log. */
static void require_utf8(const char *why)
{
    json_t *text = json_string(why);
    require(text != NULL, "a reason is not UTF-8");
    json_decref(text);
}

/* The parts both framings carry. */
static bool same_parts(json_t *a, json_t *b)
{
    static const char *const parts[] = {"channel", "header", "parent_header", "metadata",
                                        "content"};
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++)
        if (!json_equal(json_object_get(a, parts[i]), json_object_get(b, parts[i])))
            return false;
    return true;
}

/* What the daemon sends to clients comes back as the same message through either decoder. */
static void check_round_trip(json_t *message)
{
    char why[256];
    size_t length;
    char *text = framing_encode_legacy(message, &length);
    json_t *legacy = framing_decode_legacy((const unsigned char *)text, length, 0, why, sizeof why);
    free(text);
    require(legacy != NULL, "a legacy frame we encoded does not decode");
    require(same_parts(legacy, message), "a legacy frame's round trip changed the message");
    json_decref(legacy);

    buffer frame = {0};
    framing_encode_v1(message, &frame);
    json_t *v1 = framing_decode_v1((const unsigned char *)buffer_head(&frame), buffer_size(&frame),
                                   why, sizeof why);
    buffer_free(&frame);
    require(v1 != NULL, "a v1 frame we encoded does not decode");
    require(same_parts(v1, message), "a v1 frame's round trip changed the message");
    json_decref(v1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    char why[256];
    json_t *message = data[0] % 3 == 2
                          ? framing_decode_v1(data + 1, size - 1, why, sizeof why)
                          : framing_decode_legacy(data + 1, size - 1, data[0] % 3, why, sizeof why);
    if (!message) {
        require_utf8(why);
        return 0;
    }
    if (!message_check(message, client_channels, why, sizeof why)) {
        require_utf8(why);
    } else {
        message_type(message);
        message_id(message);
        message_session(message);
        message_parent_type(message);
        check_round_trip(message);
    }
    json_decref(message);
    return 0;
}
