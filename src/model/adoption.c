#include "model/adoption.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/log.h"
#include "model/box.h"
#include "model/command.h"
#include "kernel/keeper.h"
#include "kernel/kernel.h"
#include "kernel/kernelspec.h"
#include "model/manager.h"
#include "model/volumes.h"
#include "model/registry.h"
#include "sandbox/cgroup.h"

typedef struct saved_sandbox {
    char id[UUID_STRING_LENGTH + 1];
    json_t *record;
} saved_sandbox;

typedef struct saved_sandboxes {
    saved_sandbox *items;
    size_t count;
} saved_sandboxes;

static char (*adopted_ids)[UUID_STRING_LENGTH + 1];
static size_t adopted_count;

bool adoption_took(const char *id)
{
    for (size_t i = 0; i < adopted_count; i++)
        if (strcmp(adopted_ids[i], id) == 0)
            return true;
    return false;
}

static void collect_record(const char *id, json_t *record, void *arg)
{
    saved_sandboxes *all = arg;
    if (!record || !json_is_true(json_object_get(record, "in_use")))
        return;
    all->items = realloc(all->items, (all->count + 1) * sizeof *all->items);
    if (!all->items)
        die("out of memory");
    snprintf(all->items[all->count].id, sizeof all->items[all->count].id, "%s", id);
    all->items[all->count++].record = json_incref(record);
}

/* pid 1 of the recorded sandbox as a pidfd, if it is still that process; -1 otherwise. */
static int open_recorded_process(json_t *record, pid_t *pid)
{
    *pid = (pid_t)json_integer_value(json_object_get(record, "pid"));
    long long start = json_integer_value(json_object_get(record, "pid_start"));
    if (*pid <= 0 || start <= 0)
        return -1;
    int pidfd = (int)syscall(SYS_pidfd_open, *pid, 0);
    /* Checked after the pidfd is open: the pidfd then names the process that was checked. */
    if (pidfd >= 0 && kernel_process_start_time(*pid) != start) {
        close(pidfd);
        return -1;
    }
    return pidfd;
}

static void remember_adopted(const char *id);
static keeper_entry *entry_for(keeper_entry *entries, size_t count, const char *id);

/* A context runs its own kernelspec (another language's, or its sandbox's template). */
static const kernelspec *spec_of_context(json_t *saved, kernel *primary)
{
    const char *name = json_string_value(json_object_get(saved, "kernelspec"));
    const kernelspec *spec = name ? kernelspec_find(name) : NULL;
    return spec ? spec : kernel_spec(primary);
}

/* The other contexts of an adopted sandbox: each is adopted as its default one was, or ended. */
static void adopt_contexts(kernel *primary, json_t *saved_box, keeper_entry *entries,
                           size_t entry_count, int64_t gone_at_us)
{
    size_t i;
    json_t *saved;
    json_array_foreach(json_object_get(saved_box, "contexts"), i, saved) {
        const char *id = json_string_value(json_object_get(saved, "id"));
        const char *cwd = json_string_value(json_object_get(saved, "cwd"));
        keeper_entry *entry = id ? entry_for(entries, entry_count, id) : NULL;
        pid_t pid;
        int pidfd = open_recorded_process(saved, &pid);
        kernel *k = NULL;
        char why[256] = "no keeper holds its channels";
        if (entry && pidfd >= 0 && cwd) {
            kernel_sandbox sandbox = *kernel_get_sandbox(primary);
            sandbox.host = primary;
            kernel_adoption adoption = {
                .id = id, .spec = spec_of_context(saved, primary), .workspace = kernel_workspace(primary),
                .env = box_env(box_of(primary)), .sandbox = sandbox, .pid = pid, .pidfd = pidfd,
                .fds = {entry->fds[0], entry->fds[1], entry->fds[2]},
                .previous_daemon_gone_at_us = gone_at_us};
            k = kernel_adopt(&adoption, why, sizeof why);
        } else if (pidfd < 0) {
            snprintf(why, sizeof why, "its process is gone");
        }
        bool language_default = json_is_true(json_object_get(saved, "language_default"));
        if (k && box_adopt_context(box_of(primary), k, cwd, language_default) == 0) {
            for (int fd = 0; fd < KEEPER_FDS; fd++)
                entry->fds[fd] = -1; /* the kernel's now */
            remember_adopted(id);
            manager_keep_channels(k);
            continue;
        }
        log_info("context %s of sandbox %s cannot be adopted (%s): it is ended", id ? id : "?",
                 kernel_id(primary), why);
        if (pidfd >= 0) { /* the very process recorded: ended through its pidfd */
            syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
            close(pidfd);
        }
    }
}

/* Its running background commands: each adopted, or ended if it cannot be. */
static void adopt_commands(kernel *primary, json_t *saved_commands, keeper_entry *entries,
                           size_t entry_count, int64_t gone_at_us)
{
    size_t i;
    json_t *saved;
    json_array_foreach(saved_commands, i, saved) {
        const char *id = json_string_value(json_object_get(saved, "id"));
        keeper_entry *entry = id ? entry_for(entries, entry_count, id) : NULL;
        pid_t pid;
        int pidfd = open_recorded_process(saved, &pid);
        if (entry && pidfd >= 0) {
            command_adopt(box_of(primary), saved, pidfd, entry->fds, gone_at_us);
            for (int fd = 0; fd < KEEPER_FDS; fd++)
                entry->fds[fd] = -1; /* the command's now */
            remember_adopted(id);
            continue;
        }
        log_info("command %s of sandbox %s cannot be adopted (%s): it is ended", id ? id : "?",
                 kernel_id(primary), pidfd < 0 ? "its process is gone" : "no keeper holds its pipes");
        if (pidfd >= 0) {
            syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
            close(pidfd);
        }
    }
}

static const char *adopt_one(const saved_sandbox *saved, keeper_entry *entry, int64_t gone_at_us,
                             keeper_entry *entries, size_t entry_count)
{
    json_t *record = saved->record;
    /* Hibernated: its processes were being ended when the daemon went. They are not adopted:
       the sweep ends what is left, and hibernation_init lists it again from its snapshot. */
    if (json_is_string(json_object_get(json_object_get(record, "box"), "hibernation_snapshot")))
        return "it hibernated: its snapshot lists it again";
    const kernelspec *spec = kernelspec_find(json_string_value(json_object_get(record, "kernelspec")));
    if (!spec)
        return "its template is no longer known";
    uid_t uid = (uid_t)json_integer_value(json_object_get(record, "uid"));
    if (!manager_uid_available(uid))
        return "its uid is not in this daemon's block";
    pid_t pid;
    int pidfd = open_recorded_process(record, &pid);
    if (pidfd < 0)
        return "its process is gone";
    sandbox_limits limits = limits_from_json(json_object_get(record, "limits"));
    char name[64], why[256];
    snprintf(name, sizeof name, "kernel-%s", saved->id);
    sandbox_cgroup *cgroup = cgroup_adopt(name, limits.pids);
    if (!cgroup) {
        close(pidfd);
        return "its cgroup is gone";
    }
    char *workspace = manager_workspace_of(saved->id);
    /* Still bound inside the sandbox whatever happens here; known again so that the volume is
       not deleted under it, and a restart of its kernel binds it again. */
    rootfs_volumes volumes;
    failure_kind ignored;
    if (volumes_from_request(json_object_get(record, "volumes"), &volumes, &ignored, why,
                             sizeof why) < 0 ||
        manager_open_volume_views(saved->id, uid, &volumes, why, sizeof why) < 0) {
        log_warn("sandbox %s: its volumes are not all known any more: %s", saved->id, why);
        volumes.count = 0; /* still bound inside; only a restart of its kernel goes without */
    }
    kernel_adoption adoption = {
        .id = saved->id, .spec = spec, .workspace = workspace,
        .env = json_object_get(record, "env"),
        .sandbox = {.uid = uid, .cgroup = cgroup, .limits = limits},
        .pid = pid, .pidfd = pidfd, .fds = {entry->fds[0], entry->fds[1], entry->fds[2]},
        .previous_daemon_gone_at_us = gone_at_us,
        .allow_out = json_object_get(json_object_get(record, "egress"), "allowOut"),
        .deny_out = json_object_get(json_object_get(record, "egress"), "denyOut")};
    manager_sandbox_base(&adoption.sandbox);
    adoption.sandbox.volumes = volumes;
    kernel *k = kernel_adopt(&adoption, why, sizeof why);
    free(workspace);
    if (!k) {
        close(pidfd);
        cgroup_destroy(cgroup); /* reconcile_data_dir removes the rest */
        return "no new channel could be made";
    }
    for (int i = 0; i < KEEPER_FDS; i++)
        entry->fds[i] = -1; /* the kernel's now */
    manager_take_over(k, uid, cgroup);
    box *b = box_of(k);
    box_restore(b, json_object_get(record, "box"));
    adopt_contexts(k, json_object_get(record, "box"), entries, entry_count, gone_at_us);
    adopt_commands(k, json_object_get(record, "commands"), entries, entry_count, gone_at_us);
    manager_record(k);
    log_info("sandbox %s adopted from the previous cellboxd (pid %d, uid %d%s)", saved->id,
             (int)pid, (int)uid, box_get_state(b) == BOX_PAUSED ? ", paused" : "");
    return NULL;
}

static void remember_adopted(const char *id)
{
    char (*grown)[UUID_STRING_LENGTH + 1] = realloc(adopted_ids, (adopted_count + 1) * sizeof *adopted_ids);
    if (!grown)
        die("out of memory");
    adopted_ids = grown;
    snprintf(adopted_ids[adopted_count++], sizeof *adopted_ids, "%s", id);
}

static keeper_entry *entry_for(keeper_entry *entries, size_t count, const char *id)
{
    for (size_t i = 0; i < count; i++)
        if (strcmp(entries[i].id, id) == 0)
            return &entries[i];
    return NULL;
}

void adoption_adopt_all(void)
{
    keeper_entry *entries;
    int64_t gone_at_us;
    size_t entry_count = keeper_take_all(&entries, &gone_at_us);
    saved_sandboxes saved = {0};
    registry_each(collect_record, &saved); /* all first: adopting rewrites records */
    for (size_t i = 0; i < saved.count; i++) {
        keeper_entry *entry = entry_for(entries, entry_count, saved.items[i].id);
        const char *why_not = entry ? adopt_one(&saved.items[i], entry, gone_at_us, entries, entry_count)
                                    : "no keeper holds its channels";
        if (why_not)
            log_info("sandbox %s of the previous cellboxd cannot be adopted (%s): it is removed",
                     saved.items[i].id, why_not);
        else
            remember_adopted(saved.items[i].id);
        json_decref(saved.items[i].record);
    }
    free(saved.items);
    for (size_t i = 0; i < entry_count; i++) {
        if (!adoption_took(entries[i].id))
            keeper_drop(entries[i].id);
        for (int fd = 0; fd < KEEPER_FDS; fd++)
            if (entries[i].fds[fd] >= 0)
                close(entries[i].fds[fd]);
    }
    free(entries);
}
