/* loop — the daemon's one event loop: epoll for descriptors, a short list of timers.
 *
 * Every connection, kernel channel, pipe and child pidfd is a `loop_watch` here; nothing runs on
 * another thread. Objects that own watches are freed with loop_defer() so that an event already
 * collected in the same epoll batch never reaches freed memory. */
#ifndef CELLBOX_COMMON_LOOP_H
#define CELLBOX_COMMON_LOOP_H

#include <stdbool.h>
#include <stdint.h>

typedef void (*loop_handler)(void *owner, uint32_t events);
typedef void (*loop_callback)(void *arg);

typedef struct loop_watch {
    int fd;               /* -1 when not registered */
    uint32_t events;      /* EPOLLIN/EPOLLOUT interest */
    loop_handler handler; /* called with the ready events */
    void *owner;          /* handler's first argument */
} loop_watch;

typedef struct loop_timer loop_timer;

void loop_init(void);
void loop_watch_add(loop_watch *watch, int fd, uint32_t events, loop_handler handler, void *owner);
void loop_watch_modify(loop_watch *watch, uint32_t events);
void loop_watch_remove(loop_watch *watch); /* does not close the fd */
/* A one-shot timer; returns a handle for loop_timer_cancel. */
loop_timer *loop_timer_add(int64_t delay_ms, loop_callback callback, void *arg);
void loop_timer_cancel(loop_timer *timer);
void loop_defer(loop_callback callback, void *arg); /* runs after the current batch */
void loop_set_poll_hook(loop_callback hook, void *arg, int64_t (*timeout_ms)(void *arg));
void loop_run(void);
void loop_run_deferred(void); /* at exit, after the loop stopped: the calls still queued */
void loop_stop(void);

#endif
