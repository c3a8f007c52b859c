#include "model/box.h"

#include <alloca.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/descriptors.h"
#include "common/ids.h"
#include "common/log.h"
#include "common/loop.h"
#include "common/text.h"
#include "kernel/keeper.h"
#include "model/box_fields.h"
#include "model/box_log.h"
#include "model/manager.h"
#include "model/pause.h"
#include "model/ttl.h"
#include "kernel/message.h"
#include "sandbox/cgroup.h"
#include "sandbox/sandbox.h"
#include "sandbox/volume.h"

#define MAX_GONE_HOOKS 8
#define CONTEXT_DESCRIPTORS 16 /* a context's kernel: channel, pipes, pidfd, while it starts */

static void (*kernel_gone_hooks[MAX_GONE_HOOKS])(kernel *k);
static void (*box_gone_hooks[MAX_GONE_HOOKS])(box *b);

static void add_hook(void **hooks, void *hook)
{
    for (int i = 0; i < MAX_GONE_HOOKS; i++) {
        if (!hooks[i]) {
            hooks[i] = hook;
            return;
        }
    }
    die("BUG: too many box hooks");
}

void box_add_kernel_gone_hook(void (*hook)(kernel *k)) { add_hook((void **)kernel_gone_hooks, (void *)hook); }
void box_add_box_gone_hook(void (*hook)(box *b)) { add_hook((void **)box_gone_hooks, (void *)hook); }

/* ---- waiting for a kernel to start ---- */

struct box_start_wait {
    kernel *k;
    void (*started)(void *arg);
    void *arg;
    box_start_wait *next;
};

static box_start_wait *start_waits;

box_start_wait *box_when_started(kernel *k, void (*started)(void *arg), void *arg)
{
    if (kernel_get_state(k) != KERNEL_STARTING)
        return NULL;
    box_start_wait *wait = calloc(1, sizeof *wait);
    if (!wait)
        die("out of memory");
    *wait = (box_start_wait){.k = k, .started = started, .arg = arg, .next = start_waits};
    start_waits = wait;
    return wait;
}

void box_start_wait_cancel(box_start_wait *wait)
{
    for (box_start_wait **at = &start_waits; *at; at = &(*at)->next) {
        if (*at == wait) {
            *at = wait->next;
            free(wait);
            return;
        }
    }
}

/* Each wait for k is taken off the list before its call, so a call may start or cancel others. */
static void end_start_waits(kernel *k)
{
    for (box_start_wait **at = &start_waits; *at;) {
        box_start_wait *wait = *at;
        if (wait->k != k) {
            at = &wait->next;
            continue;
        }
        *at = wait->next;
        wait->started(wait->arg);
        free(wait);
        at = &start_waits; /* the list may have changed under the call */
    }
}

static void kernel_gone(kernel *k)
{
    end_start_waits(k);
    for (int i = 0; i < MAX_GONE_HOOKS && kernel_gone_hooks[i]; i++)
        kernel_gone_hooks[i](k);
}

/* Everything a context prints, whoever asked for it (a WebSocket client or /v1), and its death. */
static void on_kernel_message(kernel *k, const char *channel, json_t *message)
{
    if (kernel_get_state(k) != KERNEL_STARTING)
        end_start_waits(k);
    box *b = box_of_context(k);
    if (!b || strcmp(channel, "iopub") != 0)
        return;
    const char *type = message_type(message);
    json_t *content = json_object_get(message, "content");
    if (type && strcmp(type, "stream") == 0) {
        const char *name = json_string_value(json_object_get(content, "name"));
        const char *text = json_string_value(json_object_get(content, "text"));
        if (text)
            box_log(b, "execute", name && strcmp(name, "stderr") == 0 ? "stderr" : "stdout", text,
                    strlen(text));
    } else if (type && strcmp(type, "error") == 0) {
        const char *ename = json_string_value(json_object_get(content, "ename"));
        const char *evalue = json_string_value(json_object_get(content, "evalue"));
        char text[600];
        int n = snprintf(text, sizeof text, "%s: %s\n", ename ? ename : "Error", evalue ? evalue : "");
        box_log(b, "execute", "stderr", text, n < (int)sizeof text ? (size_t)n : sizeof text - 1);
    } else if (type && strcmp(type, "status") == 0) {
        const char *state = json_string_value(json_object_get(content, "execution_state"));
        if (state && strcmp(state, "dead") == 0)
            box_log_event(b, "context %s: %s", kernel_id(k), kernel_death_reason(k));
    }
}

void box_init(void) { kernel_add_message_handler(on_kernel_message); }

/* ---- the record ---- */

static int (*timeout_pause_action)(box *b, char *why, size_t why_size) = box_pause;

void box_set_timeout_pause_action(int (*action)(box *b, char *why, size_t why_size))
{
    timeout_pause_action = action;
}

box *box_of(kernel *k)
{
    box *b = kernel_box(k);
    if (b)
        return b;
    b = calloc(1, sizeof *b);
    if (!b)
        die("out of memory");
    b->primary = k;
    b->metadata = json_object();
    b->env = json_object();
    b->started_at_us = clock_wall_us();
    b->pause = timeout_pause_action;
    kernel_set_box(k, b);
    box_log_event(b, "sandbox %s started", kernel_id(k));
    return b;
}

box *box_find(const char *id)
{
    kernel *k = manager_find(id);
    return k ? box_of(k) : NULL;
}

/* Every context kernel, the default one and the others, stores its box. */
box *box_of_context(kernel *context) { return kernel_box(context); }

const char *box_id(const box *b) { return kernel_id(b->primary); }
kernel *box_default_kernel(const box *b) { return b->primary; }
uid_t box_uid(const box *b) { return kernel_get_sandbox(b->primary)->uid; }
const sandbox_limits *box_limits(const box *b) { return kernel_limits(b->primary); }
json_t *box_env(const box *b) { return b->env; }
struct command **box_commands_slot(box *b) { return &b->commands; }

void box_set_hibernation(box *b, const char *snapshot_id)
{
    free(b->hibernation_snapshot);
    b->hibernation_snapshot = NULL;
    if (snapshot_id && !(b->hibernation_snapshot = strdup(snapshot_id)))
        die("out of memory");
    if (snapshot_id)
        box_log_event(b, "hibernated (snapshot %s)", snapshot_id);
    else
        box_log_event(b, "woken from hibernation");
    manager_record(b->primary);
}

const char *box_hibernation_snapshot(const box *b) { return b->hibernation_snapshot; }

box_state box_get_state(const box *b)
{
    if (b->hibernation_snapshot) /* its kernels are dead on purpose */
        return BOX_HIBERNATED;
    if (kernel_get_state(b->primary) == KERNEL_DEAD)
        return BOX_DEAD;
    return b->paused ? BOX_PAUSED : BOX_RUNNING;
}

const char *box_state_name(box_state state)
{
    switch (state) {
    case BOX_RUNNING: return "running";
    case BOX_PAUSED: return "paused";
    case BOX_DEAD: return "dead";
    case BOX_HIBERNATED: return "hibernated";
    }
    return "unknown";
}

void box_configure(box *b, json_t *metadata, json_t *env, int timeout_s)
{
    if (metadata)
        json_object_update(b->metadata, metadata);
    if (env)
        json_object_update(b->env, env);
    box_set_timeout(b, timeout_s);
}

/* ---- what survives a restart of the daemon (manager.c's record of the sandbox) ---- */

json_t *box_persisted(const box *b)
{
    json_t *contexts = json_array();
    for (box_context *c = b->contexts; c; c = c->next) {
        pid_t pid = kernel_pid(c->k);
        if (pid <= 0 || kernel_get_state(c->k) == KERNEL_DEAD)
            continue; /* nothing to adopt */
        json_array_append_new(
            contexts, json_pack("{s:s, s:s, s:i, s:I, s:s, s:b}", "id", kernel_id(c->k), "cwd",
                                c->cwd, "pid", (int)pid, "pid_start",
                                (json_int_t)kernel_process_start_time(pid), "kernelspec",
                                kernel_spec(c->k)->name, "language_default",
                                c->language_default));
    }
    json_t *saved =
        json_pack("{s:O, s:O, s:i, s:I, s:I, s:b, s:b, s:b, s:o}", "metadata", b->metadata, "env",
                  b->env, "timeout_s", b->timeout_s, "started_at_us", (json_int_t)b->started_at_us,
                  "ends_at_us", (json_int_t)b->ends_at_us, "paused", b->paused, "pause_at_timeout",
                  b->pause_at_timeout, "auto_resume", b->auto_resume, "contexts", contexts);
    /* A next daemon that finds the kernel still alive (killed right after it hibernated) ends it
       rather than adopt it: the snapshot lists the sandbox again, hibernated (adoption.c). */
    if (b->hibernation_snapshot)
        json_object_set_new(saved, "hibernation_snapshot", json_string(b->hibernation_snapshot));
    if (kernel_working_directory(b->primary)) /* E2B's default context works in /home/user */
        json_object_set_new(saved, "working_directory",
                            json_string(kernel_working_directory(b->primary)));
    return saved;
}

int box_adopt_context(box *b, kernel *k, const char *cwd, bool language_default)
{
    box_context *c = calloc(1, sizeof *c);
    if (!c || !(c->cwd = strdup(cwd)))
        die("out of memory");
    c->k = k;
    c->language_default = language_default;
    kernel_set_box(k, b);
    c->next = b->contexts;
    b->contexts = c;
    box_log_event(b, "context %s adopted", kernel_id(k));
    return 0;
}

void box_restore(box *b, json_t *saved)
{
    json_t *metadata = json_object_get(saved, "metadata"), *env = json_object_get(saved, "env");
    if (json_is_object(metadata))
        json_object_update(b->metadata, metadata);
    if (json_is_object(env))
        json_object_update(b->env, env);
    json_t *started = json_object_get(saved, "started_at_us");
    if (json_is_integer(started))
        b->started_at_us = json_integer_value(started);
    b->timeout_s = (int)json_integer_value(json_object_get(saved, "timeout_s"));
    /* Still frozen in its cgroup: the freezer outlived the daemon. */
    b->paused = json_is_true(json_object_get(saved, "paused"));
    b->pause_at_timeout = json_is_true(json_object_get(saved, "pause_at_timeout"));
    b->auto_resume = json_is_true(json_object_get(saved, "auto_resume"));
    const char *working_directory = json_string_value(json_object_get(saved, "working_directory"));
    if (working_directory)
        kernel_restore_working_directory(b->primary, working_directory);
    box_ttl_restore(b, json_integer_value(json_object_get(saved, "ends_at_us")));
    box_log_event(b, "adopted by a new cellboxd");
}

/* ---- contexts ---- */

kernel *box_find_context(box *b, const char *context_id)
{
    if (strcmp(context_id, box_id(b)) == 0)
        return b->primary;
    for (box_context *c = b->contexts; c; c = c->next)
        if (strcmp(kernel_id(c->k), context_id) == 0)
            return c->k;
    return NULL;
}

static kernel *add_context(box *b, const kernelspec *spec, const char *cwd, int restore_image_fd,
                           failure_kind *failure, char *why, size_t why_size)
{
    *failure = FAILURE_EXHAUSTED;
    if (!descriptors_available(CONTEXT_DESCRIPTORS, why, why_size))
        return NULL;
    *failure = FAILURE_INTERNAL;
    box_context *c = calloc(1, sizeof *c);
    if (!c || !(c->cwd = strdup(cwd)))
        die("out of memory");
    kernel_sandbox sandbox = *kernel_get_sandbox(b->primary);
    sandbox.host = b->primary;
    sandbox.cwd = c->cwd;
    sandbox.restore = restore_image_fd >= 0;
    sandbox.restore_image_fd = restore_image_fd;
    char id[UUID_STRING_LENGTH + 1];
    id_uuid4(id);
    /* Another language's context is another kernel in the same sandbox: same files, same
       limits, same network, its own process. */
    c->k = kernel_start(id, spec ? spec : kernel_spec(b->primary), kernel_workspace(b->primary),
                        b->env, &sandbox, why, why_size);
    if (!c->k) {
        free(c->cwd);
        free(c);
        return NULL;
    }
    kernel_set_box(c->k, b);
    c->next = b->contexts;
    b->contexts = c;
    box_log_event(b, "context %s started", id);
    manager_record(b->primary); /* a context outlives the daemon with its sandbox */
    return c->k;
}

kernel *box_add_context(box *b, const kernelspec *spec, const char *cwd, failure_kind *failure,
                        char *why, size_t why_size)
{
    return add_context(b, spec, cwd, -1, failure, why, why_size);
}

kernel *box_add_restored_context(box *b, const kernelspec *spec, const char *cwd,
                                 int restore_image_fd, failure_kind *failure, char *why,
                                 size_t why_size)
{
    return add_context(b, spec, cwd, restore_image_fd, failure, why, why_size);
}

const kernelspec *box_spec_for_language(box *b, const char *language)
{
    const kernelspec *own = kernel_spec(b->primary);
    return kernelspec_for_language(language, own->argv ? NULL : own);
}

kernel *box_context_for_language(box *b, const kernelspec *spec, failure_kind *failure,
                                 char *why, size_t why_size)
{
    if (spec == kernel_spec(b->primary))
        return b->primary;
    for (box_context *c = b->contexts; c; c = c->next)
        if (c->language_default && kernel_spec(c->k) == spec)
            return c->k;
    const char *cwd =
        kernel_working_directory(b->primary) ? kernel_working_directory(b->primary) : "/workspace";
    kernel *k = box_add_context(b, spec, cwd, failure, why, why_size);
    if (k) {
        b->contexts->language_default = true; /* box_add_context put it first */
        manager_record(b->primary);
    }
    return k;
}

static void destroy_context(box_context *c)
{
    keeper_drop(kernel_id(c->k));
    kernel_gone(c->k);
    kernel_destroy(c->k);
    free(c->cwd);
    free(c);
}

int box_delete_context(box *b, kernel *context)
{
    if (context == b->primary)
        return -1;
    for (box_context **at = &b->contexts; *at; at = &(*at)->next) {
        if ((*at)->k == context) {
            box_context *c = *at;
            *at = c->next;
            box_log_event(b, "context %s deleted", kernel_id(context));
            destroy_context(c);
            manager_record(b->primary);
            return 0;
        }
    }
    return 0;
}

json_t *box_context_model(box *b, kernel *context)
{
    const char *cwd =
        kernel_working_directory(context) ? kernel_working_directory(context) : "/workspace";
    for (box_context *c = b->contexts; c; c = c->next)
        if (c->k == context)
            cwd = c->cwd;
    char language[KERNELSPEC_NAME_MAX + 1]; /* as clients name it: IRkernel's "R" is "r" */
    snprintf(language, sizeof language, "%s", kernel_spec(context)->language);
    for (char *letter = language; *letter; letter++)
        *letter = (char)tolower((unsigned char)*letter);
    json_t *model = json_pack("{s:s, s:s, s:s, s:s, s:b, s:s}", "id", kernel_id(context),
                              "language", language, "kernelspec", kernel_spec(context)->name,
                              "cwd", cwd, "default", context == b->primary, "state",
                              kernel_state_name(kernel_get_state(context)));
    if (kernel_get_state(context) == KERNEL_DEAD && kernel_death_reason(context)[0])
        json_object_set_new(model, "reason", text_json_string(kernel_death_reason(context)));
    return model;
}

json_t *box_contexts_model(box *b)
{
    json_t *list = json_array();
    json_array_append_new(list, box_context_model(b, b->primary));
    box_context *reversed = NULL; /* oldest first after the default */
    for (box_context *c = b->contexts; c; c = c->next) {
        box_context *copy = alloca(sizeof *copy);
        *copy = *c;
        copy->next = reversed;
        reversed = copy;
    }
    for (box_context *c = reversed; c; c = c->next)
        json_array_append_new(list, box_context_model(b, c->k));
    return list;
}

/* ---- the model ---- */

static json_t *usage_model(const box *b)
{
    cgroup_counters counters = {0};
    if (box_cgroup(b))
        cgroup_read_counters(box_cgroup(b), &counters);
    volume_usage disk = {0};
    volume_read_usage(kernel_workspace(b->primary), &disk);
    return json_pack("{s:f, s:I, s:I, s:I}", "cpu_seconds", (double)counters.cpu_usage_us / 1e6,
                     "memory_bytes", (json_int_t)counters.memory_current, "memory_peak_bytes",
                     (json_int_t)counters.memory_peak, "disk_bytes",
                     (json_int_t)(disk.bytes_total - disk.bytes_free));
}

int64_t box_started_at_us(const box *b)
{
    return b->started_at_us;
}

void box_sample_usage(box *b, box_usage_sample *out)
{
    const sandbox_limits *limits = box_limits(b);
    cgroup_counters counters = {0};
    if (box_cgroup(b))
        cgroup_read_counters(box_cgroup(b), &counters);
    volume_usage disk = {0};
    volume_read_usage(kernel_workspace(b->primary), &disk);
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    *out = (box_usage_sample){
        .at_us = clock_wall_us(),
        .cpu_count = limits->cpus > 0 ? limits->cpus : (double)(online > 0 ? online : 1),
        .memory_used = counters.memory_current,
        .memory_total = limits->memory_bytes,
        .disk_used = disk.bytes_total - disk.bytes_free,
        .disk_total = limits->disk_bytes,
    };
    /* the CPU time used between two samples over the time they are apart: a rate needs two */
    int64_t since_us = b->cpu_sampled_at_us ? b->cpu_sampled_at_us : b->started_at_us;
    long long cpu_since_us = b->cpu_sampled_at_us ? b->cpu_sampled_us : 0;
    double wall_us = (double)(out->at_us - since_us);
    double used_us = (double)(counters.cpu_usage_us - cpu_since_us);
    if (wall_us > 0 && used_us > 0)
        out->cpu_used_percent = 100.0 * used_us / (wall_us * out->cpu_count);
    if (out->cpu_used_percent > 100.0)
        out->cpu_used_percent = 100.0;
    b->cpu_sampled_at_us = out->at_us;
    b->cpu_sampled_us = counters.cpu_usage_us;
}

/* The native API names each limit with its unit. */
json_t *box_model(box *b)
{
    box_state state = box_get_state(b);
    json_t *model = json_pack(
        "{s:s, s:s, s:s, s:o, s:o, s:i, s:O, s:o, s:o, s:o}", "id", box_id(b), "template",
        kernel_spec(b->primary)->name, "state", box_state_name(state), "started_at",
        clock_iso_json(b->started_at_us), "ends_at", clock_iso_json(b->ends_at_us), "timeout_s",
        b->timeout_s, "metadata", b->metadata, "limits", limits_to_json(box_limits(b)), "usage",
        usage_model(b), "contexts", box_contexts_model(b));
    if (state == BOX_DEAD)
        json_object_set_new(model, "reason", text_json_string(kernel_death_reason(b->primary)));
    if (state == BOX_HIBERNATED)
        json_object_set_new(model, "snapshot_id", json_string(b->hibernation_snapshot));
    json_t *volumes = json_object(); /* named volumes (volumes.h): name -> path inside */
    const rootfs_volumes *mounts = &kernel_get_sandbox(b->primary)->volumes;
    for (int i = 0; i < mounts->count; i++)
        json_object_set_new(volumes, mounts->mount[i].name, json_string(mounts->mount[i].path));
    json_object_set_new(model, "volumes", volumes);
    json_object_set_new(model, "network", kernel_network_model(b->primary));
    return model;
}

bool box_matches(const box *b, const char *state, json_t *metadata_filter)
{
    if (state && strcmp(state, box_state_name(box_get_state(b))) != 0)
        return false;
    const char *key;
    json_t *value;
    json_object_foreach(metadata_filter, key, value)
    {
        json_t *mine = json_object_get(b->metadata, key);
        if (!json_is_string(mine) || strcmp(json_string_value(mine), json_string_value(value)) != 0)
            return false;
    }
    return true;
}

/* ---- the sandbox's files: one way in ---- */

void box_describe_death(const box *b, char *out, size_t size)
{
    const char *cause = kernel_death_reason(b->primary);
    snprintf(out, size, "sandbox %s is dead: %s", box_id(b), cause[0] ? cause : "its kernel ended");
}

/* An O_PATH descriptor of /proc/<kernel>/root: the sandbox's "/" as its processes see it. */
static int open_root(box *b, char *why, size_t why_size)
{
    int pidfd = kernel_pidfd(b->primary);
    pid_t pid = kernel_pid(b->primary);
    if (pidfd < 0 || pid <= 0) { /* its process is being made: the zygote has not said which */
        snprintf(why, why_size,
                 "sandbox %s is still starting (or restarting); try again in a moment", box_id(b));
        return -1;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/root", (int)pid);
    int root = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
    /* The pid could have been reused between the two calls: the pidfd says whether the process
       we opened is still ours. */
    if (root < 0 || syscall(SYS_pidfd_send_signal, pidfd, 0, NULL, 0) < 0) {
        if (root >= 0)
            close(root);
        snprintf(why, why_size, "sandbox %s is not running: its kernel has just ended", box_id(b));
        return -1;
    }
    return root;
}

bool box_open_files(box *b, confined *c, char *why, size_t why_size)
{
    if (b->hibernation_snapshot) { /* no process: no root to resolve paths in */
        snprintf(why, why_size, "sandbox %s is hibernated: wake it (POST /v1/sandboxes/%s/resume) "
                 "and try again", box_id(b), box_id(b));
        return false;
    }
    if (box_get_state(b) == BOX_DEAD) {
        box_describe_death(b, why, why_size);
        return false;
    }
    /* Until the kernel reports in, its sandbox may not have pivoted into its own root yet:
       /proc/<pid>/root could still be the host's. */
    if (kernel_get_state(b->primary) == KERNEL_STARTING) {
        snprintf(why, why_size, "sandbox %s is still starting; try again in a moment", box_id(b));
        return false;
    }
    int root = open_root(b, why, why_size);
    if (root < 0)
        return false;
    if (sandbox_root_is_unfinished(root)) {
        close(root);
        snprintf(why, why_size, "sandbox %s is still starting; try again in a moment", box_id(b));
        return false;
    }
    confined_init(c, root, box_uid(b), (gid_t)box_uid(b));
    return true;
}

void box_close_files(confined *c)
{
    close(c->root_fd);
    c->root_fd = -1;
}

/* ---- the end ---- */

void box_kernel_deleted(kernel *k)
{
    box *b = kernel_box(k);
    if (!b || b->primary != k) { /* another context goes only through box_delete_context */
        kernel_gone(k);
        return;
    }
    for (int i = 0; i < MAX_GONE_HOOKS && box_gone_hooks[i]; i++)
        box_gone_hooks[i](b);
    box_pause_thaw_for_end(b);
    box_ttl_cancel(b);
    while (b->contexts) {
        box_context *c = b->contexts;
        b->contexts = c->next;
        destroy_context(c);
    }
    kernel_gone(k);
    kernel_set_box(k, NULL);
    json_decref(b->metadata);
    json_decref(b->env);
    free(b->hibernation_snapshot);
    box_log_free(b);
    free(b);
}
