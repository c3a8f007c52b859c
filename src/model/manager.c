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
#include "common/loop.h"
#include "common/text.h"
#include "model/adoption.h"
#include "model/box.h"
#include "model/command.h"
#include "kernel/keeper.h"
#include "kernel/kernelspec.h"
#include "model/reconcile.h"
#include "model/registry.h"
#include "kernel/zygote.h"
#include "sandbox/cgroup.h"
#include "sandbox/sandbox.h"
#include "sandbox/uid_block.h"
#include "sandbox/volume.h"
#include "sandbox/volume_worker.h"

/* Each live sandbox runs as its own uid (and gid) so none can signal or read another's files:
   one of the daemon's block (uid_block.h), unique on the host. */
#define SANDBOX_UID_SLOTS UID_BLOCK_SIZE
/* What starting one more sandbox may open in the daemon at most: its channel, pidfds, pipes,
   the helpers' descriptors while it starts, its commands' pipes (measured: 6 when idle). */
#define DESCRIPTORS_PER_SANDBOX 24

/* What the manager owns for each kernel besides the kernel itself. */
typedef struct sandbox_resources {
    kernel *kernel;
    char id[UUID_STRING_LENGTH + 1]; /* its record's in the registry; "" before one is written */
    int uid_slot;
    sandbox_cgroup *cgroup;
    char *image;            /* the workspace volume's image file */
} sandbox_resources;

static manager_options options;
static kernel **kernels;
static sandbox_resources *resources; /* parallel to kernels */
static size_t kernel_count, kernel_capacity;
static unsigned char uid_in_use[SANDBOX_UID_SLOTS];
static char *root_mount_point, *runtime_dir;
static void (*delete_hook)(kernel *k);

static void schedule_cull(void);
static void schedule_refill(int64_t delay_ms);
static void schedule_prepare(int64_t delay_ms);
static void on_kernel_started(kernel *k);

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
    if (asprintf(&root_mount_point, "%s/.sandbox-root", options.data_dir) < 0 ||
        !(runtime_dir = realpath(kernelspec_python_dir(), NULL)))
        die("out of memory or missing runtime directory");
    /* runtime_dir: PREFIX/share/cellbox/python → PREFIX */
    for (int up = 0; up < 3; up++)
        *strrchr(runtime_dir, '/') = '\0';
    if (fs_mkdir_p(root_mount_point, 0700) < 0)
        die("cannot create %s: %s", root_mount_point, strerror(errno));
    if (registry_init(options.data_dir) < 0)
        die("cannot create %s/sandboxes: %s", options.data_dir, strerror(errno));
    /* Before the volume helper, the zygotes and the first request: the sandboxes a previous
       daemon left are adopted, and what cannot be goes, so nothing of it competes with us. */
    kernel_set_started_hook(on_kernel_started);
    if (keeper_start(options.data_dir) < 0)
        log_warn("no keeper: sandboxes end with this daemon, whatever the way it stops");
    adoption_adopt_all();
    reconcile_data_dir(options.data_dir, options.keep_workspaces, adoption_took);
    if (options.workspace_kind == VOLUME_EXT4 && volume_worker_start() < 0)
        log_warn("cannot start the volume helper (%s): workspace volumes are made in the daemon",
                 strerror(errno));
    if (options.cull_idle_timeout > 0)
        schedule_cull();
    schedule_refill(0);
    schedule_prepare(0);
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

static char *data_path(const char *folder, const char *id, const char *suffix)
{
    char *path;
    if (asprintf(&path, "%s/%s/%s%s", options.data_dir, folder, id, suffix) < 0)
        die("out of memory");
    return path;
}

static int allocate_uid_slot(void)
{
    for (int i = 0; i < SANDBOX_UID_SLOTS; i++) {
        if (!uid_in_use[i]) {
            uid_in_use[i] = 1;
            return i;
        }
    }
    return -1;
}

/* The sandbox's record goes only once its cgroup has: a daemon killed while the group's last
   tasks were leaving (up to a second after a delete) left an empty group that no record named,
   and the next daemon could not know it was ours. Kept on a removal given up on, too. */
static void forget_record(void *id, bool removed)
{
    if (removed)
        registry_remove(id);
    free(id);
}

static void release_resources(sandbox_resources *r, const char *workspace, bool keep_workspace)
{
    char *record = r->id[0] ? strdup(r->id) : NULL;
    if (r->cgroup)
        cgroup_destroy_then(r->cgroup, record ? forget_record : NULL, record);
    else if (record)
        forget_record(record, true);
    /* A kept volume must hold every finished write once the delete is answered: synced and
       detached here. Any other is removed by the volume helper, off the loop. */
    if (workspace && r->image && keep_workspace)
        volume_destroy(r->image, workspace, keep_workspace);
    else if (workspace && r->image)
        volume_worker_destroy(r->image, workspace, false);
    if (r->uid_slot >= 0)
        uid_in_use[r->uid_slot] = 0;
    free(r->image);
    memset(r, 0, sizeof *r);
    r->uid_slot = -1;
}

static uid_t sandbox_uid(const sandbox_resources *r) { return options.first_uid + (uid_t)r->uid_slot; }

static void add_cgroup_path(const char *path, void *arg) { json_array_append_new(arg, json_string(path)); }

/* What the next daemon needs to clean up after this one (reconcile.h) or to adopt the sandbox:
   written before any piece exists, rewritten when a kernel is handed out (`k`: then its workspace
   is the user's, kept with --keep-workspaces) and whenever what survives a restart changes (its
   pid, its box), removed once every piece is released. */
static void record_sandbox(const sandbox_resources *r, kernel *k)
{
    char name[64];
    snprintf(name, sizeof name, "kernel-%s", r->id);
    json_t *cgroups = json_array();
    cgroup_each_path(name, add_cgroup_path, cgroups);
    json_t *record = json_pack("{s:s, s:i, s:s, s:o, s:b}", "id", r->id, "uid", (json_int_t)sandbox_uid(r),
                               "image", r->image, "cgroups", cgroups, "in_use", k != NULL);
    if (k) {
        json_object_set_new(record, "kernelspec", json_string(kernel_spec(k)->name));
        json_object_set(record, "env", kernel_request_env(k));
        json_object_set_new(record, "limits", limits_to_json(kernel_limits(k)));
        pid_t pid = kernel_pid(k);
        if (pid > 0 && kernel_get_state(k) != KERNEL_DEAD) {
            json_object_set_new(record, "pid", json_integer(pid));
            json_object_set_new(record, "pid_start", json_integer(kernel_process_start_time(pid)));
        }
        if (kernel_box(k)) {
            json_object_set_new(record, "box", box_persisted(kernel_box(k)));
            json_object_set_new(record, "commands", command_persisted(kernel_box(k)));
        }
    }
    registry_write(r->id, record);
    json_decref(record);
}

static sandbox_resources *resources_of(const kernel *k)
{
    for (size_t i = 0; i < kernel_count; i++)
        if (kernels[i] == k)
            return &resources[i];
    return NULL;
}

void manager_record(kernel *k)
{
    sandbox_resources *r = resources_of(k);
    if (r)
        record_sandbox(r, k);
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
    sandbox_resources *r = resources_of(host ? host : k);
    if (!r)
        return;
    manager_keep_channels(k);
    record_sandbox(r, r->kernel);
}

/* A sandbox's identity: its uid and the path of its volume's image. */
static int claim_identity(const char *id, sandbox_resources *r, char *why, size_t why_size)
{
    r->uid_slot = allocate_uid_slot();
    if (r->uid_slot < 0) {
        snprintf(why, why_size, "no free sandbox uid (%d sandboxes exist)", SANDBOX_UID_SLOTS);
        return -1;
    }
    r->image = data_path("volumes", id, ".img");
    snprintf(r->id, sizeof r->id, "%s", id);
    record_sandbox(r, NULL);
    return 0;
}

static int create_cgroup(const char *id, const sandbox_limits *limits, sandbox_resources *r,
                         char *why, size_t why_size)
{
    char name[64];
    snprintf(name, sizeof name, "kernel-%s", id);
    cgroup_limits group_limits = {.memory_bytes = limits->memory_bytes, .pids = limits->pids,
                                  .cpus = limits->cpus};
    r->cgroup = cgroup_create(name, &group_limits, why, why_size);
    return r->cgroup ? 0 : -1;
}

/* Disk, then cgroup, for an identity already claimed. */
static int build_pieces(const char *id, const sandbox_limits *limits, sandbox_resources *r,
                        const char *workspace, char *why, size_t why_size)
{
    if (volume_create(options.workspace_kind, r->image, workspace, limits->disk_bytes,
                      sandbox_uid(r), sandbox_uid(r), why, why_size) < 0) {
        free(r->image);
        r->image = NULL;
        return -1;
    }
    return create_cgroup(id, limits, r, why, why_size);
}

/* The sandbox's pieces in the order they are needed: identity, disk, cgroup. */
static int prepare_sandbox(const char *id, const sandbox_limits *limits, sandbox_resources *r,
                           const char *workspace, char *why, size_t why_size)
{
    if (claim_identity(id, r, why, why_size) < 0)
        return -1;
    return build_pieces(id, limits, r, workspace, why, why_size);
}

static void remember(kernel *k, const sandbox_resources *r)
{
    if (kernel_count == kernel_capacity) {
        kernel_capacity = kernel_capacity ? kernel_capacity * 2 : 16;
        kernels = realloc(kernels, kernel_capacity * sizeof *kernels);
        resources = realloc(resources, kernel_capacity * sizeof *resources);
        if (!kernels || !resources)
            die("out of memory");
    }
    kernels[kernel_count] = k;
    resources[kernel_count] = *r;
    resources[kernel_count].kernel = k;
    kernel_count++;
    record_sandbox(r, k);
    manager_keep_channels(k);
}

/* ---- the next sandboxes' pieces, prepared ahead ----
   A sandbox's workspace volume (an image copy, a loop device, an ext4 mount: ~6 ms) and its
   cgroup are the daemon's part of every start. A few sets are made ahead of time for the
   default limits, each under the id the kernel that takes it will have, so a create waits only
   for the kernel itself. The volume helper makes them off the loop (volume_worker.h); without
   it one set is made at a time, in the loop, and only without a warm pool (there a preparation
   would land in the middle of a handout's handshake and first cell instead of saving anyone a
   wait). */

#define PREPARED_AHEAD 2
#define PREPARE_DELAY_MS 50    /* after a start: the new kernel and its client go first */
#define PREPARE_RETRY_MS 1000  /* after a failure: a create will say why */

typedef enum set_state { SET_EMPTY, SET_MAKING, SET_READY } set_state;

typedef struct prepared_set {
    set_state state;
    char id[UUID_STRING_LENGTH + 1];
    sandbox_resources resources;
} prepared_set;

static prepared_set prepared[PREPARED_AHEAD];
static loop_timer *prepare_timer;

static bool preparing_off_loop(void) { return volume_worker_running(); } /* ext4 only */

static void forget_set(prepared_set *set)
{
    char *workspace = data_path("workspaces", set->id, "");
    release_resources(&set->resources, workspace, false); /* never used: nothing to keep */
    free(workspace);
    set->state = SET_EMPTY;
}

static void on_prepared_volume(void *arg, bool ok, const char *why)
{
    prepared_set *set = arg;
    if (set->state != SET_MAKING)
        return; /* discarded meanwhile: its removal was sent after its creation */
    char reason[512];
    if (ok && create_cgroup(set->id, &options.default_limits, &set->resources, reason,
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
    prepare_timer = NULL;
    for (size_t i = 0; i < PREPARED_AHEAD; i++) {
        prepared_set *set = &prepared[i];
        if (set->state != SET_EMPTY)
            continue;
        char why[512];
        id_uuid4(set->id);
        set->resources = (sandbox_resources){.uid_slot = -1};
        char *workspace = data_path("workspaces", set->id, "");
        sandbox_resources *r = &set->resources;
        bool claimed = claim_identity(set->id, r, why, sizeof why) == 0;
        if (claimed && preparing_off_loop() &&
            volume_worker_create(options.workspace_kind, r->image, workspace,
                                 options.default_limits.disk_bytes, sandbox_uid(r), sandbox_uid(r),
                                 on_prepared_volume, set)) {
            set->state = SET_MAKING;
            free(workspace);
            continue;
        }
        /* In the loop: one set, and only one in all (the loop is blocked while it is made). */
        if (claimed && build_pieces(set->id, &options.default_limits, r, workspace, why,
                                    sizeof why) == 0) {
            set->state = SET_READY;
        } else {
            log_debug("cannot prepare the next sandbox ahead: %s", why); /* a create will say why */
            release_resources(r, workspace, false);
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

/* Kernels all the warm pools (below) hold when full. */
static size_t pool_wanted(void)
{
    size_t wanted = 0;
    for (size_t i = 0; i < kernelspec_count(); i++)
        wanted += (size_t)kernelspec_at(i)->pool_size;
    return wanted;
}

static void schedule_prepare(int64_t delay_ms)
{
    if (prepare_timer)
        return;
    if (preparing_off_loop() ? sets_in(SET_EMPTY) > 0
                             : pool_wanted() == 0 && sets_in(SET_READY) == 0)
        prepare_timer = loop_timer_add(delay_ms, prepare_next, NULL);
}

/* Prepared pieces if they fit these limits (their id into `id`); false otherwise. */
static bool take_prepared(const sandbox_limits *limits, char *id, sandbox_resources *r)
{
    if (!limits_equal(limits, &options.default_limits, LIMITS_OF_CGROUP_AND_VOLUME))
        return false;
    for (size_t i = 0; i < PREPARED_AHEAD; i++) {
        if (prepared[i].state != SET_READY)
            continue;
        prepared[i].state = SET_EMPTY;
        memcpy(id, prepared[i].id, sizeof prepared[i].id);
        *r = prepared[i].resources;
        prepared[i].resources = (sandbox_resources){.uid_slot = -1};
        return true;
    }
    return false;
}

static void discard_prepared(void)
{
    if (prepare_timer)
        loop_timer_cancel(prepare_timer);
    prepare_timer = NULL;
    for (size_t i = 0; i < PREPARED_AHEAD; i++)
        if (prepared[i].state != SET_EMPTY)
            forget_set(&prepared[i]); /* one still being made: its removal follows its creation */
}

/* Builds a sandbox and starts a kernel in it; NULL with `why` (nothing left behind). */
static kernel *start_sandboxed(const kernelspec *spec, json_t *env, const sandbox_limits *limits,
                               sandbox_resources *r, char *why, size_t why_size)
{
    char id[UUID_STRING_LENGTH + 1];
    *r = (sandbox_resources){.uid_slot = -1};
    bool ready = take_prepared(limits, id, r);
    if (!ready)
        id_uuid4(id);
    char *workspace = data_path("workspaces", id, "");
    kernel *k = NULL;
    if (ready || prepare_sandbox(id, limits, r, workspace, why, why_size) == 0) {
        kernel_sandbox sandbox = {.uid = sandbox_uid(r),
                                  .cgroup = r->cgroup,
                                  .limits = *limits,
                                  .root_mount_point = root_mount_point,
                                  .runtime_dir = runtime_dir};
        k = kernel_start(id, spec, workspace, env, &sandbox, why, why_size);
    }
    if (!k)
        release_resources(r, workspace, options.keep_workspaces);
    free(workspace);
    schedule_prepare(PREPARE_DELAY_MS);
    return k;
}

/* ---- the warm pools: kernels started ahead of time, each template's own, default limits ---- */

typedef struct pooled_kernel {
    kernel *kernel;
    sandbox_resources resources;
} pooled_kernel;

#define REFILL_DELAY_AFTER_HANDOUT_MS 250

static pooled_kernel *pool; /* every template's, oldest first */
static size_t pool_count;
static loop_timer *refill_timer;

static void schedule_refill(int64_t delay_ms);

static void discard_pooled(pooled_kernel *p)
{
    char *workspace = strdup(kernel_workspace(p->kernel));
    kernel_destroy(p->kernel);
    release_resources(&p->resources, workspace, options.keep_workspaces);
    free(workspace);
}

/* Sandboxes stop before the daemon's open files run out, so that client connections (kept
   their own share, see main.c) and the sandboxes already running keep working. */
static bool room_for_another(void)
{
    char why[400];
    return (options.max_kernels <= 0 || kernel_count + pool_count < (size_t)options.max_kernels) &&
           descriptors_available(DESCRIPTORS_PER_SANDBOX, why, sizeof why);
}

static size_t pooled_of(const kernelspec *spec)
{
    size_t count = 0;
    for (size_t i = 0; i < pool_count; i++)
        count += kernel_spec(pool[i].kernel) == spec;
    return count;
}

/* One kernel at a time, through the loop, so requests are served between two starts; the
   templates take turns in their order, each until its pool is full. */
static void refill_one(void *arg)
{
    refill_timer = NULL;
    if (!room_for_another())
        return;
    const kernelspec *spec = NULL;
    bool waiting = false;
    for (size_t i = 0; i < kernelspec_count() && !spec; i++) {
        const kernelspec *candidate = kernelspec_at(i);
        if (pooled_of(candidate) >= (size_t)candidate->pool_size)
            continue;
        /* Kernels cloned from the zygote share its pages: worth waiting for it. */
        if (candidate->zygote && !zygote_is_ready(candidate->zygote))
            waiting = true;
        else
            spec = candidate;
    }
    if (!spec) {
        if (waiting)
            schedule_refill(100);
        return;
    }
    char why[512];
    sandbox_resources r;
    kernel *k = start_sandboxed(spec, NULL, &options.default_limits, &r, why, sizeof why);
    if (!k) {
        log_warn("warm pool of %s: cannot start a kernel: %s", spec->name, why);
        schedule_refill(1000);
        return;
    }
    pool = realloc(pool, (pool_count + 1) * sizeof *pool);
    if (!pool)
        die("out of memory");
    pool[pool_count++] = (pooled_kernel){.kernel = k, .resources = r};
    schedule_refill(1);
}

static void schedule_refill(int64_t delay_ms)
{
    if (!refill_timer && pool_wanted() > 0)
        refill_timer = loop_timer_add(delay_ms, refill_one, NULL);
}

/* A ready kernel of `spec` from its pool (live, oldest first), or none; dead ones met on the
   way are discarded. */
static pooled_kernel take_pooled(const kernelspec *spec)
{
    pooled_kernel taken = {0};
    for (size_t i = 0; i < pool_count && !taken.kernel;) {
        pooled_kernel candidate = pool[i];
        bool dead = kernel_get_state(candidate.kernel) == KERNEL_DEAD;
        if (!dead && kernel_spec(candidate.kernel) != spec) {
            i++;
            continue;
        }
        memmove(&pool[i], &pool[i + 1], (pool_count - i - 1) * sizeof *pool);
        pool_count--;
        if (dead)
            discard_pooled(&candidate);
        else
            taken = candidate;
    }
    /* Not at once: preparing a sandbox blocks the loop for tens of milliseconds (its mount) and
       its Python start takes a core for a while, which would stall the handshake and first cell
       of the client that just got its kernel. Every handout pushes the refill back, so a burst
       of creates is served from the pool first and the pool refills once the burst is over. */
    if (refill_timer) {
        loop_timer_cancel(refill_timer);
        refill_timer = NULL;
    }
    schedule_refill(REFILL_DELAY_AFTER_HANDOUT_MS);
    return taken;
}

size_t manager_pool_count(const kernelspec *spec)
{
    return spec ? pooled_of(spec) : pool_count;
}

size_t manager_pool_ready_count(const kernelspec *spec)
{
    size_t ready = 0;
    for (size_t i = 0; i < pool_count; i++)
        ready += kernel_get_state(pool[i].kernel) == KERNEL_IDLE &&
                 (!spec || kernel_spec(pool[i].kernel) == spec);
    return ready;
}

/* ---- creation ---- */

kernel *manager_create(const char *spec_name, json_t *env, json_t *limits_json, json_t *network,
                       failure_kind *failure, char *why, size_t why_size)
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
    if (options.max_kernels > 0 && kernel_count >= (size_t)options.max_kernels) {
        *failure = FAILURE_FORBIDDEN;
        snprintf(why, why_size, "Resource Limit: maximum number of kernels (%d) reached; delete a "
                 "kernel or raise --max-kernels", options.max_kernels);
        return NULL;
    }
    if (!descriptors_available(DESCRIPTORS_PER_SANDBOX, why, why_size)) {
        *failure = FAILURE_EXHAUSTED;
        return NULL;
    }
    sandbox_limits limits;
    if (limits_from_request(limits_json, network, env, &options.default_limits, &options.max_limits,
                            options.allow_network, &limits, failure, why, why_size) < 0)
        return NULL;
    bool poolable = spec->pool_size > 0 && limits_equal(&limits, &options.default_limits, LIMITS_ALL);
    pooled_kernel pooled = poolable ? take_pooled(spec) : (pooled_kernel){0};
    sandbox_resources r;
    kernel *k = pooled.kernel;
    if (k) {
        r = pooled.resources;
        kernel_set_environment(k, env); /* as if it had started with the request's variables */
        kernel_touch(k);
    } else {
        k = start_sandboxed(spec, env, &limits, &r, why, why_size);
    }
    if (!k) {
        *failure = FAILURE_INTERNAL;
        return NULL;
    }
    remember(k, &r);
    log_info("kernel %s %s (%s, uid %d)", kernel_id(k), pooled.kernel ? "taken from the warm pool" : "started",
             spec->name, (int)sandbox_uid(&r));
    return k;
}

void manager_delete(kernel *k)
{
    sandbox_resources r = {.uid_slot = -1};
    for (size_t i = 0; i < kernel_count; i++) {
        if (kernels[i] != k)
            continue;
        r = resources[i];
        memmove(&kernels[i], &kernels[i + 1], (kernel_count - i - 1) * sizeof *kernels);
        memmove(&resources[i], &resources[i + 1], (kernel_count - i - 1) * sizeof *resources);
        kernel_count--;
        break;
    }
    if (delete_hook)
        delete_hook(k);
    keeper_drop(kernel_id(k));
    kernel_destroy(k); /* kills the sandbox first: nothing may be writing while we remove it */
    release_resources(&r, kernel_workspace(k), options.keep_workspaces);
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

/* jupyter_server's rule: dead kernels go on every pass; a live one when it has been idle longer
   than the timeout and neither a connection (unless cull_connected) nor a running cell (unless
   cull_busy) protects it. */
static bool should_cull(const kernel *k, int64_t now_us)
{
    if (kernel_get_state(k) == KERNEL_DEAD)
        return true;
    int64_t idle_us = now_us - kernel_last_activity_us(k);
    if (idle_us <= (int64_t)options.cull_idle_timeout * 1000000)
        return false;
    if (kernel_get_state(k) == KERNEL_BUSY && !options.cull_busy)
        return false;
    if (kernel_connection_count(k) > 0 && !options.cull_connected)
        return false;
    return true;
}

static void cull_pass(void *arg)
{
    int64_t now = clock_wall_us();
    for (size_t i = kernel_count; i-- > 0;) {
        if (i < kernel_count && should_cull(kernels[i], now)) {
            log_info("culling kernel %s (%s)", kernel_id(kernels[i]),
                     kernel_state_name(kernel_get_state(kernels[i])));
            manager_delete(kernels[i]);
        }
    }
    schedule_cull();
}

static void schedule_cull(void)
{
    int interval = options.cull_interval > 0 ? options.cull_interval : 300;
    loop_timer_add((int64_t)interval * 1000, cull_pass, NULL);
}

/* At the end, either way: no more refills, and what was made ahead (prepared sets, warm-pool
   kernels) is never worth keeping. */
static void discard_made_ahead(void)
{
    if (refill_timer)
        loop_timer_cancel(refill_timer);
    refill_timer = NULL;
    discard_prepared();
    while (pool_count > 0)
        discard_pooled(&pool[--pool_count]);
}

void manager_shutdown_all(void)
{
    discard_made_ahead();
    while (kernel_count > 0)
        manager_delete(kernels[kernel_count - 1]);
    keeper_stop(); /* nothing is left for it to hold */
}

void manager_detach_all(void)
{
    discard_made_ahead();
    for (size_t i = 0; i < kernel_count; i++)
        record_sandbox(&resources[i], kernels[i]); /* as they are now: TTL, pause, pid */
    log_info("leaving %zu sandbox(es) running for the next cellboxd on %s", kernel_count,
             options.data_dir);
    keeper_detach();
}

/* ---- for adoption.c ---- */

bool manager_uid_available(uid_t uid)
{
    return uid >= options.first_uid && uid < options.first_uid + SANDBOX_UID_SLOTS &&
           !uid_in_use[uid - options.first_uid];
}

void manager_sandbox_base(kernel_sandbox *base)
{
    base->root_mount_point = root_mount_point;
    base->runtime_dir = runtime_dir;
}

char *manager_workspace_of(const char *id) { return data_path("workspaces", id, ""); }

void manager_take_over(kernel *k, uid_t uid, sandbox_cgroup *cgroup)
{
    sandbox_resources r = {.uid_slot = (int)(uid - options.first_uid), .cgroup = cgroup,
                           .image = data_path("volumes", kernel_id(k), ".img")};
    snprintf(r.id, sizeof r.id, "%s", kernel_id(k));
    uid_in_use[r.uid_slot] = 1;
    remember(k, &r); /* rewrites the record and hands the new channel to the keeper */
}
