#include "model/manager.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/descriptors.h"
#include "common/fs.h"
#include "common/heap.h"
#include "common/log.h"
#include "common/text.h"
#include "kernel/keeper.h"
#include "kernel/kernelspec.h"
#include "model/pool.h"
#include "model/prepared.h"
#include "model/registry.h"
#include "model/sandbox_pieces.h"

static manager_options options;
static kernel **kernels;
static sandbox_pieces *pieces_of_kernels; /* parallel to kernels */
static size_t kernel_count, kernel_capacity;
static void (*delete_hook)(kernel *k);

static void on_kernel_started(kernel *k);

/* Sandboxes stop before the daemon's open files run out, so that client connections (kept
   their own share, see main.c) and the sandboxes already running keep working. */
bool manager_has_room(size_t pooled)
{
    char why[400];
    return (options.max_kernels <= 0 || kernel_count + pooled < (size_t)options.max_kernels) &&
           descriptors_available(DESCRIPTORS_PER_SANDBOX, why, sizeof why);
}

void manager_init(const manager_options *opts)
{
    options = *opts;
    char path[4096];
    snprintf(path, sizeof path, "%s/workspaces", options.data_dir);
    if (fs_mkdir_p(path, 0700) < 0)
        die("cannot create the data directory %s: %s (choose another with --data-dir)", path,
            strerror(errno));
    snprintf(path, sizeof path, "%s/volumes", options.data_dir);
    if (fs_mkdir_p(path, 0700) < 0)
        die("cannot create %s: %s", path, strerror(errno));
    snprintf(path, sizeof path, "%s/volume-views", options.data_dir);
    if (fs_mkdir_p(path, 0700) < 0)
        die("cannot create %s: %s", path, strerror(errno));
    sandbox_pieces_init(options.data_dir, options.workspace_kind, options.first_uid);
    if (registry_init(options.data_dir) < 0)
        die("cannot create %s/sandboxes: %s", options.data_dir, strerror(errno));
    kernel_set_started_hook(on_kernel_started);
}

void manager_set_delete_hook(void (*hook)(kernel *k)) { delete_hook = hook; }
const char *manager_default_kernel(void) { return options.default_kernel; }
size_t manager_count(void) { return kernel_count; }
kernel *manager_at(size_t index) { return index < kernel_count ? kernels[index] : NULL; }

kernel *manager_find(const char *id)
{
    for (size_t i = 0; i < kernel_count; i++)
        if (strcmp(kernel_id(kernels[i]), id) == 0)
            return kernels[i];
    return NULL;
}

static sandbox_pieces *pieces_of(const kernel *k)
{
    for (size_t i = 0; i < kernel_count; i++)
        if (kernels[i] == k)
            return &pieces_of_kernels[i];
    return NULL;
}

void manager_record(kernel *k)
{
    sandbox_pieces *pieces = pieces_of(k);
    if (pieces)
        sandbox_pieces_record(pieces, k);
}

int manager_set_egress(kernel *k, json_t *allow_out, json_t *deny_out, char *why, size_t why_size)
{
    if (kernel_set_egress(k, allow_out, deny_out, why, why_size) < 0)
        return -1;
    manager_record(k);
    return 0;
}

/* The keeper holds the daemon's ends of a handed-out kernel's channel and pipes, so that they
   outlive the daemon (keeper.h). */
void manager_keep_channels(kernel *k)
{
    int fds[KEEPER_FDS];
    kernel_daemon_fds(k, fds);
    keeper_hold(kernel_id(k), fds);
}

/* A handed-out kernel, or another context of its sandbox, got a (new) process: its pid is
   recorded and its channels kept. Warm-pool kernels are neither. */
static void on_kernel_started(kernel *k)
{
    const kernel *host = kernel_get_sandbox(k)->host;
    sandbox_pieces *pieces = pieces_of(host ? host : k);
    if (!pieces)
        return;
    manager_keep_channels(k);
    sandbox_pieces_record(pieces, pieces->kernel);
}

static void remember(kernel *k, const sandbox_pieces *pieces)
{
    if (kernel_count == kernel_capacity) {
        kernel_capacity = kernel_capacity ? kernel_capacity * 2 : 16;
        kernels = realloc(kernels, kernel_capacity * sizeof *kernels);
        pieces_of_kernels = realloc(pieces_of_kernels, kernel_capacity * sizeof *pieces_of_kernels);
        if (!kernels || !pieces_of_kernels)
            die("out of memory");
    }
    kernels[kernel_count] = k;
    pieces_of_kernels[kernel_count] = *pieces;
    pieces_of_kernels[kernel_count].kernel = k;
    kernel_count++;
    sandbox_pieces_record(pieces, k);
    manager_keep_channels(k);
}

/* ---- creation ---- */

/* A warm-pool kernel for the request in *taken (NULL: none ready). -1 with `why` when one was
   taken but could not be given the network asked for: it is discarded, never handed out without
   it. */
static int take_from_pool(const kernelspec *spec, json_t *env, const sandbox_limits *limits,
                          sandbox_pieces *pieces, kernel **taken, char *why, size_t why_size)
{
    kernel *k = *taken = pool_take(spec, pieces);
    if (!k)
        return 0;
    if (limits->network && kernel_give_network(k, why, why_size) < 0) {
        char *workspace = strdup(kernel_workspace(k));
        log_warn("kernel %s from the warm pool discarded: %s", kernel_id(k), why);
        kernel_destroy(k);
        sandbox_pieces_release(pieces, workspace, options.keep_workspaces);
        free(workspace);
        *taken = NULL;
        char reason[400];
        snprintf(reason, sizeof reason, "%s", why);
        snprintf(why, why_size, "the sandbox's network could not be set up: %s; or create it "
                 "without network", reason);
        return -1;
    }
    kernel_set_environment(k, env); /* as if it had started with the request's variables */
    kernel_touch(k);
    return 0;
}

static bool ending;     /* manager_shutdown_all has begun */
static size_t creating; /* sandboxes whose files are being copied before their kernel starts */

/* The request's kernelspec, with its limits in *limits, if a new sandbox may be made for it;
   NULL with the failure and why. */
static const kernelspec *admit(const char *spec_name, json_t *env, json_t *requested_limits,
                               json_t *network, sandbox_limits *limits, failure_kind *failure,
                               char *why, size_t why_size)
{
    const kernelspec *spec = kernelspec_find(spec_name ? spec_name : options.default_kernel);
    if (!spec) {
        *failure = FAILURE_NOT_FOUND;
        /* cut at a character: why is a fixed buffer, and a name cut mid-character made an
           error that jansson refused (the daemon died encoding it) */
        snprintf(why, why_size, "No such kernel named %.*s", text_utf8_prefix(spec_name, 200),
                 spec_name);
        return NULL;
    }
    if (options.max_kernels > 0 && kernel_count + creating >= (size_t)options.max_kernels) {
        *failure = FAILURE_FORBIDDEN;
        snprintf(why, why_size, "Resource Limit: maximum number of kernels (%d) reached; delete a "
                 "kernel or raise --max-kernels", options.max_kernels);
        return NULL;
    }
    if (!descriptors_available(DESCRIPTORS_PER_SANDBOX, why, why_size)) {
        *failure = FAILURE_EXHAUSTED;
        return NULL;
    }
    if (limits_from_request(requested_limits, network, env, &options.default_limits,
                            &options.max_limits, options.allow_network, limits, failure, why,
                            why_size) < 0)
        return NULL;
    return spec;
}

static kernel *create(const char *spec_name, json_t *env, json_t *requested_limits,
                      json_t *network, const rootfs_volumes *volumes, const manager_seed *seed,
                      failure_kind *failure, char *why, size_t why_size)
{
    sandbox_limits limits;
    const kernelspec *spec =
        admit(spec_name, env, requested_limits, network, &limits, failure, why, why_size);
    if (!spec)
        return NULL;
    /* A pooled kernel's sandbox is already built: nothing can be bound into it any more. Its
       root is the same with network or without (sandbox/rootfs.c), and its namespace has
       loopback only until take_from_pool gives it an interface: a networked request takes one
       too. */
    bool poolable = spec->pool_size > 0 &&
                    limits_equal(&limits, &options.default_limits, LIMITS_ALL & ~LIMITS_NETWORK) &&
                    !options.default_limits.network && (!volumes || volumes->count == 0) &&
                    !seed;
    sandbox_pieces pieces;
    kernel *k = NULL;
    if (poolable && take_from_pool(spec, env, &limits, &pieces, &k, why, why_size) < 0) {
        *failure = FAILURE_EXHAUSTED; /* every address taken, mostly: a retry after a delete works */
        return NULL;
    }
    bool pooled = k != NULL;
    if (!pooled)
        k = prepared_start_kernel(spec, env, &limits, volumes, seed ? seed->id : NULL,
                                  seed ? seed->workspace_from : NULL,
                                  seed ? seed->restore_image_fd : -1, &pieces, why, why_size);
    if (!k) {
        *failure = FAILURE_INTERNAL;
        return NULL;
    }
    remember(k, &pieces);
    log_info("kernel %s %s (%s, uid %d)", kernel_id(k), pooled ? "taken from the warm pool" : "started",
             spec->name, (int)sandbox_pieces_uid(&pieces));
    return k;
}

kernel *manager_create(const char *spec_name, json_t *env, json_t *limits, json_t *network,
                       const rootfs_volumes *volumes, failure_kind *failure, char *why,
                       size_t why_size)
{
    return create(spec_name, env, limits, network, volumes, NULL, failure, why, why_size);
}

kernel *manager_create_seeded(const char *spec_name, json_t *env, json_t *limits, json_t *network,
                              const manager_seed *seed, failure_kind *failure, char *why,
                              size_t why_size)
{
    return create(spec_name, env, limits, network, NULL, seed, failure, why, why_size);
}

/* ---- a seeded creation whose files are copied off the loop ---- */

typedef struct later_create {
    manager_created created;
    void *arg;
} later_create;

static void started_later(void *arg, kernel *k, sandbox_pieces *pieces, const char *why)
{
    later_create *later = arg;
    creating--;
    if (k) {
        remember(k, pieces);
        log_info("kernel %s started (%s, uid %d, its files copied)", kernel_id(k),
                 kernel_spec(k)->name, (int)sandbox_pieces_uid(pieces));
    }
    later->created(later->arg, k, ending ? FAILURE_CONFLICT : FAILURE_INTERNAL, why);
    free(later);
}

int manager_create_seeded_later(const char *spec_name, json_t *env, json_t *limits,
                                json_t *network, const manager_seed *seed,
                                manager_created created, void *arg, failure_kind *failure,
                                char *why, size_t why_size)
{
    sandbox_limits checked;
    const kernelspec *spec =
        admit(spec_name, env, limits, network, &checked, failure, why, why_size);
    if (!spec)
        return -1;
    later_create *later = calloc(1, sizeof *later);
    if (!later)
        die("out of memory");
    *later = (later_create){.created = created, .arg = arg};
    if (prepared_start_kernel_later(spec, env, &checked, seed->id, seed->workspace_from,
                                    seed->restore_image_fd, started_later, later, why,
                                    why_size) < 0) {
        free(later);
        *failure = FAILURE_INTERNAL;
        return -1;
    }
    creating++;
    return 0;
}

void manager_delete(kernel *k)
{
    sandbox_pieces pieces = SANDBOX_PIECES_NONE;
    for (size_t i = 0; i < kernel_count; i++) {
        if (kernels[i] != k)
            continue;
        pieces = pieces_of_kernels[i];
        memmove(&kernels[i], &kernels[i + 1], (kernel_count - i - 1) * sizeof *kernels);
        memmove(&pieces_of_kernels[i], &pieces_of_kernels[i + 1],
                (kernel_count - i - 1) * sizeof *pieces_of_kernels);
        kernel_count--;
        break;
    }
    if (delete_hook)
        delete_hook(k);
    keeper_drop(kernel_id(k));
    kernel_destroy(k); /* kills the sandbox first: nothing may be writing while we remove it */
    sandbox_pieces_release(&pieces, kernel_workspace(k), options.keep_workspaces);
    log_info("kernel %s deleted", kernel_id(k));
    heap_note_release();
}

json_t *manager_kernel_model(const kernel *k)
{
    char activity[ISO_TIME_BUFFER];
    clock_format_iso(kernel_last_activity_us(k), activity);
    json_t *model = json_pack("{s:s, s:s, s:s, s:s, s:i}", "id", kernel_id(k), "name",
                              kernel_spec(k)->name, "last_activity", activity, "execution_state",
                              kernel_state_name(kernel_get_state(k)), "connections",
                              kernel_connection_count(k));
    if (kernel_get_state(k) == KERNEL_DEAD && kernel_death_reason(k)[0])
        json_object_set_new(model, "reason", text_json_string(kernel_death_reason(k)));
    return model;
}

/* ---- at the end ---- */

/* Either way: no more refills, and what was made ahead (prepared sets, warm-pool kernels) is
   never worth keeping. */
static void discard_made_ahead(void)
{
    prepared_discard_all();
    pool_discard_all();
}


bool manager_is_ending(void) { return ending; }

void manager_shutdown_all(void)
{
    ending = true;
    discard_made_ahead();
    while (kernel_count > 0)
        manager_delete(kernels[kernel_count - 1]);
    keeper_stop(); /* nothing is left for it to hold */
}

void manager_detach_all(void)
{
    discard_made_ahead();
    for (size_t i = 0; i < kernel_count; i++)
        sandbox_pieces_record(&pieces_of_kernels[i], kernels[i]); /* as they are now: TTL, pause, pid */
    log_info("leaving %zu sandbox(es) running for the next cellboxd on %s", kernel_count,
             options.data_dir);
    keeper_detach();
}

/* ---- for adoption.c, at start ---- */

bool manager_uid_available(uid_t uid) { return sandbox_pieces_uid_available(uid); }
void manager_sandbox_base(kernel_sandbox *base) { sandbox_pieces_base(base); }
bool manager_workspace_volume(const kernel *k, volume_kind *kind, const char **image)
{
    sandbox_pieces *pieces = pieces_of(k);
    if (!pieces)
        return false;
    *kind = options.workspace_kind;
    *image = pieces->image;
    return true;
}

char *manager_workspace_of(const char *id) { return sandbox_pieces_path("workspaces", id, ""); }
int manager_open_volume_views(const char *id, uid_t uid, rootfs_volumes *volumes, char *why,
                              size_t why_size)
{
    return sandbox_pieces_open_volume_views(id, uid, volumes, why, why_size);
}

void manager_take_over(kernel *k, uid_t uid, sandbox_cgroup *cgroup)
{
    sandbox_pieces pieces = sandbox_pieces_adopted(kernel_id(k), uid, cgroup);
    remember(k, &pieces); /* rewrites the record and hands the new channel to the keeper */
}
