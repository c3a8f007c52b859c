#include "api/framing.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/text.h"

static json_t *parse_json_object(const unsigned char *data, size_t length, const char *what,
                                 char *why, size_t why_size)
{
    json_error_t error;
    json_t *value = json_loadb((const char *)data, length, 0, &error);
    if (!value) {
        text_scrub_utf8(error.text); /* it quotes the message near the error: why is a close reason */
        snprintf(why, why_size, "%s is not valid JSON: %s", what, error.text);
        return NULL;
    }
    if (!json_is_object(value)) {
        json_decref(value);
        snprintf(why, why_size, "%s must be a JSON object", what);
        return NULL;
    }
    return value;
}

static void default_channel(json_t *message)
{
    json_t *channel = json_object_get(message, "channel");
    if (!channel || json_is_null(channel))
        json_object_set_new(message, "channel", json_string("shell"));
    json_object_del(message, "buffers"); /* AutoGen sends {}; we never forward client buffers */
}

static uint32_t read_u32be(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint64_t read_u64le(const unsigned char *p)
{
    uint64_t value = 0;
    for (int i = 7; i >= 0; i--)
        value = value << 8 | p[i];
    return value;
}

json_t *framing_decode_legacy(const unsigned char *data, size_t length, int binary, char *why,
                              size_t why_size)
{
    const unsigned char *json = data;
    size_t json_length = length;
    if (binary) {
        if (length < 8) {
            snprintf(why, why_size, "binary message too short for its offset table");
            return NULL;
        }
        uint32_t count = read_u32be(data);
        if (count == 0 || count > (length - 4) / 4) {
            snprintf(why, why_size, "binary message declares %u buffers it cannot hold", count);
            return NULL;
        }
        uint32_t start = read_u32be(data + 4);
        uint32_t end = count > 1 ? read_u32be(data + 8) : (uint32_t)length;
        if (start != 4 * (count + 1) || end < start || end > length) {
            snprintf(why, why_size, "binary message has inconsistent offsets");
            return NULL;
        }
        json = data + start;
        json_length = end - start;
    }
    json_t *message = parse_json_object(json, json_length, "message", why, why_size);
    if (message)
        default_channel(message);
    return message;
}

json_t *framing_decode_v1(const unsigned char *data, size_t length, char *why, size_t why_size)
{
    static const char *const parts[] = {"header", "parent_header", "metadata", "content"};
    if (length < 8) {
        snprintf(why, why_size, "v1 message too short for its offset count");
        return NULL;
    }
    uint64_t count = read_u64le(data);
    if (count < 6 || count > (length - 8) / 8) {
        snprintf(why, why_size, "v1 message declares %llu offsets; 6 or more that fit are needed",
                 (unsigned long long)count);
        return NULL;
    }
    uint64_t offsets[6];
    for (int i = 0; i < 6; i++)
        offsets[i] = read_u64le(data + 8 * (i + 1));
    for (int i = 0; i < 6; i++) {
        bool ordered = i == 0 ? offsets[0] == 8 * (count + 1) : offsets[i] >= offsets[i - 1];
        if (!ordered || offsets[i] > length) {
            snprintf(why, why_size, "v1 message has inconsistent offsets");
            return NULL;
        }
    }
    json_t *message = json_object();
    json_object_set_new(message, "channel",
                        json_stringn((const char *)data + offsets[0], offsets[1] - offsets[0]));
    if (!json_string_value(json_object_get(message, "channel"))) {
        json_decref(message);
        snprintf(why, why_size, "v1 message channel is not UTF-8");
        return NULL;
    }
    for (int i = 0; i < 4; i++) {
        json_t *part = parse_json_object(data + offsets[i + 1], offsets[i + 2] - offsets[i + 1],
                                         parts[i], why, why_size);
        if (!part) {
            json_decref(message);
            return NULL;
        }
        json_object_set_new(message, parts[i], part);
    }
    return message;
}

char *framing_encode_legacy(json_t *message, size_t *length)
{
    json_t *frame = json_copy(message); /* shallow: only top-level keys are added */
    json_object_set(frame, "msg_id", json_object_get(json_object_get(message, "header"), "msg_id"));
    json_object_set(frame, "msg_type",
                    json_object_get(json_object_get(message, "header"), "msg_type"));
    json_object_set_new(frame, "buffers", json_array());
    char *text = json_dumps(frame, JSON_COMPACT);
    json_decref(frame);
    if (!text)
        die("out of memory encoding a message");
    *length = strlen(text);
    return text;
}

void framing_encode_v1(json_t *message, buffer *out)
{
    static const char *const parts[] = {"header", "parent_header", "metadata", "content"};
    char *encoded[4];
    const char *channel = json_string_value(json_object_get(message, "channel"));
    size_t channel_length = channel ? strlen(channel) : 0;
    uint64_t offset = 8 * 7; /* count + 6 offsets */
    buffer_append_u64le(out, 6);
    buffer_append_u64le(out, offset);
    offset += channel_length;
    buffer_append_u64le(out, offset);
    for (int i = 0; i < 4; i++) {
        json_t *part = json_object_get(message, parts[i]);
        encoded[i] = part ? json_dumps(part, JSON_COMPACT | JSON_ENCODE_ANY) : strdup("{}");
        if (!encoded[i])
            die("out of memory encoding a message");
        offset += strlen(encoded[i]);
        buffer_append_u64le(out, offset);
    }
    buffer_append(out, channel ? channel : "", channel_length);
    for (int i = 0; i < 4; i++) {
        buffer_append(out, encoded[i], strlen(encoded[i]));
        free(encoded[i]);
    }
}
