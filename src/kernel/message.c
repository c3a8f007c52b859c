#include "kernel/message.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/clock.h"
#include "common/ids.h"
#include "common/log.h"
#include "common/text.h"

json_t *message_new(const char *msg_type, const char *session, json_t *parent_header,
                    json_t *content)
{
    char msg_id[UUID_STRING_LENGTH + 1], date[ISO_TIME_BUFFER];
    id_uuid4(msg_id);
    clock_format_iso(clock_wall_us(), date);
    json_t *header = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "msg_id", msg_id, "session",
                               session, "username", "cellbox", "date", date, "msg_type", msg_type,
                               "version", MESSAGE_PROTOCOL_VERSION);
    json_t *parent = parent_header ? json_incref(parent_header) : json_object();
    json_t *message = json_pack("{s:o, s:o, s:{}, s:o}", "header", header, "parent_header", parent,
                                "metadata", "content", content ? content : json_object());
    if (!message)
        die("out of memory building a %s message", msg_type);
    return message;
}

json_t *message_status(const char *session, json_t *parent_header, const char *execution_state)
{
    return message_new("status", session, parent_header,
                       json_pack("{s:s}", "execution_state", execution_state));
}

json_t *message_stream(const char *session, json_t *parent_header, const char *name,
                       const char *text, size_t length)
{
    json_t *content = json_object();
    json_object_set_new(content, "name", json_string(name));
    json_object_set_new(content, "text", text_json_stringn(text, length));
    return message_new("stream", session, parent_header, content);
}

json_t *message_error_content(const char *ename, const char *evalue)
{
    char line[1024];
    snprintf(line, sizeof line, "%s: %s", ename, evalue);
    /* evalue may quote a request or be cut by a fixed-size buffer: kept valid UTF-8 */
    return json_pack("{s:s, s:o, s:[o]}", "ename", ename, "evalue", text_json_string(evalue),
                     "traceback", text_json_string(line));
}

static const char *string_at(json_t *message, const char *part, const char *field)
{
    json_t *object = json_object_get(message, part);
    return json_string_value(json_object_get(object, field));
}

const char *message_type(json_t *message) { return string_at(message, "header", "msg_type"); }
const char *message_id(json_t *message) { return string_at(message, "header", "msg_id"); }
const char *message_session(json_t *message) { return string_at(message, "header", "session"); }

const char *message_parent_type(json_t *message)
{
    return string_at(message, "parent_header", "msg_type");
}

const char *message_parent_session(json_t *message)
{
    return string_at(message, "parent_header", "session");
}

static bool object_or_default(json_t *message, const char *part, char *why, size_t why_size)
{
    json_t *value = json_object_get(message, part);
    if (!value || json_is_null(value)) {
        json_object_set_new(message, part, json_object());
        return true;
    }
    if (!json_is_object(value)) {
        snprintf(why, why_size, "'%s' must be an object", part);
        return false;
    }
    return true;
}

bool message_check(json_t *message, const char *const *allowed_channels, char *why, size_t why_size)
{
    if (!json_is_object(message)) {
        snprintf(why, why_size, "a message must be a JSON object");
        return false;
    }
    json_t *header = json_object_get(message, "header");
    if (!json_is_object(header)) {
        snprintf(why, why_size, "'header' must be an object");
        return false;
    }
    const char *type = json_string_value(json_object_get(header, "msg_type"));
    if (!type || !*type) {
        snprintf(why, why_size, "'header.msg_type' must be a non-empty string");
        return false;
    }
    json_t *msg_id = json_object_get(header, "msg_id");
    if (msg_id && !json_is_string(msg_id)) {
        snprintf(why, why_size, "'header.msg_id' must be a string");
        return false;
    }
    if (!object_or_default(message, "parent_header", why, why_size) ||
        !object_or_default(message, "metadata", why, why_size) ||
        !object_or_default(message, "content", why, why_size))
        return false;
    const char *channel = json_string_value(json_object_get(message, "channel"));
    if (!channel) {
        snprintf(why, why_size, "'channel' must be a string");
        return false;
    }
    for (const char *const *allowed = allowed_channels; *allowed; allowed++)
        if (strcmp(channel, *allowed) == 0)
            return true;
    snprintf(why, why_size, "unknown channel '%.*s'", text_utf8_prefix(channel, 40), channel);
    return false;
}

message_frame_status message_frame_next(const unsigned char *data, size_t size,
                                        size_t *payload_length)
{
    if (size < 4)
        return MESSAGE_FRAME_INCOMPLETE;
    uint32_t length = data[0] | data[1] << 8 | data[2] << 16 | (uint32_t)data[3] << 24;
    *payload_length = length;
    if (length > MESSAGE_MAX_FRAME_BYTES)
        return MESSAGE_FRAME_TOO_LARGE;
    return size - 4 < length ? MESSAGE_FRAME_INCOMPLETE : MESSAGE_FRAME_READY;
}

/* The kernel's few words to the daemon itself ({"channel": "cellbox", "type": ...},
   docs/kernel-protocol.md: the checkpoint exchange and the namespace transfer) carry no Jupyter
   header: a string "type", one of these, names them. true for such a frame (*valid false, with
   `why`, for an unknown type: a protocol violation); false for any other channel. */
static bool is_cellbox_frame(json_t *message, char *why, size_t why_size, bool *valid)
{
    static const char *const types[] = {"checkpoint_ready", "checkpoint_refused", "restored",
                                         "namespace_saved", "namespace_buffer",
                                         "namespace_loaded", NULL};
    const char *channel = json_string_value(json_object_get(message, "channel"));
    if (!json_is_object(message) || !channel || strcmp(channel, "cellbox") != 0)
        return false;
    const char *type = json_string_value(json_object_get(message, "type"));
    *valid = false;
    for (const char *const *t = types; type && *t && !*valid; t++)
        *valid = strcmp(type, *t) == 0;
    if (!type || !*type)
        snprintf(why, why_size, "a cellbox frame needs a non-empty string 'type'");
    else if (!*valid)
        snprintf(why, why_size, "a cellbox frame of unknown type '%.40s'", type);
    return true;
}

json_t *message_from_kernel(const char *bytes, size_t length, char *why, size_t why_size)
{
    static const char *const kernel_channels[] = {"iopub", "shell", "control", "stdin", NULL};
    json_error_t error;
    json_t *message = json_loadb(bytes, length, JSON_REJECT_DUPLICATES, &error);
    if (!message) {
        text_scrub_utf8(error.text); /* it quotes the frame near the error */
        snprintf(why, why_size, "invalid JSON: %.*s", text_utf8_prefix(error.text, 100), error.text);
        return NULL;
    }
    bool valid;
    if (is_cellbox_frame(message, why, why_size, &valid)) {
        if (valid)
            return message;
        json_decref(message);
        return NULL;
    }
    if (!message_check(message, kernel_channels, why, why_size)) {
        json_decref(message);
        return NULL;
    }
    return message;
}

bool message_type_is_untracked(const char *msg_type)
{
    static const char *const untracked[] = {
        "comm_info_request", "comm_info_reply",   "kernel_info_request", "kernel_info_reply",
        "shutdown_request",  "shutdown_reply",    "interrupt_request",   "interrupt_reply",
        "debug_request",     "debug_reply",       "history_request",     "history_reply",
        "usage_request",     "usage_reply",       "inspect_request",     "inspect_reply",
        "is_complete_request", "is_complete_reply", "complete_request",  "complete_reply",
        NULL};
    if (!msg_type)
        return false;
    for (const char *const *t = untracked; *t; t++)
        if (strcmp(msg_type, *t) == 0)
            return true;
    return false;
}
