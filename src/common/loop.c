#include "common/loop.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"

struct loop_timer {
    int64_t due_ms;        /* monotonic deadline */
    loop_callback callback;
    void *arg;
    loop_timer *next;      /* list sorted by due_ms */
};

typedef struct deferred_call {
    loop_callback callback;
    void *arg;
    struct deferred_call *next;
} deferred_call;

static int epoll_fd = -1;
static bool running;
static loop_timer *timers;
static deferred_call *deferred_head, *deferred_tail;
static loop_callback poll_hook;
static void *poll_hook_arg;
static int64_t (*poll_hook_timeout)(void *arg);

void loop_init(void)
{
    epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    if (epoll_fd < 0)
        die("epoll_create1: %s", strerror(errno));
}

void loop_watch_add(loop_watch *watch, int fd, uint32_t events, loop_handler handler, void *owner)
{
    struct epoll_event ev = {.events = events, .data.ptr = watch};
    watch->fd = fd;
    watch->events = events;
    watch->handler = handler;
    watch->owner = owner;
    if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev) < 0)
        die("epoll_ctl(ADD, %d): %s", fd, strerror(errno));
}

void loop_watch_modify(loop_watch *watch, uint32_t events)
{
    if (watch->fd < 0 || watch->events == events)
        return;
    struct epoll_event ev = {.events = events, .data.ptr = watch};
    watch->events = events;
    if (epoll_ctl(epoll_fd, EPOLL_CTL_MOD, watch->fd, &ev) < 0)
        log_warn("epoll_ctl(MOD, %d): %s", watch->fd, strerror(errno));
}

void loop_watch_remove(loop_watch *watch)
{
    if (watch->fd < 0)
        return;
    epoll_ctl(epoll_fd, EPOLL_CTL_DEL, watch->fd, NULL);
    watch->fd = -1;
    watch->handler = NULL;
}

loop_timer *loop_timer_add(int64_t delay_ms, loop_callback callback, void *arg)
{
    loop_timer *timer = calloc(1, sizeof *timer);
    if (!timer)
        die("out of memory");
    timer->due_ms = clock_monotonic_ms() + delay_ms;
    timer->callback = callback;
    timer->arg = arg;
    loop_timer **at = &timers;
    while (*at && (*at)->due_ms <= timer->due_ms)
        at = &(*at)->next;
    timer->next = *at;
    *at = timer;
    return timer;
}

void loop_timer_cancel(loop_timer *timer)
{
    for (loop_timer **at = &timers; *at; at = &(*at)->next) {
        if (*at == timer) {
            *at = timer->next;
            free(timer);
            return;
        }
    }
}

void loop_defer(loop_callback callback, void *arg)
{
    deferred_call *call = calloc(1, sizeof *call);
    if (!call)
        die("out of memory");
    call->callback = callback;
    call->arg = arg;
    if (deferred_tail)
        deferred_tail->next = call;
    else
        deferred_head = call;
    deferred_tail = call;
}

void loop_set_poll_hook(loop_callback hook, void *arg, int64_t (*timeout_ms)(void *arg))
{
    poll_hook = hook;
    poll_hook_arg = arg;
    poll_hook_timeout = timeout_ms;
}

void loop_run_deferred(void)
{
    while (deferred_head) {
        deferred_call *call = deferred_head;
        deferred_head = call->next;
        if (!deferred_head)
            deferred_tail = NULL;
        call->callback(call->arg);
        free(call);
    }
}

static void run_due_timers(void)
{
    int64_t now = clock_monotonic_ms();
    while (timers && timers->due_ms <= now) {
        loop_timer *timer = timers;
        timers = timer->next;
        timer->callback(timer->arg);
        free(timer);
    }
}

static int next_timeout_ms(void)
{
    int64_t wait = -1;
    if (timers) {
        wait = timers->due_ms - clock_monotonic_ms();
        if (wait < 0)
            wait = 0;
    }
    if (poll_hook_timeout) {
        int64_t hook_wait = poll_hook_timeout(poll_hook_arg);
        if (hook_wait >= 0 && (wait < 0 || hook_wait < wait))
            wait = hook_wait;
    }
    if (deferred_head)
        wait = 0;
    return wait > 60000 ? 60000 : (int)wait;
}

void loop_run(void)
{
    struct epoll_event events[256];
    running = true;
    while (running) {
        int n = epoll_wait(epoll_fd, events, 256, next_timeout_ms());
        if (n < 0 && errno != EINTR)
            die("epoll_wait: %s", strerror(errno));
        for (int i = 0; i < n; i++) {
            loop_watch *watch = events[i].data.ptr;
            if (watch->fd >= 0 && watch->handler)
                watch->handler(watch->owner, events[i].events);
        }
        run_due_timers();
        /* Deferred work first, then the poll hook (libmicrohttpd): a response a deferred call
           finishes or resumes goes out in this turn, not when some later event wakes the loop;
           then what the hook deferred. */
        loop_run_deferred();
        if (poll_hook)
            poll_hook(poll_hook_arg);
        loop_run_deferred();
    }
}

void loop_stop(void) { running = false; }
