/* fuzz_websocket — the bytes a WebSocket client sends, through wslay and websocket.c's callbacks.
 *
 * The connection is a socketpair whose client end the harness holds; the fuzzer's bytes arrive
 * as the bytes read past the HTTP request (websocket_start's `extra`), the path every upgraded
 * connection's first read takes. Each message is echoed back (websocket_send), then the
 * connection is closed from our side and the client hangs up, the way a real one ends, so every
 * path ends in on_close and the deferred free. Input: one byte for the message size limit, then
 * the frames. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "common/loop.h"
#include "http/websocket.h"

#define MAX_BATCHES 16

typedef struct connection {
    websocket *socket;
    bool started; /* websocket_start returned: the owner holds the socket */
    bool closed;
} connection;

/* server.c hands the socket to its owner (channels.c's on_open) after websocket_start returns:
   a callback before that reaches an owner that does not know the connection yet. */
static void require_started(const connection *c, const char *callback)
{
    if (!c->started) {
        fprintf(stderr, "fuzz: %s called before websocket_start returned\n", callback);
        abort();
    }
}

static void on_message(void *owner, websocket *socket, bool binary, const unsigned char *data,
                       size_t length)
{
    require_started(owner, "on_message");
    websocket_send(socket, binary, data, length);
}

static void on_close(void *owner, websocket *socket)
{
    connection *c = owner;
    require_started(c, "on_close");
    if (c->closed) {
        fprintf(stderr, "fuzz: on_close called twice\n");
        abort();
    }
    c->closed = true;
}

static const websocket_callbacks callbacks = {on_message, on_close};

static void close_fd(void *arg)
{
    close(*(int *)arg);
}

/* One turn of the daemon's loop: ready sockets, due timers, deferred calls. */
static void stop_loop(void *arg)
{
    loop_stop();
}
static void run_one_batch(int client_fd)
{
    loop_timer_add(0, stop_loop, NULL);
    loop_run();
    char sink[65536];
    while (client_fd >= 0 && read(client_fd, sink, sizeof sink) > 0)
        ;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool initialized;
    if (!initialized) {
        log_set_level(LOG_ERROR);
        loop_init();
        initialized = true;
    }
    if (size < 1)
        return 0;
    int fds[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds) < 0)
        return 0;
    size_t max_message = (size_t)16 << (data[0] % 17); /* 16 bytes to 1 MiB */
    connection c = {0};
    c.socket = websocket_start(fds[0], (const char *)data + 1, size - 1, max_message, &callbacks,
                               &c, close_fd, &fds[0]);
    c.started = true;
    for (int i = 0; i < MAX_BATCHES / 2 && !c.closed; i++)
        run_one_batch(fds[1]);
    if (!c.closed)
        websocket_close(c.socket, WEBSOCKET_NORMAL_CLOSURE, "fuzzing done");
    run_one_batch(fds[1]);
    close(fds[1]); /* the client hangs up */
    for (int i = 0; i < MAX_BATCHES / 2 && !c.closed; i++)
        run_one_batch(-1);
    if (!c.closed) {
        fprintf(stderr, "fuzz: the connection did not end after the client hung up\n");
        abort();
    }
    loop_run_deferred();
    return 0;
}
