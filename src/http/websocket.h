/* websocket — RFC 6455 connections on upgraded sockets: wslay does the framing, loop.c the I/O.
 *
 * A connection reads and writes without blocking; messages larger than its limit close it with
 * 1009, protocol errors with 1002, invalid UTF-8 with 1007: wslay finds them, and the close frame
 * is ours, with a reason. Every reason is cut to 123 bytes before a character. After a close
 * frame is sent the socket is half-closed and drained so the peer reads the close code instead
 * of a reset; a close frame stuck behind frames the client does not read is given 10 s, then the
 * socket is dropped. What a connection has queued counts toward the daemon-wide ceiling
 * (outbound.h): past it, the biggest queue's connection is closed with 1008. */
#ifndef CELLBOX_HTTP_WEBSOCKET_H
#define CELLBOX_HTTP_WEBSOCKET_H

#include <stdbool.h>
#include <stddef.h>

typedef struct websocket websocket;

typedef struct websocket_callbacks {
    void (*on_message)(void *owner, websocket *socket, bool binary, const unsigned char *data,
                       size_t length);
    void (*on_close)(void *owner, websocket *socket); /* once; the socket is freed after it */
} websocket_callbacks;

/* Takes over `fd` (an upgraded socket; closed through `close_fd(close_arg)`). `extra` holds bytes
   already read past the HTTP request: they are read after the current loop batch, so no callback
   runs before the caller has handed the socket to its owner. */
websocket *websocket_start(int fd, const char *extra, size_t extra_length, size_t max_message,
                           const websocket_callbacks *callbacks, void *owner,
                           void (*close_fd)(void *close_arg), void *close_arg);
void websocket_send(websocket *socket, bool binary, const void *data, size_t length);
void websocket_close(websocket *socket, unsigned short code, const char *reason);
size_t websocket_queued_bytes(const websocket *socket);

enum {
    WEBSOCKET_NORMAL_CLOSURE = 1000,
    WEBSOCKET_GOING_AWAY = 1001,
    WEBSOCKET_PROTOCOL_ERROR = 1002,
    WEBSOCKET_INVALID_PAYLOAD = 1007,
    WEBSOCKET_POLICY_VIOLATION = 1008,
    WEBSOCKET_MESSAGE_TOO_BIG = 1009,
    WEBSOCKET_INTERNAL_ERROR = 1011,
};

#endif
