#include "common/loop.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"

/* Timers live in a binary min-heap ordered by (due_ms, id): the next one due is at the top, and
   two due at the same moment fire in the order they were added (ids only grow). A cancel finds
   its timer through an open-addressing table keyed by id, so neither adding nor cancelling walks
   the thousands a soak keeps pending. */
typedef struct loop_timer {
    loop_timer_id id;       /* never reused; 0 is "no timer" */
    int64_t due_ms;         /* monotonic deadline */
    loop_callback callback; /* called once, when due */
    void *arg;              /* callback's argument */
    size_t heap_index;      /* where it sits in timer_heap, kept up to date by every move */
} loop_timer;

typedef struct deferred_call {
    loop_callback callback;
    void *arg;
    struct deferred_call *next;
} deferred_call;

static int epoll_fd = -1;
static bool running;
static loop_timer **timer_heap; /* min-heap by (due_ms, id) */
static size_t timer_count, timer_heap_capacity;
static loop_timer **timer_table;    /* id -> timer, linear probing; NULL is an empty slot */
static size_t timer_table_capacity; /* a power of two, at least twice timer_count */
static unsigned timer_table_bits;   /* log2(timer_table_capacity) */
static loop_timer_id last_timer_id;
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

static bool fires_before(const loop_timer *a, const loop_timer *b)
{
    return a->due_ms != b->due_ms ? a->due_ms < b->due_ms : a->id < b->id;
}

static void heap_place(loop_timer *timer, size_t index)
{
    timer_heap[index] = timer;
    timer->heap_index = index;
}

static void heap_sift_up(size_t index)
{
    loop_timer *timer = timer_heap[index];
    while (index > 0) {
        size_t parent = (index - 1) / 2;
        if (!fires_before(timer, timer_heap[parent]))
            break;
        heap_place(timer_heap[parent], index);
        index = parent;
    }
    heap_place(timer, index);
}

static void heap_sift_down(size_t index)
{
    loop_timer *timer = timer_heap[index];
    for (;;) {
        size_t child = 2 * index + 1;
        if (child >= timer_count)
            break;
        if (child + 1 < timer_count && fires_before(timer_heap[child + 1], timer_heap[child]))
            child++;
        if (!fires_before(timer_heap[child], timer))
            break;
        heap_place(timer_heap[child], index);
        index = child;
    }
    heap_place(timer, index);
}

static void heap_remove(loop_timer *timer)
{
    size_t index = timer->heap_index;
    loop_timer *last = timer_heap[--timer_count];
    if (last == timer)
        return;
    heap_place(last, index);
    if (index > 0 && fires_before(last, timer_heap[(index - 1) / 2]))
        heap_sift_up(index);
    else
        heap_sift_down(index);
}

static size_t table_slot_of(loop_timer_id id)
{
    /* Fibonacci hashing: the top bits of id times 2^64/phi spread consecutive ids evenly */
    return (size_t)((id * 0x9E3779B97F4A7C15ULL) >> (64 - timer_table_bits));
}

static void table_insert(loop_timer *timer)
{
    size_t slot = table_slot_of(timer->id);
    while (timer_table[slot])
        slot = (slot + 1) & (timer_table_capacity - 1);
    timer_table[slot] = timer;
}

static size_t table_find(loop_timer_id id, bool *found)
{
    size_t slot = table_slot_of(id);
    for (size_t probes = 0; probes < timer_table_capacity; probes++) {
        if (!timer_table[slot])
            break;
        if (timer_table[slot]->id == id) {
            *found = true;
            return slot;
        }
        slot = (slot + 1) & (timer_table_capacity - 1);
    }
    *found = false;
    return 0;
}

/* Backward-shift deletion: later entries of the same probe run move up into the hole, so a
   lookup never stops early at an empty slot and no tombstones pile up. */
static void table_remove_slot(size_t hole)
{
    size_t mask = timer_table_capacity - 1;
    timer_table[hole] = NULL;
    for (size_t slot = (hole + 1) & mask; timer_table[slot]; slot = (slot + 1) & mask) {
        size_t home = table_slot_of(timer_table[slot]->id);
        bool home_between_hole_and_slot =
            hole <= slot ? (hole < home && home <= slot) : (hole < home || home <= slot);
        if (home_between_hole_and_slot)
            continue;
        timer_table[hole] = timer_table[slot];
        timer_table[slot] = NULL;
        hole = slot;
    }
}

static void *grow(void *array, size_t *capacity, size_t minimum, size_t element_size)
{
    size_t wanted = *capacity ? *capacity * 2 : minimum;
    void *grown = realloc(array, wanted * element_size);
    if (!grown)
        die("out of memory");
    *capacity = wanted;
    return grown;
}

static void table_grow(void)
{
    loop_timer **old = timer_table;
    size_t old_capacity = timer_table_capacity;
    timer_table_bits = old_capacity ? timer_table_bits + 1 : 6;
    timer_table_capacity = (size_t)1 << timer_table_bits;
    timer_table = calloc(timer_table_capacity, sizeof *timer_table);
    if (!timer_table)
        die("out of memory");
    for (size_t i = 0; i < old_capacity; i++)
        if (old[i])
            table_insert(old[i]);
    free(old);
}

loop_timer_id loop_timer_add(int64_t delay_ms, loop_callback callback, void *arg)
{
    loop_timer *timer = calloc(1, sizeof *timer);
    if (!timer)
        die("out of memory");
    timer->id = ++last_timer_id;
    timer->due_ms = clock_monotonic_ms() + delay_ms;
    timer->callback = callback;
    timer->arg = arg;
    if (timer_count == timer_heap_capacity)
        timer_heap = grow(timer_heap, &timer_heap_capacity, 64, sizeof *timer_heap);
    if (2 * (timer_count + 1) > timer_table_capacity)
        table_grow();
    heap_place(timer, timer_count++);
    heap_sift_up(timer->heap_index);
    table_insert(timer);
    return timer->id;
}

void loop_timer_cancel(loop_timer_id id)
{
    bool found = false;
    size_t slot = id && timer_table ? table_find(id, &found) : 0;
    if (!found)
        return; /* it fired, was cancelled already, or never was */
    loop_timer *timer = timer_table[slot];
    table_remove_slot(slot);
    heap_remove(timer);
    free(timer);
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
    while (timer_count && timer_heap[0]->due_ms <= now) {
        loop_timer *timer = timer_heap[0];
        bool found;
        table_remove_slot(table_find(timer->id, &found));
        heap_remove(timer);
        /* out of the heap and the table first: a cancel of its own id from the callback is a
           no-op */
        timer->callback(timer->arg);
        free(timer);
    }
}

static int next_timeout_ms(void)
{
    int64_t wait = -1;
    if (timer_count) {
        wait = timer_heap[0]->due_ms - clock_monotonic_ms();
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
