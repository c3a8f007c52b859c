/* box_fields — what a box holds, and the verbs its files share. They call each other one way:
 * box.c (the record, contexts, files, the end) uses pause.c (the cgroup freezer) and ttl.c (the
 * time to live), pause.c uses ttl.c, and each writes to box_log.c (the log); none calls back up.
 * Only these four include it; everything else goes through box.h, pause.h, ttl.h and box_log.h. */
#ifndef CELLBOX_MODEL_BOX_FIELDS_H
#define CELLBOX_MODEL_BOX_FIELDS_H

#include <stdbool.h>
#include <stdint.h>

#include "common/loop.h"
#include "model/box.h"
#include "model/box_log.h"
#include "sandbox/cgroup.h"

typedef struct box_context {
    kernel *k;
    char *cwd;
    /* Made by box_context_for_language: the context an execute naming its language (without a
       context id) runs in, as E2B's server keeps one per language. */
    bool language_default;
    struct box_context *next;
} box_context;

typedef struct log_entry {
    int64_t at_us;
    const char *source, *stream; /* static strings */
    char *text;
} log_entry;

struct box {
    kernel *primary;
    json_t *metadata;
    json_t *env;
    int timeout_s;             /* 0: never expires */
    int64_t started_at_us;
    int64_t ends_at_us;        /* 0 while it cannot expire (no TTL, or paused) */
    loop_timer_id ttl;
    bool expired;              /* its TTL ended: it is being removed for that */
    bool paused;
    bool pause_at_timeout;     /* E2B's lifecycle onTimeout 'pause': its TTL pauses it */
    bool auto_resume;          /* E2B's autoResume: a call into it while paused resumes it */
    /* box_pause, given by box.c: how ttl.c pauses the box at its timeout without calling up
       into pause.c, which calls ttl.c */
    int (*pause)(box *b, char *why, size_t why_size);
    char *hibernation_snapshot; /* hibernated: the snapshot it wakes from; NULL: awake */
    int64_t cpu_sampled_at_us; /* the last box_sample_usage (0: none yet) */
    long long cpu_sampled_us;  /* the group's CPU time then */
    box_context *contexts;     /* the contexts other than the default one */
    struct command *commands;  /* command.c's list */
    log_entry log[BOX_LOG_ENTRIES];
    size_t log_next, log_count;
    size_t log_bytes;          /* text held by the log, at most BOX_LOG_BYTES */
};

/* The sandbox's cgroup: its counters (usage) and its freezer (pause). */
static inline sandbox_cgroup *box_cgroup(const box *b) { return kernel_get_sandbox(b->primary)->cgroup; }

/* ttl.c: (re)starts the countdown from the box's timeout_s, or stops it while paused or without
   a timeout; puts back a deadline an earlier daemon recorded (wall-clock time); stops it for
   good when the box ends. */
void box_ttl_arm(box *b);
void box_ttl_restore(box *b, int64_t ends_at_us);
void box_ttl_cancel(box *b);

/* pause.c: a paused box's processes thawed, so that they can be killed when the box ends. */
void box_pause_thaw_for_end(box *b);

#endif
