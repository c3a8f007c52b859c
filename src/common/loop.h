/* loop — the daemon's one event loop: epoll for descriptors, one-shot timers by id.
 *
 * Every connection, kernel channel, pipe and child pidfd is a `loop_watch` here, all on one
 * thread; only a snapshot's bulk copies run on others (common/worker.h), and they touch nothing
 * of the loop's. Objects that own watches are freed with loop_defer() so that an event already
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

/* A timer's name, as Redis's ae names its time events: ids are never reused, so a stale id (of a
   timer that fired or was cancelled) cancels nothing, where a stale pointer could have cancelled
   whatever was allocated at the same address since. */
typedef uint64_t loop_timer_id;

void loop_init(void);
void loop_watch_add(loop_watch *watch, int fd, uint32_t events, loop_handler handler, void *owner);
void loop_watch_modify(loop_watch *watch, uint32_t events);
void loop_watch_remove(loop_watch *watch); /* does not close the fd */
/* A one-shot timer: callback(arg) runs once, delay_ms from now; returns its id (never 0). Timers
   due at the same moment fire in the order they were added. */
loop_timer_id loop_timer_add(int64_t delay_ms, loop_callback callback, void *arg);
/* Stops a pending timer; a no-op for 0 or for an id that fired or was cancelled already. */
void loop_timer_cancel(loop_timer_id timer);
void loop_defer(loop_callback callback, void *arg); /* runs after the current batch */
void loop_set_poll_hook(loop_callback hook, void *arg, int64_t (*timeout_ms)(void *arg));
void loop_run(void);
void loop_run_deferred(void); /* at exit, after the loop stopped: the calls still queued */
void loop_stop(void);

#endif
