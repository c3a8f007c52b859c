/* framing — the two ways Jupyter messages travel over a kernel's WebSocket.
 *
 * Legacy (no subprotocol): a JSON text frame per message; a message with buffers is a binary frame
 * `u32be nbufs; u32be offsets[nbufs]; JSON; buffers...`. Server frames carry top-level msg_id,
 * msg_type and channel (AutoGen reads msg_type there).
 * v1.kernel.websocket.jupyter.org: always binary, little-endian u64
 * `offset_count; offsets[offset_count]; channel; header; parent_header; metadata; content; buffers`.
 *
 * Decoders take hostile bytes and return a message object with "channel" (default "shell"),
 * or NULL with the reason written to `why`. Buffers from clients are dropped. */
#ifndef CELLBOX_API_FRAMING_H
#define CELLBOX_API_FRAMING_H

#include <jansson.h>
#include <stddef.h>

#include "common/buffer.h"

#define FRAMING_V1_PROTOCOL "v1.kernel.websocket.jupyter.org"

json_t *framing_decode_legacy(const unsigned char *data, size_t length, int binary, char *why,
                              size_t why_size);
json_t *framing_decode_v1(const unsigned char *data, size_t length, char *why, size_t why_size);
/* Encoders take a message with "channel" set. */
char *framing_encode_legacy(json_t *message, size_t *length); /* malloc'd JSON text */
void framing_encode_v1(json_t *message, buffer *out);

#endif
