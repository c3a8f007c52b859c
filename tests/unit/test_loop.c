/* The event loop (common/loop.c): watches deliver ready descriptors, timers fire in deadline order
   and are cancelled by id (a stale id cancels nothing, even once the allocation is reused), and
   deferred calls run in the order they were queued. Each test's loop is bounded by a guard timer
   that stops it and counts as a failure. */
#include <stdint.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "check.h"
#include "common/loop.h"

#define GUARD_MS 10000

static bool guard_fired;
static void on_guard(void *arg)
{
    guard_fired = true;
    loop_stop();
}

/* Runs the loop until a callback stops it, or the guard does (a failure). */
static void run_bounded(void)
{
    guard_fired = false;
    loop_timer_id guard = loop_timer_add(GUARD_MS, on_guard, NULL);
    loop_run();
    loop_timer_cancel(guard);
    CHECK(!guard_fired);
}

static void stop_loop(void *arg)
{
    loop_stop();
}

/* ---- watches ---- */

typedef struct pipe_reader {
    loop_watch watch;
    int reads;
    char last;
} pipe_reader;

static void on_readable(void *owner, uint32_t events)
{
    pipe_reader *reader = owner;
    if (read(reader->watch.fd, &reader->last, 1) == 1)
        reader->reads++;
    loop_stop();
}

static void test_a_watch_delivers_a_readable_pipe(void)
{
    int fds[2];
    CHECK(pipe(fds) == 0);
    pipe_reader reader = {0};
    loop_watch_add(&reader.watch, fds[0], EPOLLIN, on_readable, &reader);
    CHECK(write(fds[1], "x", 1) == 1);
    run_bounded();
    CHECK(reader.reads == 1);
    CHECK(reader.last == 'x');

    /* removed: a byte written afterwards reaches no handler (the 0 ms timer ends the turn) */
    loop_watch_remove(&reader.watch);
    CHECK(reader.watch.fd == -1);
    CHECK(write(fds[1], "y", 1) == 1);
    loop_timer_add(0, stop_loop, NULL);
    run_bounded();
    CHECK(reader.reads == 1);
    close(fds[0]);
    close(fds[1]);
}

/* ---- timers ---- */

#define MAX_FIRED 8192
static int fired[MAX_FIRED];
static int fired_count;

static void record(void *arg)
{
    if (fired_count < MAX_FIRED)
        fired[fired_count++] = (int)(intptr_t)arg;
}

static void record_then_stop(void *arg)
{
    record(arg);
    loop_stop();
}

static void test_timers_fire_in_deadline_order(void)
{
    fired_count = 0;
    /* past deadlines fire at the next turn, earliest first; equal delays in the order added */
    loop_timer_add(-3000, record, (void *)3);
    loop_timer_add(-9000, record, (void *)1);
    loop_timer_add(-6000, record, (void *)2);
    loop_timer_add(0, record, (void *)4);
    loop_timer_add(0, record, (void *)5);
    loop_timer_add(0, record_then_stop, (void *)6);
    run_bounded();
    CHECK(fired_count == 6);
    for (int i = 0; i < fired_count; i++)
        CHECK(fired[i] == i + 1);
}

static void test_a_cancelled_timer_never_fires(void)
{
    fired_count = 0;
    loop_timer_id first = loop_timer_add(0, record, (void *)1);
    loop_timer_id second = loop_timer_add(0, record, (void *)2);
    CHECK(first != 0 && second != 0 && first != second);
    loop_timer_cancel(first);
    loop_timer_cancel(first); /* twice: a no-op */
    loop_timer_cancel(0);     /* "no timer": a no-op */
    loop_timer_add(0, record_then_stop, (void *)3);
    run_bounded();
    CHECK(fired_count == 2);
    CHECK(fired[0] == 2);
    CHECK(fired[1] == 3);
}

static void test_a_stale_id_cancels_nothing_after_reuse(void)
{
    fired_count = 0;
    loop_timer_id fired_already = loop_timer_add(0, record_then_stop, (void *)1);
    run_bounded();
    loop_timer_id cancelled = loop_timer_add(60000, record, (void *)9);
    loop_timer_cancel(cancelled);
    /* the allocator likely hands these the memory the two above had: their old ids must not
       reach them */
    loop_timer_add(0, record, (void *)2);
    loop_timer_id newest = loop_timer_add(0, record_then_stop, (void *)3);
    CHECK(newest > fired_already && newest > cancelled);
    loop_timer_cancel(fired_already);
    loop_timer_cancel(cancelled);
    run_bounded();
    CHECK(fired_count == 3);
    CHECK(fired[1] == 2);
    CHECK(fired[2] == 3);
}

static loop_timer_id self_id;
static void cancel_self(void *arg)
{
    loop_timer_cancel(self_id); /* it is firing: a no-op, not a double free */
    record(arg);
    loop_stop();
}

static void test_a_timer_cancelling_itself_while_firing_is_a_no_op(void)
{
    fired_count = 0;
    self_id = loop_timer_add(0, cancel_self, (void *)1);
    run_bounded();
    CHECK(fired_count == 1);
}

/* Thousands pending (as the soak keeps), half cancelled in a scattered order: the rest fire
   once each, in deadline order. Deadlines a second apart in the past keep the order independent
   of how long the adding took. */
static void test_thousands_of_timers_keep_order_under_cancels(void)
{
    enum { COUNT = 4000 };
    static loop_timer_id ids[COUNT];
    fired_count = 0;
    for (int i = 0; i < COUNT; i++) {
        int rank = (i * 1237) % COUNT; /* 1237 is prime to 4000: a permutation */
        ids[i] = loop_timer_add(-1000LL * (COUNT - rank), record, (void *)(intptr_t)rank);
    }
    for (int i = 0; i < COUNT; i++)
        if (((i * 1237) % COUNT) % 2)
            loop_timer_cancel(ids[i]);
    loop_timer_add(0, record_then_stop, (void *)(intptr_t)COUNT);
    run_bounded();
    CHECK(fired_count == COUNT / 2 + 1);
    bool in_order = true;
    for (int i = 0; i < COUNT / 2; i++)
        in_order = in_order && fired[i] == 2 * i;
    CHECK(in_order);
    CHECK(fired[COUNT / 2] == COUNT);
}

/* ---- deferred calls ---- */

static void defer_more(void *arg)
{
    record(arg);
    loop_defer(record_then_stop, (void *)4); /* queued during the drain: runs in the same drain */
}

static void test_deferred_calls_run_in_the_order_queued(void)
{
    fired_count = 0;
    loop_defer(record, (void *)1);
    loop_defer(defer_more, (void *)2);
    loop_defer(record, (void *)3);
    run_bounded();
    CHECK(fired_count == 4);
    for (int i = 0; i < fired_count; i++)
        CHECK(fired[i] == i + 1);

    /* after the loop stopped: loop_run_deferred runs what is still queued */
    fired_count = 0;
    loop_defer(record, (void *)1);
    loop_defer(record, (void *)2);
    loop_run_deferred();
    CHECK(fired_count == 2 && fired[0] == 1 && fired[1] == 2);
}

static void defer_from_timer(void *arg)
{
    record(arg);
    loop_defer(record_then_stop, (void *)3);
}

static void test_a_call_deferred_by_a_timer_runs_after_that_turns_timers(void)
{
    fired_count = 0;
    loop_timer_add(-2000, defer_from_timer, (void *)1);
    loop_timer_add(-1000, record, (void *)2);
    run_bounded();
    CHECK(fired_count == 3);
    for (int i = 0; i < fired_count; i++)
        CHECK(fired[i] == i + 1);
}

int main(void)
{
    loop_init();
    loop_timer_cancel(42); /* before any timer exists: a no-op */
    RUN(test_a_watch_delivers_a_readable_pipe);
    RUN(test_timers_fire_in_deadline_order);
    RUN(test_a_cancelled_timer_never_fires);
    RUN(test_a_stale_id_cancels_nothing_after_reuse);
    RUN(test_a_timer_cancelling_itself_while_firing_is_a_no_op);
    RUN(test_thousands_of_timers_keep_order_under_cancels);
    RUN(test_deferred_calls_run_in_the_order_queued);
    RUN(test_a_call_deferred_by_a_timer_runs_after_that_turns_timers);
    return check_summary("loop");
}
