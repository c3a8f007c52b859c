#include "model/prepared.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/loop.h"
#include "common/worker.h"
#include "model/templates.h"
#include "sandbox/volume.h"
#include "sandbox/volume_worker.h"

#define PREPARED_AHEAD 2
#define PREPARE_DELAY_MS 50    /* after a start: the new kernel and its client go first */
#define PREPARE_RETRY_MS 1000  /* after a failure: a create will say why */

typedef enum set_state { SET_EMPTY, SET_MAKING, SET_READY } set_state;

typedef struct prepared_set {
    set_state state;
    char id[UUID_STRING_LENGTH + 1];
    sandbox_pieces pieces;
} prepared_set;

static sandbox_limits default_limits;
static volume_kind workspace_kind;
static bool keep_workspaces;
static prepared_set prepared[PREPARED_AHEAD];
static loop_timer_id prepare_timer;
static bool stopped; /* prepared_discard_all ran: the daemon ends (or detaches) */

static void schedule_prepare(int64_t delay_ms);

static bool preparing_off_loop(void) { return volume_worker_running(); } /* ext4 only */

static void forget_set(prepared_set *set)
{
    char *workspace = sandbox_pieces_path("workspaces", set->id, "");
    sandbox_pieces_release(&set->pieces, workspace, false); /* never used: nothing to keep */
    free(workspace);
    set->state = SET_EMPTY;
}

static void on_prepared_volume(void *arg, bool ok, const char *why)
{
    prepared_set *set = arg;
    if (set->state != SET_MAKING)
        return; /* discarded meanwhile: its removal was sent after its creation */
    char reason[512];
    if (ok && sandbox_pieces_create_cgroup(set->id, &default_limits, &set->pieces, reason,
                                           sizeof reason) == 0) {
        set->state = SET_READY;
        return;
    }
    log_debug("cannot prepare a sandbox ahead: %s", ok ? reason : why);
    forget_set(set);
    schedule_prepare(PREPARE_RETRY_MS);
}

static void prepare_next(void *arg)
{
    (void)arg;
    prepare_timer = 0;
    for (size_t i = 0; i < PREPARED_AHEAD; i++) {
        prepared_set *set = &prepared[i];
        if (set->state != SET_EMPTY)
            continue;
        char why[512];
        id_uuid4(set->id);
        set->pieces = SANDBOX_PIECES_NONE;
        char *workspace = sandbox_pieces_path("workspaces", set->id, "");
        sandbox_pieces *pieces = &set->pieces;
        uid_t uid = 0;
        bool claimed = sandbox_pieces_claim_identity(set->id, pieces, why, sizeof why) == 0;
        if (claimed)
            uid = sandbox_pieces_uid(pieces);
        if (claimed && preparing_off_loop() &&
            volume_worker_create(workspace_kind, pieces->image, workspace,
                                 default_limits.disk_bytes, uid, uid, on_prepared_volume, set)) {
            set->state = SET_MAKING;
            free(workspace);
            continue;
        }
        /* In the loop: one set, and only one in all (the loop is blocked while it is made). */
        if (claimed && sandbox_pieces_build(set->id, &default_limits, pieces, workspace, why,
                                            sizeof why) == 0) {
            set->state = SET_READY;
        } else {
            log_debug("cannot prepare the next sandbox ahead: %s", why); /* a create will say why */
            sandbox_pieces_release(pieces, workspace, false);
        }
        free(workspace);
        return;
    }
}

static size_t sets_in(set_state state)
{
    size_t count = 0;
    for (size_t i = 0; i < PREPARED_AHEAD; i++)
        count += prepared[i].state == state;
    return count;
}

static void schedule_prepare(int64_t delay_ms)
{
    if (prepare_timer)
        return;
    if (preparing_off_loop() ? sets_in(SET_EMPTY) > 0
                             : kernelspec_pool_total() == 0 && sets_in(SET_READY) == 0)
        prepare_timer = loop_timer_add(delay_ms, prepare_next, NULL);
}

void prepared_init(const sandbox_limits *limits, volume_kind kind, bool keep)
{
    default_limits = *limits;
    workspace_kind = kind;
    keep_workspaces = keep;
    schedule_prepare(0);
}

/* A prepared set if one fits these limits (its id into `id`); false otherwise. */
static bool take_prepared(const sandbox_limits *limits, char *id, sandbox_pieces *pieces)
{
    if (!limits_equal(limits, &default_limits, LIMITS_OF_CGROUP_AND_VOLUME))
        return false;
    for (size_t i = 0; i < PREPARED_AHEAD; i++) {
        if (prepared[i].state != SET_READY)
            continue;
        prepared[i].state = SET_EMPTY;
        memcpy(id, prepared[i].id, sizeof prepared[i].id);
        *pieces = prepared[i].pieces;
        prepared[i].pieces = SANDBOX_PIECES_NONE;
        return true;
    }
    return false;
}

void prepared_discard_all(void)
{
    stopped = true;
    if (prepare_timer)
        loop_timer_cancel(prepare_timer);
    prepare_timer = 0;
    for (size_t i = 0; i < PREPARED_AHEAD; i++)
        if (prepared[i].state != SET_EMPTY)
            forget_set(&prepared[i]); /* one still being made: its removal follows its creation */
}

/* The sandbox's pieces in the order they are needed: identity, disk, cgroup. */
static int make_pieces(const char *id, const sandbox_limits *limits, sandbox_pieces *pieces,
                       const char *workspace, char *why, size_t why_size)
{
    if (sandbox_pieces_claim_identity(id, pieces, why, why_size) < 0)
        return -1;
    return sandbox_pieces_build(id, limits, pieces, workspace, why, why_size);
}

/* A snapshot's or a fork's files, given to the new sandbox's user. */
static int seed_files(const char *from, const char *workspace, uid_t uid, char *why,
                      size_t why_size)
{
    volume_copy_stats stats = {0};
    return volume_copy_tree(from, workspace, uid, (gid_t)uid, &stats, why, why_size);
}

/* Starts the kernel on pieces made (seeded: its files are in place, the template's not needed);
   NULL with `why`. The caller releases the pieces on failure. */
static kernel *start_on(const kernelspec *spec, json_t *env, const sandbox_limits *limits,
                        const rootfs_volumes *volumes, const char *id, sandbox_pieces *pieces,
                        const char *workspace, bool seeded, int restore_image_fd, char *why,
                        size_t why_size)
{
    kernel_sandbox sandbox = {.uid = sandbox_pieces_uid(pieces),
                              .cgroup = pieces->cgroup,
                              .limits = *limits,
                              .restore = restore_image_fd >= 0,
                              .restore_image_fd = restore_image_fd};
    if (volumes)
        sandbox.volumes = *volumes;
    sandbox_pieces_base(&sandbox);
    if (sandbox_pieces_open_volume_views(id, sandbox.uid, &sandbox.volumes, why, why_size) < 0)
        return NULL;
    if (spec->template.view && !seeded && /* the snapshot's files hold the template's */
        templates_seed_workspace(spec->template.view, workspace, sandbox.uid, why, why_size) < 0)
        return NULL;
    return kernel_start(id, spec, workspace, env, &sandbox, why, why_size);
}

/* The sandbox's id (seed_id, a prepared set's, or a new one) and pieces; 0, or -1 with `why`
   and nothing left. */
static int make_sandbox(const sandbox_limits *limits, const char *seed_id, char *id,
                        sandbox_pieces *pieces, char *why, size_t why_size)
{
    *pieces = SANDBOX_PIECES_NONE;
    if (!seed_id && take_prepared(limits, id, pieces))
        return 0;
    if (seed_id)
        snprintf(id, UUID_STRING_LENGTH + 1, "%s", seed_id);
    else
        id_uuid4(id);
    char *path = sandbox_pieces_path("workspaces", id, "");
    int rc = make_pieces(id, limits, pieces, path, why, why_size);
    if (rc < 0)
        sandbox_pieces_release(pieces, path, keep_workspaces);
    free(path);
    return rc;
}

kernel *prepared_start_kernel(const kernelspec *spec, json_t *env, const sandbox_limits *limits,
                              const rootfs_volumes *volumes, const char *seed_id,
                              const char *seed_workspace,
                              int restore_image_fd, sandbox_pieces *pieces, char *why,
                              size_t why_size)
{
    char id[UUID_STRING_LENGTH + 1];
    kernel *k = NULL;
    if (make_sandbox(limits, seed_id, id, pieces, why, why_size) == 0) {
        char *workspace = sandbox_pieces_path("workspaces", id, "");
        if (!seed_workspace ||
            seed_files(seed_workspace, workspace, sandbox_pieces_uid(pieces), why, why_size) == 0)
            k = start_on(spec, env, limits, volumes, id, pieces, workspace, seed_workspace != NULL,
                         restore_image_fd, why, why_size);
        if (!k)
            sandbox_pieces_release(pieces, workspace, keep_workspaces);
        free(workspace);
    }
    schedule_prepare(PREPARE_DELAY_MS);
    return k;
}

/* ---- a start whose files are copied off the loop ---- */

typedef struct seeded_start {
    const kernelspec *spec;
    json_t *env; /* held */
    sandbox_limits limits;
    char id[UUID_STRING_LENGTH + 1];
    sandbox_pieces pieces;
    char *workspace;
    int restore_image_fd; /* the caller's, valid until `started` */
    int from_fd, to_fd;   /* the task's own: the seed's folder and the new workspace */
    prepared_started started;
    void *arg;
    int rc;        /* the thread's outcome */
    char why[600]; /* with rc -1 */
} seeded_start;

static void copy_seed(void *arg) /* on a worker thread */
{
    seeded_start *start = arg;
    volume_copy_stats stats = {0};
    uid_t uid = sandbox_pieces_uid(&start->pieces);
    start->rc = volume_copy_tree_at(start->from_fd, start->to_fd, uid, (gid_t)uid, &stats,
                                    start->why, sizeof start->why);
}

static void seed_copied(void *arg) /* on the loop */
{
    seeded_start *start = arg;
    close(start->from_fd);
    close(start->to_fd);
    kernel *k = NULL;
    char why[sizeof start->why];
    snprintf(why, sizeof why, "%s", start->why);
    if (start->rc == 0 && stopped)
        snprintf(why, sizeof why, "the daemon is shutting down: try again once it is back");
    else if (start->rc == 0)
        k = start_on(start->spec, start->env, &start->limits, NULL, start->id, &start->pieces,
                     start->workspace, true, start->restore_image_fd, why, sizeof why);
    if (!k)
        sandbox_pieces_release(&start->pieces, start->workspace, keep_workspaces);
    start->started(start->arg, k, &start->pieces, k ? NULL : why);
    if (!stopped)
        schedule_prepare(PREPARE_DELAY_MS);
    json_decref(start->env);
    free(start->workspace);
    free(start);
}

int prepared_start_kernel_later(const kernelspec *spec, json_t *env, const sandbox_limits *limits,
                                const char *seed_id, const char *seed_workspace,
                                int restore_image_fd, prepared_started started, void *arg,
                                char *why, size_t why_size)
{
    seeded_start *start = calloc(1, sizeof *start);
    if (!start)
        die("out of memory");
    if (make_sandbox(limits, seed_id, start->id, &start->pieces, why, why_size) < 0) {
        free(start);
        return -1;
    }
    start->workspace = sandbox_pieces_path("workspaces", start->id, "");
    /* Opened here, used there: a sandbox removed meanwhile only detaches its workspace lazily, so
       the copy lands in a volume nobody sees and that goes with the task's descriptor. */
    start->from_fd = open(seed_workspace, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    start->to_fd = start->from_fd < 0 ? -1
                                      : open(start->workspace,
                                             O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (start->to_fd < 0) {
        snprintf(why, why_size, "cannot open %s: %s",
                 start->from_fd < 0 ? seed_workspace : start->workspace, strerror(errno));
        if (start->from_fd >= 0)
            close(start->from_fd);
        sandbox_pieces_release(&start->pieces, start->workspace, keep_workspaces);
        free(start->workspace);
        free(start);
        return -1;
    }
    start->spec = spec;
    start->env = json_incref(env);
    start->limits = *limits;
    start->restore_image_fd = restore_image_fd;
    start->started = started;
    start->arg = arg;
    worker_submit(copy_seed, seed_copied, start);
    return 0;
}
