#include "http/websocket.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>
#include <wslay/wslay.h>

#include "common/buffer.h"
#include "common/heap.h"
#include "common/log.h"
#include "common/loop.h"
#include "http/outbound.h"
#include "common/text.h"

/* How long a closing connection waits for the peer's close before the socket is dropped. */
#define CLOSE_LINGER_MS 2000
/* How long a close frame may wait behind unsent frames for a client that does not read: past
   it the socket is dropped, and with it what was queued. */
#define CLOSE_DEADLINE_MS 10000
/* What an evicted client reads in its close frame (at most 123 bytes, RFC 6455 5.5). */
#define EVICTED_REASON "server-wide output queue limit reached (--max-queued-bytes): this client read too slowly"
#define OUT_LIMIT (1u << 20) /* unsent bytes collected before wslay is told to wait */
#define MAX_CLOSE_REASON 123 /* RFC 6455 5.5: a control frame's payload is at most 125 bytes */

struct websocket {
    int fd;
    loop_watch watch;
    wslay_event_context_ptr wslay;
    buffer extra;                 /* bytes the HTTP layer read past the request */
    buffer out;                   /* frames wslay has written and the socket has not taken yet */
    bool flush_scheduled;         /* a flush_deferred() is queued for the end of the batch */
    const websocket_callbacks *callbacks;
    void *owner;
    void (*close_fd)(void *);     /* hands the fd back to libmicrohttpd to close */
    void *close_arg;
    bool drained;                 /* a short read this wakeup: the socket has nothing more */
    bool closing;                 /* our close is queued: nothing more is queued behind it */
    bool peer_gone;               /* recv() saw end of file or an error */
    bool rejecting;               /* wslay queued a close of its own after a protocol error */
    bool frame_open;              /* a frame's header is in `out`, its payload not yet */
    bool skipping_payload;        /* the payload of wslay's own close frame is being dropped */
    size_t max_message;           /* the largest message taken, named in a 1009's reason */
    bool draining;                /* close sent: discard input until EOF */
    bool finished;                /* on_close called; freeing is deferred */
    bool failed;                  /* a write failed; finishing is deferred */
    loop_timer_id linger_timer;   /* the close deadline, then the linger after our close */
    outbound_queue outbound;      /* this connection's share of the daemon-wide count */
};

static void websocket_finish(websocket *socket);

/* Senders may be iterating over connections when a write fails: end the connection after the
   current batch instead of calling on_close under their feet. */
static void finish_deferred(void *arg) { websocket_finish(arg); }
static void fail_later(websocket *socket)
{
    if (socket->failed)
        return;
    socket->failed = true;
    loop_defer(finish_deferred, socket);
}

static ssize_t on_wslay_recv(wslay_event_context_ptr ctx, uint8_t *data, size_t length, int flags,
                             void *user)
{
    websocket *socket = user;
    if (buffer_size(&socket->extra) > 0) {
        size_t n = buffer_size(&socket->extra) < length ? buffer_size(&socket->extra) : length;
        memcpy(data, buffer_head(&socket->extra), n);
        buffer_consume(&socket->extra, n);
        return (ssize_t)n;
    }
    ssize_t n;
    if (socket->drained) { /* spare the recv that would only say EAGAIN (level-triggered loop) */
        wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
        return -1;
    }
    do
        n = recv(socket->fd, data, length, 0);
    while (n < 0 && errno == EINTR);
    if (n > 0 && (size_t)n < length)
        socket->drained = true;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
        return -1;
    }
    if (n <= 0) {
        socket->peer_gone = true;
        wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
        return -1;
    }
    return n;
}

/* Sends what `out` holds; false when the connection is broken. What the socket does not take
   now waits for EPOLLOUT (update_interest asks for it). */
static bool flush_out(websocket *socket)
{
    while (buffer_size(&socket->out) > 0) {
        ssize_t n = send(socket->fd, buffer_head(&socket->out), buffer_size(&socket->out), MSG_NOSIGNAL);
        if (n > 0)
            buffer_consume(&socket->out, (size_t)n);
        else if (n < 0 && errno == EINTR)
            continue;
        else
            return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
    }
    return true;
}

/* ---- closes with a reason ----

   wslay answers a protocol error itself, with a close frame that carries no reason (1002,
   1007, 1009) or, for a frame header it cannot parse (a 64-bit length with the top bit set, a
   length not in its shortest form, a control frame over 125 bytes or fragmented), an empty
   close frame and an error. A client is owed what was wrong, so that frame never leaves:
   wslay still "sends" it (it then stops writing, and tells which code it chose), its bytes are
   dropped here, and our own close frame, with the same code and a reason, takes its place. */

/* The length of `reason` as a close frame can carry it: at most 123 bytes, cut before a
   character rather than inside one (a cut UTF-8 sequence makes the client fail with 1007). */
static size_t close_reason_length(const char *reason)
{
    return reason ? text_utf8_fit(reason, strlen(reason), MAX_CLOSE_REASON) : 0;
}

/* After a protocol error, the next frame wslay starts is its close frame (it finishes a frame
   already begun, sends Close before anything queued, then nothing): its header and payload
   are dropped. (A message whose header `out` had refused is retried before the close, and is
   dropped whole the same way: the stream stays whole frames, and the connection is closing.)
   True when these bytes were. */
static bool skip_wslay_close_frame(websocket *socket, int flags)
{
    if (socket->skipping_payload) {
        socket->skipping_payload = false;
        return true;
    }
    if (!socket->rejecting || socket->frame_open)
        return false;
    socket->skipping_payload = (flags & WSLAY_MSG_MORE) != 0;
    return true;
}

static const char *rejection_reason(const websocket *socket, unsigned short code, char *scratch,
                                    size_t scratch_size)
{
    switch (code) {
    case WEBSOCKET_PROTOCOL_ERROR:
        return "protocol error: a frame unmasked, with reserved bits set or an unknown opcode, "
               "out of fragment order, or a bad close code";
    case WEBSOCKET_INVALID_PAYLOAD: return "invalid UTF-8 in a text message or in a close reason";
    case WEBSOCKET_MESSAGE_TOO_BIG:
        snprintf(scratch, scratch_size, "message over the %zu-byte limit (--max-message-size)",
                 socket->max_message);
        return scratch;
    default:
        return "bad frame header: a control frame fragmented or over 125 bytes, or a payload "
               "length not in its shortest form or over 2^63-1";
    }
}

static ssize_t append_to_out(const uint8_t *data, size_t length, int flags, void *user)
{
    websocket *socket = user;
    buffer_append(&socket->out, data, length);
    return (ssize_t)length;
}

/* Our close frame in place of the one wslay dropped: its code (1002 where it sent none), and
   a reason. Written with wslay's frame layer, straight into `out`. */
static void send_rejection(websocket *socket)
{
    socket->rejecting = false;
    unsigned short code = wslay_event_get_status_code_sent(socket->wslay);
    if (code == WSLAY_CODE_NO_STATUS_RCVD)
        code = WEBSOCKET_PROTOCOL_ERROR;
    char scratch[96];
    const char *reason = rejection_reason(socket, code, scratch, sizeof scratch);
    size_t reason_length = close_reason_length(reason);
    uint8_t payload[2 + MAX_CLOSE_REASON] = {code >> 8, code & 0xff};
    memcpy(payload + 2, reason, reason_length);
    struct wslay_frame_iocb frame = {
        .fin = 1,
        .opcode = WSLAY_CONNECTION_CLOSE,
        .payload_length = 2 + reason_length,
        .data = payload,
        .data_length = 2 + reason_length,
    };
    static const struct wslay_frame_callbacks frame_callbacks = {.send_callback = append_to_out};
    wslay_frame_context_ptr writer;
    if (wslay_frame_context_init(&writer, &frame_callbacks, socket) != 0)
        die("out of memory closing a WebSocket");
    wslay_frame_send(writer, &frame);
    wslay_frame_context_free(writer);
    log_info("websocket: closed with %u after a protocol error: %s", code, reason);
}

/* After wslay read: did it stop reading to close on its own (a protocol error), rather than
   because the peer closed or we did? */
static void notice_rejection(websocket *socket)
{
    if (!wslay_event_get_read_enabled(socket->wslay) &&
        !wslay_event_get_close_received(socket->wslay) && !socket->closing &&
        !wslay_event_get_close_sent(socket->wslay))
        socket->rejecting = true;
}

/* wslay's frames are collected in `out` and leave in one send() per batch (flush_out): a cell's
   busy, execute_input, result, reply and idle are five frames, and a system call each costs more
   than the copy. Past OUT_LIMIT unsent bytes wslay is told to wait, as the socket would. */
static ssize_t on_wslay_send(wslay_event_context_ptr ctx, const uint8_t *data, size_t length,
                             int flags, void *user)
{
    websocket *socket = user;
    if (skip_wslay_close_frame(socket, flags))
        return (ssize_t)length;
    if (buffer_size(&socket->out) >= OUT_LIMIT && !flush_out(socket)) {
        wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
        return -1;
    }
    if (buffer_size(&socket->out) >= OUT_LIMIT) {
        wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
        return -1;
    }
    buffer_append(&socket->out, data, length);
    /* wslay hands a frame over as its header (flagged "more" when a payload follows), then
       the payload in one piece: between the two the frame is open. */
    socket->frame_open = (flags & WSLAY_MSG_MORE) != 0;
    return (ssize_t)length;
}

static void report_queued(websocket *socket)
{
    outbound_update(&socket->outbound, websocket_queued_bytes(socket));
}

/* Everything wslay has queued, out to the socket as far as it takes it. */
static bool transmit(websocket *socket)
{
    bool sent = !wslay_event_want_write(socket->wslay) || wslay_event_send(socket->wslay) == 0;
    if (sent && socket->rejecting && wslay_event_get_close_sent(socket->wslay))
        send_rejection(socket);
    sent = sent && flush_out(socket);
    report_queued(socket);
    return sent;
}

static int on_wslay_genmask(wslay_event_context_ptr ctx, uint8_t *buf, size_t length, void *user)
{
    return RAND_bytes(buf, (int)length) == 1 ? 0 : -1;
}

static void on_wslay_message(wslay_event_context_ptr ctx,
                             const struct wslay_event_on_msg_recv_arg *arg, void *user)
{
    websocket *socket = user;
    if (socket->finished || wslay_event_get_close_sent(ctx))
        return;
    if (arg->opcode == WSLAY_TEXT_FRAME || arg->opcode == WSLAY_BINARY_FRAME)
        socket->callbacks->on_message(socket->owner, socket, arg->opcode == WSLAY_BINARY_FRAME,
                                      arg->msg, arg->msg_length);
}

static const struct wslay_event_callbacks wslay_callbacks = {
    .recv_callback = on_wslay_recv,
    .send_callback = on_wslay_send,
    .genmask_callback = on_wslay_genmask,
    .on_msg_recv_callback = on_wslay_message,
};

static void on_linger_expired(void *arg)
{
    websocket *socket = arg;
    socket->linger_timer = 0;
    websocket_finish(socket);
}

/* Our close frame is out: stop writing and read until the peer closes, so it sees the code. */
static void start_draining(websocket *socket)
{
    if (socket->draining)
        return;
    socket->draining = true;
    shutdown(socket->fd, SHUT_WR);
    loop_watch_modify(&socket->watch, EPOLLIN);
    if (socket->linger_timer) /* the close deadline: met */
        loop_timer_cancel(socket->linger_timer);
    socket->linger_timer = loop_timer_add(CLOSE_LINGER_MS, on_linger_expired, socket);
}

static void drain_input(websocket *socket)
{
    char sink[16384];
    ssize_t n;
    while ((n = recv(socket->fd, sink, sizeof sink, 0)) > 0)
        ;
    if (n == 0 || (errno != EAGAIN && errno != EINTR))
        websocket_finish(socket);
}

/* Re-arms epoll for what wslay wants next, or ends the connection when it wants nothing. */
static void update_interest(websocket *socket)
{
    if (socket->finished || socket->failed || socket->draining)
        return;
    bool want_read = wslay_event_want_read(socket->wslay);
    bool want_write = wslay_event_want_write(socket->wslay) || buffer_size(&socket->out) > 0;
    if (wslay_event_get_close_sent(socket->wslay) && !want_write) {
        if (wslay_event_get_close_received(socket->wslay))
            fail_later(socket);
        else
            start_draining(socket);
        return;
    }
    if (!want_read && !want_write) {
        fail_later(socket);
        return;
    }
    loop_watch_modify(&socket->watch, (want_read ? EPOLLIN : 0) | (want_write ? EPOLLOUT : 0));
}

static void on_socket_ready(void *owner, uint32_t events)
{
    websocket *socket = owner;
    if (socket->draining) {
        drain_input(socket);
        return;
    }
    socket->drained = false;
    if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
        /* wslay fails the read for a frame header it cannot parse as well as for a peer that
           went away: only the second has no one left to tell. */
        if (wslay_event_recv(socket->wslay) != 0 && socket->peer_gone) {
            websocket_finish(socket);
            return;
        }
        notice_rejection(socket);
    }
    if (socket->finished)
        return;
    if (!transmit(socket)) {
        websocket_finish(socket);
        return;
    }
    update_interest(socket);
}

static void flush_deferred(void *arg)
{
    websocket *socket = arg;
    socket->flush_scheduled = false;
    if (socket->finished || socket->failed || socket->draining)
        return;
    if (!transmit(socket)) {
        fail_later(socket);
        return;
    }
    update_interest(socket);
}

/* The bytes read past the HTTP request wait until the owner holds the socket: read at once, a
   message among them reached an owner that had not attached the connection yet (and was lost),
   and a close ended it before websocket_start returned (the owner then used a freed socket). */
static void read_extra_deferred(void *arg)
{
    websocket *socket = arg;
    if (!socket->finished && !socket->failed)
        on_socket_ready(socket, EPOLLIN);
}

/* Past the daemon-wide ceiling: the close frame jumps ahead of the queued messages (wslay sends
   control frames first), and the deadline drops the socket if the client never reads it. */
static void evict(void *owner, size_t total)
{
    websocket *socket = owner;
    log_warn("websocket: closing a client that does not read (%zu bytes queued for slow clients "
             "in all)", total);
    websocket_close(socket, WEBSOCKET_POLICY_VIOLATION, EVICTED_REASON);
}

websocket *websocket_start(int fd, const char *extra, size_t extra_length, size_t max_message,
                           const websocket_callbacks *callbacks, void *owner,
                           void (*close_fd)(void *close_arg), void *close_arg)
{
    websocket *socket = calloc(1, sizeof *socket);
    if (!socket)
        die("out of memory");
    socket->fd = fd;
    socket->callbacks = callbacks;
    socket->owner = owner;
    socket->close_fd = close_fd;
    socket->close_arg = close_arg;
    buffer_append(&socket->extra, extra, extra_length);
    outbound_add(&socket->outbound, evict, socket);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    /* Kernel messages are small and come in bursts (status, result, reply, status): Nagle's
       algorithm would hold each behind the peer's delayed ACK, ~40 ms per cell. */
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (wslay_event_context_server_init(&socket->wslay, &wslay_callbacks, socket) != 0)
        die("out of memory starting a WebSocket");
    wslay_event_config_set_max_recv_msg_length(socket->wslay, max_message);
    socket->max_message = max_message;
    loop_watch_add(&socket->watch, fd, EPOLLIN, on_socket_ready, socket);
    if (extra_length > 0)
        loop_defer(read_extra_deferred, socket);
    return socket;
}

void websocket_send(websocket *socket, bool binary, const void *data, size_t length)
{
    if (socket->finished || socket->failed || socket->draining || socket->closing ||
        wslay_event_get_close_sent(socket->wslay))
        return;
    struct wslay_event_msg message = {
        .opcode = binary ? WSLAY_BINARY_FRAME : WSLAY_TEXT_FRAME,
        .msg = data,
        .msg_length = length,
    };
    if (wslay_event_queue_msg(socket->wslay, &message) != 0) {
        log_warn("websocket: could not queue a %zu-byte message", length);
        return;
    }
    report_queued(socket); /* may close this very socket: its close frame goes first */
    /* Sent at the end of the loop's batch, with whatever else this batch sends on the socket
       (the messages of one read from a kernel). The free is deferred too, after this. */
    if (!socket->flush_scheduled) {
        socket->flush_scheduled = true;
        loop_defer(flush_deferred, socket);
    }
}

void websocket_close(websocket *socket, unsigned short code, const char *reason)
{
    if (socket->finished || socket->failed || socket->draining || socket->closing)
        return;
    socket->closing = true;
    if (wslay_event_queue_close(socket->wslay, code, (const uint8_t *)reason,
                                close_reason_length(reason)) == 0 &&
        !socket->linger_timer)
        socket->linger_timer = loop_timer_add(CLOSE_DEADLINE_MS, on_linger_expired, socket);
    if (!transmit(socket)) {
        fail_later(socket);
        return;
    }
    update_interest(socket);
}

size_t websocket_queued_bytes(const websocket *socket)
{
    return wslay_event_get_queued_msg_length(socket->wslay) + buffer_size(&socket->out);
}

static void websocket_free(void *arg)
{
    websocket *socket = arg;
    wslay_event_context_free(socket->wslay);
    buffer_free(&socket->extra);
    buffer_free(&socket->out);
    free(socket);
    heap_note_release();
}

static void websocket_finish(websocket *socket)
{
    if (socket->finished)
        return;
    socket->finished = true;
    if (socket->linger_timer)
        loop_timer_cancel(socket->linger_timer);
    loop_watch_remove(&socket->watch);
    outbound_remove(&socket->outbound);
    socket->close_fd(socket->close_arg);
    socket->callbacks->on_close(socket->owner, socket);
    loop_defer(websocket_free, socket);
}
