#include "http/tunnel.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/buffer.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/loop.h"
#include "http/outbound.h"

#define READ_CHUNK (64 * 1024)

typedef struct tunnel tunnel;

typedef struct tunnel_end {
    int fd;
    loop_watch watch;
    buffer queued;          /* bytes waiting to be written to this end */
    tunnel *tunnel;
    struct tunnel_end *peer;
} tunnel_end;

struct tunnel {
    tunnel_end client, inner;
    void (*close_client)(void *handle);
    void *client_handle;
    outbound_queue outbound;   /* client.queued's share of the daemon-wide count */
    loop_timer_id idle_timer;
    long idle_timeout_s;
    int64_t last_activity_ms;
    bool closed;
    void (*on_closed)(void *arg);
    void *arg;
    struct tunnel *prev, *next; /* every open tunnel, for http_tunnel_close_all */
};

static tunnel *open_tunnels;

static void free_tunnel(void *arg)
{
    tunnel *t = arg;
    buffer_free(&t->client.queued);
    buffer_free(&t->inner.queued);
    free(t);
}

static void close_tunnel(tunnel *t)
{
    if (t->closed)
        return;
    t->closed = true;
    if (t->prev)
        t->prev->next = t->next;
    else
        open_tunnels = t->next;
    if (t->next)
        t->next->prev = t->prev;
    loop_watch_remove(&t->client.watch);
    loop_watch_remove(&t->inner.watch);
    close(t->inner.fd);
    t->close_client(t->client_handle);
    outbound_remove(&t->outbound);
    loop_timer_cancel(t->idle_timer);
    t->on_closed(t->arg);
    loop_defer(free_tunnel, t); /* an event of this batch may still name it */
}

static void evict_tunnel(void *owner, size_t total)
{
    tunnel *t = owner;
    log_warn("tunnel: closing an upgraded connection with %zu bytes unread by its client (%zu "
             "queued for slow clients in all, past --max-queued-bytes)",
             buffer_size(&t->client.queued), total);
    close_tunnel(t);
}

/* Reading from an end is wanted while its peer's queue has room; writing while its own queue
   holds bytes. */
static void update_interest(tunnel_end *end)
{
    uint32_t events = (buffer_size(&end->peer->queued) < TUNNEL_MAX_QUEUED ? EPOLLIN | EPOLLRDHUP : 0) |
                      (buffer_size(&end->queued) > 0 ? EPOLLOUT : 0);
    loop_watch_modify(&end->watch, events);
}

/* Writes what is queued for `end`; false when the end is gone. */
static bool flush(tunnel_end *end)
{
    while (buffer_size(&end->queued) > 0) {
        ssize_t n = send(end->fd, buffer_head(&end->queued), buffer_size(&end->queued), MSG_NOSIGNAL);
        if (n < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
        buffer_consume(&end->queued, (size_t)n);
    }
    return true;
}

/* Reads what `end` sent into its peer's queue; false at its end of stream or an error. */
static bool read_from(tunnel_end *end)
{
    char chunk[READ_CHUNK];
    while (buffer_size(&end->peer->queued) < TUNNEL_MAX_QUEUED) {
        ssize_t n = recv(end->fd, chunk, sizeof chunk, 0);
        if (n == 0)
            return false;
        if (n < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
        buffer_append(&end->peer->queued, chunk, (size_t)n);
    }
    return true;
}

static void on_end_event(void *owner, uint32_t events)
{
    tunnel_end *end = owner;
    tunnel *t = end->tunnel;
    if (t->closed)
        return;
    t->last_activity_ms = clock_monotonic_ms();
    bool open = true;
    if (events & EPOLLOUT)
        open = flush(end);
    if (open && (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)))
        open = read_from(end);
    /* what was read goes on now; at an end of stream the rest is tried once, then both close
       (the protocol inside, a WebSocket, has its own close handshake) */
    bool peer_open = flush(end->peer);
    outbound_update(&t->outbound, buffer_size(&t->client.queued)); /* may close the tunnel */
    if (t->closed)
        return;
    if (!open || !peer_open) {
        close_tunnel(t);
        return;
    }
    update_interest(end);
    update_interest(end->peer);
}

static void check_idle(void *arg)
{
    tunnel *t = arg;
    t->idle_timer = 0;
    int64_t idle_ms = clock_monotonic_ms() - t->last_activity_ms;
    if (idle_ms >= t->idle_timeout_s * 1000) {
        log_info("tunnel: closing an upgraded connection idle for %ld s", t->idle_timeout_s);
        close_tunnel(t);
        return;
    }
    t->idle_timer = loop_timer_add(t->idle_timeout_s * 1000 - idle_ms, check_idle, t);
}

static void start_end(tunnel *t, tunnel_end *end, tunnel_end *peer, int fd)
{
    end->fd = fd;
    end->tunnel = t;
    end->peer = peer;
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

void http_tunnel_start(const http_tunnel_ends *ends, void (*on_closed)(void *arg), void *arg)
{
    tunnel *t = calloc(1, sizeof *t);
    if (!t)
        die("out of memory");
    t->close_client = ends->close_client;
    t->client_handle = ends->client_handle;
    t->idle_timeout_s = ends->idle_timeout_s;
    t->last_activity_ms = clock_monotonic_ms();
    t->on_closed = on_closed;
    t->arg = arg;
    start_end(t, &t->client, &t->inner, ends->client);
    start_end(t, &t->inner, &t->client, ends->inner);
    if (ends->to_inner_length > 0)
        buffer_append(&t->inner.queued, ends->to_inner, ends->to_inner_length);
    if (ends->to_client_length > 0)
        buffer_append(&t->client.queued, ends->to_client, ends->to_client_length);
    outbound_add(&t->outbound, evict_tunnel, t);
    t->next = open_tunnels;
    if (open_tunnels)
        open_tunnels->prev = t;
    open_tunnels = t;
    loop_watch_add(&t->client.watch, t->client.fd, EPOLLIN | EPOLLRDHUP, on_end_event, &t->client);
    loop_watch_add(&t->inner.watch, t->inner.fd, EPOLLIN | EPOLLRDHUP, on_end_event, &t->inner);
    t->idle_timer = loop_timer_add(t->idle_timeout_s * 1000, check_idle, t);
    /* the pending bytes go out now */
    on_end_event(&t->client, EPOLLOUT);
    if (!t->closed)
        on_end_event(&t->inner, EPOLLOUT);
}

void http_tunnel_close_all(void)
{
    while (open_tunnels)
        close_tunnel(open_tunnels);
}
