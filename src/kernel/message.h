/* message — building and checking Jupyter messages (protocol 5.3) as JSON objects.
 *
 * A message is {"header", "parent_header", "metadata", "content"}; on the wire to a kernel or a
 * client it also carries "channel". Everything a kernel sends is checked here before the daemon
 * looks at it: a sandbox is hostile. */
#ifndef CELLBOX_KERNEL_MESSAGE_H
#define CELLBOX_KERNEL_MESSAGE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#define MESSAGE_PROTOCOL_VERSION "5.3"

/* A new message whose parent is `parent_header` (borrowed; NULL = {}); steals `content`. */
json_t *message_new(const char *msg_type, const char *session, json_t *parent_header,
                    json_t *content);
json_t *message_status(const char *session, json_t *parent_header, const char *execution_state);
json_t *message_stream(const char *session, json_t *parent_header, const char *name,
                       const char *text, size_t length);
/* An `error` content: {ename, evalue, traceback: [line]} */
json_t *message_error_content(const char *ename, const char *evalue);

/* Field access that tolerates missing parts: NULL (or "") when absent or the wrong type. */
const char *message_type(json_t *message);
const char *message_id(json_t *message);
const char *message_session(json_t *message);
const char *message_parent_type(json_t *message);
const char *message_parent_session(json_t *message);

/* Checks a message from a kernel or a client: objects where objects belong, a string msg_type,
   and `channel` one of `allowed` (NULL-terminated). Fills missing parent_header/metadata/content
   with {}. On failure returns false and writes why. */
bool message_check(json_t *message, const char *const *allowed_channels, char *why, size_t why_size);

/* The kernel channel (docs/kernel-protocol.md): frames of a u32 little-endian length, then that
   much JSON. A kernel is hostile: its frames are split and checked here. */
#define MESSAGE_MAX_FRAME_BYTES (64u << 20)
typedef enum message_frame_status {
    MESSAGE_FRAME_INCOMPLETE, /* fewer bytes than the length or the frame says */
    MESSAGE_FRAME_READY,      /* *payload_length bytes of JSON follow the 4-byte length */
    MESSAGE_FRAME_TOO_LARGE,  /* *payload_length passes MESSAGE_MAX_FRAME_BYTES: a broken kernel */
} message_frame_status;
message_frame_status message_frame_next(const unsigned char *data, size_t size,
                                        size_t *payload_length);
/* A frame's JSON parsed and checked (message_check, with a kernel's channels; a "cellbox" frame,
   the kernel's answer to one of the daemon's, needs only a string "type"): NULL with why. */
json_t *message_from_kernel(const char *bytes, size_t length, char *why, size_t why_size);

/* Requests whose traffic does not count as activity for idle culling (jupyter_server's list). */
bool message_type_is_untracked(const char *msg_type);

#endif
