#include "http/linger.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "common/loop.h"

typedef struct lingering_close {
    int fd; /* our duplicate of the client's socket */
    loop_watch watch;
    loop_timer_id timer; /* ends the linger after LINGER_MAX_MS */
    size_t discarded;
    struct lingering_close *next, **link; /* in `lingers` (link: what points at us) */
} lingering_close;

static lingering_close *lingers; /* ended by linger_stop_all */
static int linger_count;

static void free_linger(void *arg)
{
    free(arg);
}

static void end_linger(lingering_close *linger)
{
    *linger->link = linger->next;
    if (linger->next)
        linger->next->link = linger->link;
    linger_count--;
    loop_watch_remove(&linger->watch);
    if (linger->timer)
        loop_timer_cancel(linger->timer);
    close(linger->fd);
    loop_defer(free_linger, linger); /* an event of this batch may still name it */
}

static void on_linger_timeout(void *arg)
{
    lingering_close *linger = arg;
    linger->timer = 0; /* the loop frees a timer that fired */
    end_linger(linger);
}

static void on_linger_readable(void *owner, uint32_t events)
{
    lingering_close *linger = owner;
    char sink[16384];
    ssize_t n = read(linger->fd, sink, sizeof sink);
    if (n > 0 && (linger->discarded += (size_t)n) < LINGER_MAX_BYTES)
        return;
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    end_linger(linger); /* the client is done (EOF), gone (error), or sent too much */
}

void linger_start(int socket_fd)
{
    if (linger_count >= LINGER_MAX_SOCKETS)
        return;
    int fd = fcntl(socket_fd, F_DUPFD_CLOEXEC, 3);
    if (fd < 0)
        return;
    lingering_close *linger = calloc(1, sizeof *linger);
    if (!linger)
        die("out of memory");
    linger->fd = fd;
    linger->next = lingers;
    linger->link = &lingers;
    if (lingers)
        lingers->link = &linger->next;
    lingers = linger;
    linger_count++;
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    shutdown(fd, SHUT_WR); /* the answer is out: the client sees its end */
    loop_watch_add(&linger->watch, fd, EPOLLIN | EPOLLRDHUP, on_linger_readable, linger);
    linger->timer = loop_timer_add(LINGER_MAX_MS, on_linger_timeout, linger);
}

void linger_stop_all(void)
{
    while (lingers)
        end_linger(lingers);
}
