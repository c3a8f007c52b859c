/* hibernate — a sandbox kept only as a snapshot and its files: box_hibernate takes a snapshot
 * (snapshots.c), then ends every process of the sandbox (its cgroup killed: the memory is
 * freed) and answers once they are gone (its kernel reaped, its cgroup empty; a wake asked for
 * meanwhile starts then), and the box stays listed "hibernated" with the snapshot's id; box_wake
 * puts the contexts back in place (snapshot_restore.c, the files kept: they never left) and
 * removes the snapshot. A sandbox hibernates on request (POST /v1/sandboxes/{id}/hibernate), at the end of
 * its TTL when its lifecycle says 'pause' (E2B's onTimeout), and after --hibernate-idle seconds
 * without activity.
 *
 * Across a daemon restart: the hibernated box's kernel is dead, so the next daemon adopts
 * nothing and sweeps its pieces; hibernation_init finds the hibernation snapshots, makes each
 * sandbox again under its own id from the snapshot (its files included) and ends its processes
 * again: listed "hibernated", as it was. A hibernated sandbox that is deleted takes its snapshot
 * with it; one that ends with the daemon keeps it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/loop.h"
#include "model/manager.h"
#include "model/pause.h"
#include "model/snapshot_internal.h"
#include "model/snapshot_store.h"
#include "model/ttl.h"
#include "sandbox/cgroup.h"

#define IDLE_CHECK_MS 1000

typedef struct waiter {
    snapshot_done done;
    void *arg;
    struct waiter *next;
} waiter;

/* A hibernation or a wake under way, with whoever waits for it. */
typedef struct transition {
    box *b; /* NULL once it went away */
    bool waking;
    /* started by the daemon (TTL, idle), not a client: only if every context's live state is
       carried; otherwise the snapshot is dropped and the box left as it was (`declined`) */
    bool only_if_whole;
    void (*declined)(box *b);
    bool hibernated;           /* its snapshot is taken: it waits for its processes to end */
    loop_timer_id ended_timer; /* checks that they have */
    int ended_checks;          /* how many times so far */
    waiter *waiters;
    struct transition *next;
} transition;

static transition *transitions;
static int idle_seconds;
static loop_timer_id idle_timer;

bool box_is_hibernated(const box *b)
{
    return box_hibernation_snapshot(b) != NULL;
}

static transition *transition_of(box *b)
{
    for (transition *t = transitions; t; t = t->next)
        if (t->b == b)
            return t;
    return NULL;
}

static void add_waiter(transition *t, snapshot_done done, void *arg)
{
    waiter *w = calloc(1, sizeof *w);
    if (!w)
        die("out of memory");
    *w = (waiter){.done = done, .arg = arg, .next = t->waiters};
    t->waiters = w;
}

static transition *begin_transition(box *b, bool waking, snapshot_done done, void *arg)
{
    transition *t = calloc(1, sizeof *t);
    if (!t)
        die("out of memory");
    *t = (transition){.b = b, .waking = waking, .next = transitions};
    transitions = t;
    add_waiter(t, done, arg);
    return t;
}

/* Every waiter answered, then the transition forgotten. */
static void end_transition(transition *t, json_t *result, failure_kind failure, const char *why)
{
    for (transition **at = &transitions; *at; at = &(*at)->next)
        if (*at == t) {
            *at = t->next;
            break;
        }
    loop_timer_cancel(t->ended_timer);
    while (t->waiters) {
        waiter *w = t->waiters;
        t->waiters = w->next;
        if (w->done)
            w->done(w->arg, result, failure, why);
        free(w);
    }
    free(t);
}

/* An answer given from the loop, as every snapshot_done is. */
typedef struct deferred_answer {
    box *b;
    snapshot_done done;
    void *arg;
} deferred_answer;

static void give_model(void *arg)
{
    deferred_answer *a = arg;
    json_t *model = box_model(a->b);
    if (a->done)
        a->done(a->arg, model, FAILURE_INTERNAL, NULL);
    json_decref(model);
    free(a);
}

static void answer_later(box *b, snapshot_done done, void *arg)
{
    deferred_answer *a = calloc(1, sizeof *a);
    if (!a)
        die("out of memory");
    *a = (deferred_answer){.b = b, .done = done, .arg = arg};
    loop_defer(give_model, a);
}

/* ---- hibernating ---- */

/* Every process of b ends (its memory with them); the box keeps its files and its record. */
static void end_processes(box *b, const char *snapshot_id)
{
    json_t *contexts = box_contexts_model(b);
    for (size_t i = 1; i < json_array_size(contexts); i++) {
        const char *id = json_string_value(json_object_get(json_array_get(contexts, i), "id"));
        kernel *context = box_find_context(b, id);
        if (context)
            box_delete_context(b, context); /* the snapshot starts them again at the wake */
    }
    json_decref(contexts);
    box_set_timeout(b, 0); /* a hibernated sandbox does not expire; its TTL is in the snapshot */
    box_set_hibernation(b, snapshot_id); /* first: the kernel's death that follows is on purpose */
    const kernel_sandbox *sandbox = kernel_get_sandbox(box_default_kernel(b));
    if (sandbox->cgroup)
        cgroup_kill_all(sandbox->cgroup);
}

/* Did the snapshot carry every context's live state (its process or its namespace)? */
static bool carries_every_context(json_t *snapshot)
{
    size_t i;
    json_t *context;
    json_array_foreach(json_object_get(snapshot, "contexts"), i, context)
    {
        const char *carried = json_string_value(json_object_get(context, "carried"));
        if (!carried || strcmp(carried, "restarted") == 0)
            return false;
    }
    return true;
}

/* The answer waits until the sandbox's processes are gone: a client reading "hibernated" finds no
   process of it left (SIGKILL is sent at once, but a large process takes a while to exit and
   free its memory). Checked every ENDED_CHECK_MS, at most ENDED_CHECK_LIMIT times; a process
   still there after that (stuck in the kernel) is logged, and the answer goes out anyway: the
   sandbox is hibernated, its snapshot taken. */
#define ENDED_CHECK_MS 5
#define ENDED_CHECK_LIMIT 2000

/* Its kernel reaped (pid 1 of the sandbox, the daemon's child: no zombie left of it) and its
   cgroup empty (every process in it gone). */
static bool processes_ended(box *b)
{
    kernel *k = box_default_kernel(b);
    const kernel_sandbox *sandbox = kernel_get_sandbox(k);
    return kernel_get_state(k) == KERNEL_DEAD &&
           (!sandbox->cgroup || cgroup_is_empty(sandbox->cgroup));
}

static void check_ended(void *arg)
{
    transition *t = arg;
    t->ended_timer = 0;
    if (!t->b) {
        end_transition(t, NULL, FAILURE_CONFLICT, "the sandbox was deleted while it hibernated");
        return;
    }
    if (!processes_ended(t->b) && ++t->ended_checks < ENDED_CHECK_LIMIT) {
        t->ended_timer = loop_timer_add(ENDED_CHECK_MS, check_ended, t);
        return;
    }
    if (!processes_ended(t->b))
        log_warn("sandbox %s hibernated, but a process of it is still there after %d s",
                 box_id(t->b), ENDED_CHECK_MS * ENDED_CHECK_LIMIT / 1000);
    json_t *model = box_model(t->b);
    end_transition(t, model, FAILURE_INTERNAL, NULL);
    json_decref(model);
}

static void answer_when_ended(transition *t)
{
    t->hibernated = true;
    t->ended_checks = 0;
    check_ended(t);
}

static void on_hibernation_snapshot(void *arg, json_t *snapshot, failure_kind failure,
                                    const char *why)
{
    transition *t = arg;
    if (snapshot && t->b && t->only_if_whole && !carries_every_context(snapshot)) {
        /* the daemon's own decision must never lose a variable: the box stays as it was */
        snapshot_store_remove(json_string_value(json_object_get(snapshot, "snapshot_id")));
        log_info("sandbox %s not hibernated: a context's live state cannot be carried",
                 box_id(t->b));
        if (t->declined)
            t->declined(t->b);
        end_transition(t, NULL, FAILURE_CONFLICT,
                       "a context's live state cannot be carried: it was not hibernated");
        return;
    }
    if (!snapshot || !t->b) {
        if (snapshot) /* the box went away meanwhile: its snapshot is nobody's */
            snapshot_store_remove(json_string_value(json_object_get(snapshot, "snapshot_id")));
        end_transition(t, NULL, snapshot ? FAILURE_CONFLICT : failure,
                       snapshot ? "the sandbox was deleted while it hibernated" : why);
        return;
    }
    const char *snapshot_id = json_string_value(json_object_get(snapshot, "snapshot_id"));
    end_processes(t->b, snapshot_id);
    log_info("sandbox %s hibernated (snapshot %s)", box_id(t->b), snapshot_id);
    answer_when_ended(t);
}

static int hibernate(box *b, bool only_if_whole, void (*declined)(box *b), snapshot_done done,
                     void *arg, failure_kind *failure, char *why, size_t why_size)
{
    transition *t = transition_of(b);
    if (t && !t->waking) { /* already on its way: one more waiter */
        add_waiter(t, done, arg);
        return 0;
    }
    if (t) {
        *failure = FAILURE_CONFLICT;
        snprintf(why, why_size, "sandbox %s is waking from hibernation: try again once it has",
                 box_id(b));
        return -1;
    }
    if (box_is_hibernated(b)) {
        answer_later(b, done, arg);
        return 0;
    }
    t = begin_transition(b, false, done, arg);
    t->only_if_whole = only_if_whole;
    t->declined = declined;
    if (snapshot_take(b, NULL, NULL, true, on_hibernation_snapshot, t, failure, why, why_size) <
        0) {
        t->waiters->done = NULL; /* answered by the -1 */
        end_transition(t, NULL, *failure, why);
        return -1;
    }
    return 0;
}

int box_hibernate(box *b, snapshot_done done, void *arg, failure_kind *failure, char *why,
                  size_t why_size)
{
    return hibernate(b, false, NULL, done, arg, failure, why, why_size);
}

/* ---- waking ---- */

static void on_woken(void *arg, json_t *restored, failure_kind failure, const char *why)
{
    transition *t = arg;
    if (!t->b) {
        end_transition(t, NULL, FAILURE_CONFLICT, "the sandbox was deleted while it woke");
        return;
    }
    if (!restored) {
        end_transition(t, NULL, failure, why);
        return;
    }
    char snapshot_id[64];
    snprintf(snapshot_id, sizeof snapshot_id, "%s", box_hibernation_snapshot(t->b));
    failure_kind load_failure;
    char load_why[300];
    json_t *description =
        snapshot_store_load(snapshot_id, false, &load_failure, load_why, sizeof load_why);
    json_t *settings = json_object_get(description, "sandbox");
    box_set_hibernation(t->b, NULL);
    box_set_timeout(t->b, (int)json_integer_value(json_object_get(settings, "timeout_s")));
    json_decref(description);
    snapshot_store_remove(snapshot_id); /* its state is live again */
    log_info("sandbox %s woken from snapshot %s", box_id(t->b), snapshot_id);
    json_t *model = box_model(t->b);
    json_object_set(model, "restore", json_object_get(restored, "restore"));
    end_transition(t, model, FAILURE_INTERNAL, NULL);
    json_decref(model);
}

/* A wake asked for while the hibernation's processes were still ending: it starts when the
   hibernation has answered (a request into the sandbox at that moment wakes it, as any other). */
typedef struct wake_after {
    char box_id[64];
    snapshot_done done;
    void *arg;
} wake_after;

static void wake_after_hibernation(void *arg, json_t *hibernated, failure_kind failure,
                                   const char *why)
{
    wake_after *later = arg;
    box *b = box_find(later->box_id);
    char wake_why[600];
    failure_kind wake_failure = FAILURE_CONFLICT;
    if (!b)
        snprintf(wake_why, sizeof wake_why, "the sandbox was deleted while it hibernated");
    else if (box_wake(b, later->done, later->arg, &wake_failure, wake_why, sizeof wake_why) == 0)
        wake_why[0] = '\0';
    if (wake_why[0] && later->done)
        later->done(later->arg, NULL, wake_failure, wake_why);
    free(later);
}

int box_wake(box *b, snapshot_done done, void *arg, failure_kind *failure, char *why,
             size_t why_size)
{
    transition *t = transition_of(b);
    if (t && t->waking) {
        add_waiter(t, done, arg);
        return 0;
    }
    if (t && t->hibernated) { /* its processes still ending: woken once they have */
        wake_after *later = calloc(1, sizeof *later);
        if (!later)
            die("out of memory");
        snprintf(later->box_id, sizeof later->box_id, "%s", box_id(b));
        later->done = done;
        later->arg = arg;
        add_waiter(t, wake_after_hibernation, later);
        return 0;
    }
    if (t) {
        *failure = FAILURE_CONFLICT;
        snprintf(why, why_size, "sandbox %s is hibernating: wake it once it has", box_id(b));
        return -1;
    }
    if (!box_is_hibernated(b)) {
        answer_later(b, done, arg);
        return 0;
    }
    t = begin_transition(b, true, done, arg);
    if (snapshot_restore_in_place(box_hibernation_snapshot(b), b, true, on_woken, t, failure, why,
                                  why_size) < 0) {
        t->waiters->done = NULL;
        end_transition(t, NULL, *failure, why);
        return -1;
    }
    return 0;
}

/* ---- at its TTL's end, and when idle ---- */

static void log_outcome(void *arg, json_t *result, failure_kind failure, const char *why)
{
    if (!result && failure != FAILURE_CONFLICT)
        log_warn("sandbox %s could not hibernate: %s", (char *)arg, why);
    free(arg);
}

static int hibernate_in_background(box *b, void (*declined)(box *b))
{
    char why[512];
    failure_kind failure;
    char *id = strdup(box_id(b));
    if (!id)
        die("out of memory");
    if (hibernate(b, true, declined, log_outcome, id, &failure, why, sizeof why) < 0) {
        log_warn("sandbox %s could not hibernate: %s", id, why);
        free(id);
        return -1;
    }
    return 0;
}

/* Its TTL ended but its live state cannot be carried: frozen, as before hibernation. */
static void freeze_instead(box *b)
{
    char why[256];
    if (box_pause(b, why, sizeof why) < 0)
        log_warn("sandbox %s could not be paused at its timeout: %s", box_id(b), why);
}

/* E2B's onTimeout 'pause' hibernates: the memory is freed, not kept in a frozen cgroup. A
   sandbox that cannot be (a cell running, a context whose state cannot be carried) is frozen as
   before. */
static int pause_at_timeout(box *b, char *why, size_t why_size)
{
    if (hibernate_in_background(b, freeze_instead) == 0)
        return 0;
    return box_pause(b, why, why_size);
}

/* Idle, but its live state cannot be carried: left running, its idle time counted again from
   now (not tried again every second). */
static void stay_awake(box *b)
{
    kernel_touch(box_default_kernel(b));
}

static bool is_idle_enough(box *b, int64_t now_us)
{
    if (box_get_state(b) != BOX_RUNNING || transition_of(b))
        return false;
    json_t *contexts = box_contexts_model(b);
    bool idle = true;
    for (size_t i = 0; idle && i < json_array_size(contexts); i++) {
        const char *id = json_string_value(json_object_get(json_array_get(contexts, i), "id"));
        kernel *k = box_find_context(b, id);
        idle = k && kernel_get_state(k) == KERNEL_IDLE && kernel_connection_count(k) == 0 &&
               now_us - kernel_last_activity_us(k) >= (int64_t)idle_seconds * 1000000;
    }
    json_decref(contexts);
    return idle;
}

static void check_idle(void *arg)
{
    int64_t now = clock_wall_us();
    for (size_t i = 0; i < manager_count(); i++) {
        box *b = kernel_box(manager_at(i));
        if (b && is_idle_enough(b, now)) {
            log_info("sandbox %s idle for %d s: hibernating", box_id(b), idle_seconds);
            if (hibernate_in_background(b, stay_awake) < 0)
                stay_awake(b);
        }
    }
    idle_timer = loop_timer_add(IDLE_CHECK_MS, check_idle, NULL);
}

void snapshots_set_hibernate_idle(int seconds)
{
    idle_seconds = seconds;
    if (idle_timer)
        loop_timer_cancel(idle_timer);
    idle_timer = seconds > 0 ? loop_timer_add(IDLE_CHECK_MS, check_idle, NULL) : 0;
}

/* ---- a box that goes away ---- */

static void on_box_gone(box *b)
{
    for (transition *t = transitions; t; t = t->next)
        if (t->b == b)
            t->b = NULL;
    /* Deleted while hibernated: its snapshot goes with it. Ended with the daemon: kept, and
       the next daemon lists the sandbox again. */
    const char *snapshot_id = box_hibernation_snapshot(b);
    if (snapshot_id && !manager_is_ending() && snapshot_store_remove(snapshot_id) < 0 &&
        errno != ENOENT)
        log_warn("cannot remove snapshot %s of deleted sandbox %s: %s", snapshot_id, box_id(b),
                 strerror(errno));
}

/* ---- after a daemon restart ---- */

static void on_relisted(void *arg, json_t *restored, failure_kind failure, const char *why)
{
    char *snapshot_id = arg;
    const char *sandbox_id = json_string_value(json_object_get(restored, "id"));
    box *b = sandbox_id ? box_find(sandbox_id) : NULL;
    if (!b)
        log_warn("hibernated sandbox of snapshot %s could not be listed again: %s", snapshot_id,
                 why ? why : "it went away");
    else
        end_processes(b, snapshot_id); /* hibernated again, as the earlier daemon left it */
    free(snapshot_id);
}

static void relist(const char *snapshot_id, json_t *description, void *arg)
{
    json_t *model = json_object_get(description, "model");
    const char *sandbox_id = json_string_value(json_object_get(model, "sandbox_id"));
    if (!json_is_true(json_object_get(model, "hibernation")) || !sandbox_id || box_find(sandbox_id))
        return;
    char why[512];
    failure_kind failure;
    char *id = strdup(snapshot_id);
    if (!id)
        die("out of memory");
    if (snapshot_restore_new(snapshot_id, sandbox_id, NULL, on_relisted, id, &failure, why,
                             sizeof why) < 0) {
        log_warn("hibernated sandbox %s (snapshot %s) cannot be listed again: %s", sandbox_id,
                 snapshot_id, why);
        free(id);
    }
}

void hibernation_init(void)
{
    box_add_box_gone_hook(on_box_gone);
    box_set_timeout_pause_action(pause_at_timeout);
    snapshot_store_each(relist, NULL);
}
