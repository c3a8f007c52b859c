/* fuzz_kernel_frames — what a hostile kernel writes on its channel: u32le-length JSON frames
 * split by message_frame_next, parsed and checked by message_from_kernel, then read as
 * kernel.c reads them (channel, type, parent, status, execution count) and encoded for the
 * clients in both WebSocket framings (what channels.c does with every message).
 *
 * Input: the channel's bytes, as they arrive (several frames, the last maybe cut short). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/framing.h"
#include "common/buffer.h"
#include "kernel/message.h"

/* The reason becomes the kernel's death reason, which goes to clients in JSON: jansson refuses a
   string that is not UTF-8. */
static void require_utf8(const char *why)
{
    json_t *text = json_string(why);
    if (!text) {
        fprintf(stderr, "fuzz: a reason is not UTF-8: %s\n", why);
        abort();
    }
    json_decref(text);
}

static void read_as_the_daemon_does(json_t *message)
{
    const char *channel = json_string_value(json_object_get(message, "channel"));
    const char *type = message_type(message);
    if (strcmp(channel, "iopub") == 0 && strcmp(type, "status") == 0)
        json_string_value(json_object_get(json_object_get(message, "content"), "execution_state"));
    json_integer_value(json_object_get(json_object_get(message, "content"), "execution_count"));
    message_type_is_untracked(message_parent_type(message));
    message_parent_session(message);
    message_id(message);

    size_t length;
    free(framing_encode_legacy(message, &length));
    buffer frame = {0};
    framing_encode_v1(message, &frame);
    buffer_free(&frame);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char why[160];
    size_t length;
    while (size > 0) {
        message_frame_status status = message_frame_next(data, size, &length);
        if (status != MESSAGE_FRAME_READY)
            return 0; /* cut short: more would come; too large: the kernel is killed */
        json_t *message = message_from_kernel((const char *)data + 4, length, why, sizeof why);
        if (!message) { /* the kernel is killed, and why becomes its death reason */
            require_utf8(why);
            return 0;
        }
        read_as_the_daemon_does(message);
        json_decref(message);
        data += 4 + length;
        size -= 4 + length;
    }
    return 0;
}
