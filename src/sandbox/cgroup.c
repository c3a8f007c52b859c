#include "sandbox/cgroup.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "common/log.h"
#include "common/loop.h"

/* v1 hierarchies we use; cpuacct gives CPU time, freezer pause/resume. */
static const char *const v1_controllers[] = {"memory", "pids", "cpu", "cpuacct", "freezer"};
#define V1_COUNT (sizeof v1_controllers / sizeof v1_controllers[0])

static struct {
    bool v2;
    char parent[V1_COUNT][PATH_MAX]; /* v1: per controller; v2: [0] only */
    bool present[V1_COUNT];
} state;

struct sandbox_cgroup {
    char path[V1_COUNT][PATH_MAX];   /* same indexing as state.parent */
    char procs[V1_COUNT][PATH_MAX + 16];
    /* memory.events (v1: memory.oom_control) and pids.events, open for re-reading: -1 until
       first read (cgroup_read_limit_events) */
    int limit_event_fds[2];
    int removal_attempts;
    int pids_limit;                  /* pids.max as the limits have it */
    loop_timer_id removal_timer;
    sandbox_cgroup *next_pending;    /* in the list of groups waiting to be removed */
    cgroup_removed_callback removed; /* told when the removal ended (cgroup_destroy_then) */
    void *removed_arg;
};

static sandbox_cgroup *pending_removal;

static void forget_pending(sandbox_cgroup *group)
{
    for (sandbox_cgroup **at = &pending_removal; *at; at = &(*at)->next_pending) {
        if (*at == group) {
            *at = group->next_pending;
            return;
        }
    }
}

const char *cgroup_version_name(void) { return state.v2 ? "v2" : "v1"; }

static int write_file(const char *dir, const char *file, const char *value)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = write(fd, value, strlen(value));
    int saved = errno;
    close(fd);
    errno = saved;
    return n == (ssize_t)strlen(value) ? 0 : -1;
}

static ssize_t read_file(const char *dir, const char *file, char *out, size_t size)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, out, size - 1);
    close(fd);
    out[n > 0 ? n : 0] = '\0';
    return n;
}

/* "key value" lines (memory.events, pids.events, memory.oom_control, cpu.stat). */
static long long keyed_value(const char *text, const char *key)
{
    size_t key_length = strlen(key);
    for (const char *line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
        if (strncmp(line, key, key_length) == 0 && line[key_length] == ' ')
            return atoll(line + key_length + 1);
    return 0;
}

static long long read_keyed(const char *dir, const char *file, const char *key)
{
    char text[4096];
    return read_file(dir, file, text, sizeof text) < 0 ? 0 : keyed_value(text, key);
}

/* The same, from a file kept open in *fd (opened on first use): a cgroup file generates its
   text anew on every read from offset 0, so a pread() replaces the open, path walk and close
   that read_keyed() pays. */
static long long reread_keyed(int *fd, const char *dir, const char *file, const char *key)
{
    if (*fd < 0 && dir) {
        char path[PATH_MAX + 64];
        snprintf(path, sizeof path, "%s/%s", dir, file);
        *fd = open(path, O_RDONLY | O_CLOEXEC);
    }
    char text[4096];
    ssize_t n = *fd < 0 ? -1 : pread(*fd, text, sizeof text - 1, 0);
    if (n < 0)
        return 0;
    text[n] = '\0';
    return keyed_value(text, key);
}

static long long read_number(const char *dir, const char *file)
{
    char text[64];
    return read_file(dir, file, text, sizeof text) > 0 ? atoll(text) : 0;
}

bool cgroup_parse_own_path(const char *proc_self_cgroup, const char *controller, char *out, size_t size)
{
    bool found = false;
    for (const char *cursor = proc_self_cgroup; !found && cursor && *cursor;) {
        const char *end = strchr(cursor, '\n');
        size_t length = end ? (size_t)(end - cursor) : strlen(cursor);
        char line[PATH_MAX + 128];
        snprintf(line, sizeof line, "%.*s", (int)(length < sizeof line ? length : sizeof line - 1), cursor);
        cursor = end ? end + 1 : NULL;
        /* "hierarchy-id:controller,list:/path"; v2's one line is "0::/path" */
        char *controllers = strchr(line, ':');
        char *path = controllers ? strchr(controllers + 1, ':') : NULL;
        if (!path)
            continue;
        *path++ = '\0';
        *controllers++ = '\0'; /* `line` is now the hierarchy id alone */
        if (!controller) {
            found = strcmp(line, "0") == 0 && *controllers == '\0';
        } else {
            for (char *save = NULL, *c = strtok_r(controllers, ",", &save); c && !found;
                 c = strtok_r(NULL, ",", &save))
                found = strcmp(c, controller) == 0;
        }
        if (found)
            snprintf(out, size, "%s", strcmp(path, "/") == 0 ? "" : path);
    }
    return found;
}

/* The daemon's own cgroup path in a hierarchy (NULL: v2's unified one). */
static bool own_cgroup(const char *controller, char *out, size_t size)
{
    char text[8192];
    return read_file("/proc/self", "cgroup", text, sizeof text) > 0 &&
           cgroup_parse_own_path(text, controller, out, size);
}

static bool is_cgroup2(const char *path)
{
    struct statfs fs;
    return statfs(path, &fs) == 0 && fs.f_type == CGROUP2_SUPER_MAGIC;
}

static int init_v1(char *why, size_t why_size)
{
    for (size_t i = 0; i < V1_COUNT; i++) {
        char mount[PATH_MAX], self[PATH_MAX];
        snprintf(mount, sizeof mount, "/sys/fs/cgroup/%s", v1_controllers[i]);
        if (access(mount, W_OK) != 0 || !own_cgroup(v1_controllers[i], self, sizeof self))
            continue;
        snprintf(state.parent[i], PATH_MAX, "%.2000s%.2000s/cellbox", mount, self);
        if (mkdir(state.parent[i], 0755) < 0 && errno != EEXIST) {
            snprintf(why, why_size, "cannot create cgroup %s: %s", state.parent[i], strerror(errno));
            return -1;
        }
        state.present[i] = true;
    }
    if (!state.present[0] || !state.present[1]) {
        snprintf(why, why_size, "cgroup v1 needs the memory and pids hierarchies mounted and writable "
                 "under /sys/fs/cgroup");
        return -1;
    }
    return 0;
}

#define V2_CONTROLLERS "+memory +pids +cpu"
#define V2_ROOT "/sys/fs/cgroup"

/* Whether the children of `dir` get memory, pids and cpu (its cgroup.subtree_control). */
static bool v2_children_have_controllers(const char *dir)
{
    char text[512], *save = NULL;
    if (read_file(dir, "cgroup.subtree_control", text, sizeof text) < 0)
        return false;
    int found = 0;
    for (char *word = strtok_r(text, " \n", &save); word; word = strtok_r(NULL, " \n", &save))
        found += strcmp(word, "memory") == 0 || strcmp(word, "pids") == 0 || strcmp(word, "cpu") == 0;
    return found == 3;
}

static int v2_enable_controllers(const char *dir)
{
    return v2_children_have_controllers(dir) ? 0
                                             : write_file(dir, "cgroup.subtree_control", V2_CONTROLLERS);
}

/* Delegated, as under systemd with Delegate=yes: the sandboxes live in the daemon's own cgroup.
   The "no internal processes" rule makes the daemon move into cellbox/daemon so that cellbox/
   can enable the controllers for the sandboxes beside it. Undone on failure. */
static int init_v2_delegated(const char *base, char *why, size_t why_size)
{
    char leaf[PATH_MAX + 64], pid[32];
    snprintf(state.parent[0], PATH_MAX, "%.4000s/cellbox", base);
    snprintf(leaf, sizeof leaf, "%.4000s/daemon", state.parent[0]);
    snprintf(pid, sizeof pid, "%d", getpid());
    if ((mkdir(state.parent[0], 0755) < 0 && errno != EEXIST) || (mkdir(leaf, 0755) < 0 && errno != EEXIST)) {
        snprintf(why, why_size, "cannot create cgroup %.300s: %s", state.parent[0], strerror(errno));
    } else if (write_file(leaf, "cgroup.procs", pid) < 0) {
        snprintf(why, why_size, "cannot move the daemon into %.300s: %s", leaf, strerror(errno));
    } else if (v2_enable_controllers(base) < 0 || v2_enable_controllers(state.parent[0]) < 0) {
        snprintf(why, why_size, "cannot enable memory, pids and cpu for the sandboxes under %.300s: %s%s",
                 base, strerror(errno),
                 errno == EBUSY    ? " (other processes share the daemon's cgroup)"
                 : errno == ENOENT ? " (the cgroup above it does not hand them down)"
                                   : "");
        write_file(base, "cgroup.procs", pid); /* back where it was */
    } else {
        return 0;
    }
    rmdir(leaf);
    rmdir(state.parent[0]); /* fails while another daemon's sandboxes use it: fine */
    return -1;
}

/* Top level, for a daemon run by root whose own cgroup cannot be delegated: a login session's
   scope shares it with the shell; a container or VM supervisor's may not hand the controllers
   down. The sandboxes live in /sys/fs/cgroup/cellbox, with the controllers enabled from the
   root (which the "no internal processes" rule does not bind); the daemon stays where it is. */
static int init_v2_top_level(char *why, size_t why_size)
{
    snprintf(state.parent[0], PATH_MAX, "%s/cellbox", V2_ROOT);
    if (v2_enable_controllers(V2_ROOT) < 0) {
        snprintf(why, why_size, "cannot enable memory, pids and cpu in %s: %s", V2_ROOT, strerror(errno));
        return -1;
    }
    if (mkdir(state.parent[0], 0755) < 0 && errno != EEXIST) {
        snprintf(why, why_size, "cannot create cgroup %.300s: %s", state.parent[0], strerror(errno));
        return -1;
    }
    if (v2_enable_controllers(state.parent[0]) < 0) {
        snprintf(why, why_size, "cannot enable memory, pids and cpu under %.300s: %s", state.parent[0],
                 strerror(errno));
        return -1;
    }
    return 0;
}

static int init_v2(char *why, size_t why_size)
{
    char self[PATH_MAX], base[PATH_MAX + 32], delegated_why[512];
    if (!own_cgroup(NULL, self, sizeof self)) {
        snprintf(why, why_size, "cannot find the daemon's cgroup in /proc/self/cgroup");
        return -1;
    }
    snprintf(base, sizeof base, "%s%.3000s", V2_ROOT, self);
    if (init_v2_delegated(base, delegated_why, sizeof delegated_why) == 0) {
        state.present[0] = true;
        return 0;
    }
    char top_level_why[512] = "";
    if (self[0] && init_v2_top_level(top_level_why, sizeof top_level_why) == 0) {
        log_info("sandboxes' cgroups: %.300s, not the daemon's own %.300s (%.300s)", state.parent[0],
                 base, delegated_why);
        state.present[0] = true;
        return 0;
    }
    snprintf(why, why_size, "%.300s%s%.300s (give cellboxd a delegated cgroup, e.g. a systemd unit "
             "with Delegate=yes)", delegated_why, top_level_why[0] ? "; " : "", top_level_why);
    return -1;
}

int cgroup_init(char *why, size_t why_size)
{
    state.v2 = is_cgroup2("/sys/fs/cgroup");
    return state.v2 ? init_v2(why, why_size) : init_v1(why, why_size);
}

static int index_of(const char *controller)
{
    for (size_t i = 0; i < V1_COUNT; i++)
        if (strcmp(v1_controllers[i], controller) == 0)
            return (int)i;
    return -1;
}

/* The directory holding `controller`'s files for this group (v2: the one directory). */
static const char *dir_for(sandbox_cgroup *group, const char *controller)
{
    int i = state.v2 ? 0 : index_of(controller);
    return (i >= 0 && state.present[i]) ? group->path[i] : NULL;
}

static int apply_limits(sandbox_cgroup *group, const cgroup_limits *limits)
{
    char value[64];
    group->pids_limit = limits->pids;
    long long quota = (long long)(limits->cpus * 100000);
    if (state.v2) {
        const char *dir = group->path[0];
        snprintf(value, sizeof value, "%lld", limits->memory_bytes);
        if (write_file(dir, "memory.max", value) < 0)
            return -1;
        write_file(dir, "memory.swap.max", "0"); /* absent without swap accounting */
        snprintf(value, sizeof value, "%d", limits->pids);
        if (write_file(dir, "pids.max", value) < 0)
            return -1;
        snprintf(value, sizeof value, "%lld 100000", quota);
        return write_file(dir, "cpu.max", value);
    }
    snprintf(value, sizeof value, "%lld", limits->memory_bytes);
    if (write_file(dir_for(group, "memory"), "memory.limit_in_bytes", value) < 0)
        return -1;
    write_file(dir_for(group, "memory"), "memory.memsw.limit_in_bytes", value); /* no swap on top */
    snprintf(value, sizeof value, "%d", limits->pids);
    if (write_file(dir_for(group, "pids"), "pids.max", value) < 0)
        return -1;
    if (dir_for(group, "cpu")) {
        write_file(dir_for(group, "cpu"), "cpu.cfs_period_us", "100000");
        snprintf(value, sizeof value, "%lld", quota);
        write_file(dir_for(group, "cpu"), "cpu.cfs_quota_us", value);
    }
    return 0;
}

sandbox_cgroup *cgroup_create(const char *name, const cgroup_limits *limits, char *why,
                              size_t why_size)
{
    sandbox_cgroup *group = calloc(1, sizeof *group);
    if (!group)
        die("out of memory");
    group->limit_event_fds[0] = group->limit_event_fds[1] = -1;
    for (size_t i = 0; i < V1_COUNT; i++) {
        if (!state.present[i])
            continue;
        snprintf(group->path[i], PATH_MAX, "%.3900s/%.64s", state.parent[i], name);
        snprintf(group->procs[i], sizeof group->procs[i], "%.4000s/cgroup.procs", group->path[i]);
        /* Another daemon sharing our parent may remove it when it stops (until our group is in
           it), so it is made again if gone; made anew, a v2 parent hands no controllers down
           until they are enabled again. */
        bool made = false;
        for (int attempt = 0; attempt < 3 && !made; attempt++) {
            if ((mkdir(state.parent[i], 0755) < 0 && errno != EEXIST) ||
                (state.v2 && v2_enable_controllers(state.parent[i]) < 0)) {
                snprintf(why, why_size, "cannot create cgroup %s: %s", state.parent[i], strerror(errno));
                break;
            }
            made = mkdir(group->path[i], 0755) == 0 || errno == EEXIST;
            if (!made)
                snprintf(why, why_size, "cannot create cgroup %s: %s", group->path[i], strerror(errno));
            if (!made && errno != ENOENT)
                break;
        }
        if (!made) {
            cgroup_destroy(group);
            return NULL;
        }
    }
    if (apply_limits(group, limits) < 0) {
        snprintf(why, why_size, "cannot set the cgroup limits of %s: %s", name, strerror(errno));
        cgroup_destroy(group);
        return NULL;
    }
    return group;
}

sandbox_cgroup *cgroup_adopt(const char *name, int pids_limit)
{
    sandbox_cgroup *group = calloc(1, sizeof *group);
    if (!group)
        die("out of memory");
    group->limit_event_fds[0] = group->limit_event_fds[1] = -1;
    group->pids_limit = pids_limit;
    for (size_t i = 0; i < V1_COUNT; i++) {
        if (!state.present[i])
            continue;
        snprintf(group->path[i], PATH_MAX, "%.3900s/%.64s", state.parent[i], name);
        snprintf(group->procs[i], sizeof group->procs[i], "%.4000s/cgroup.procs", group->path[i]);
        if (access(group->path[i], F_OK) < 0) {
            free(group);
            return NULL;
        }
    }
    return group;
}

void cgroup_setup_window(sandbox_cgroup *group, bool open)
{
    /* 100 times the default weight (v1 cpu.shares 1024, at most 262144; v2 cpu.weight 100, at
       most 10000). Failing is harmless: the group only competes as an ordinary one. */
    if (state.v2) {
        write_file(group->path[0], "cpu.weight", open ? "10000" : "100");
        char pids[32];
        snprintf(pids, sizeof pids, "%d", group->pids_limit + (open ? 1 : 0));
        write_file(group->path[0], "pids.max", pids);
    } else if (dir_for(group, "cpu")) {
        write_file(dir_for(group, "cpu"), "cpu.shares", open ? "102400" : "1024");
    }
}

void cgroup_procs_files(sandbox_cgroup *group, const char **out, size_t max)
{
    size_t n = 0;
    for (size_t i = 0; i < V1_COUNT && n < max; i++)
        if (state.present[i])
            out[n++] = group->procs[i];
    out[n] = NULL;
}

const char *cgroup_memory_procs_file(sandbox_cgroup *group)
{
    int i = state.v2 ? 0 : index_of("memory");
    return (i >= 0 && state.present[i]) ? group->procs[i] : NULL;
}

bool cgroup_own_memory_procs_file(char *out, size_t size)
{
    char self[PATH_MAX];
    if (!own_cgroup(state.v2 ? NULL : "memory", self, sizeof self))
        return false;
    int n = snprintf(out, size, "%s%s%s/cgroup.procs", V2_ROOT, state.v2 ? "" : "/memory", self);
    return n > 0 && (size_t)n < size;
}

void cgroup_read_limit_events(sandbox_cgroup *group, cgroup_counters *out)
{
    memset(out, 0, sizeof *out);
    int *fds = group->limit_event_fds; /* read before and after every cell: kept open */
    if (state.v2) {
        out->oom_kills = reread_keyed(&fds[0], group->path[0], "memory.events", "oom_kill");
        out->pids_limit_hits = reread_keyed(&fds[1], group->path[0], "pids.events", "max");
        return;
    }
    out->oom_kills = reread_keyed(&fds[0], dir_for(group, "memory"), "memory.oom_control", "oom_kill");
    out->pids_limit_hits = reread_keyed(&fds[1], dir_for(group, "pids"), "pids.events", "max");
}

void cgroup_read_counters(sandbox_cgroup *group, cgroup_counters *out)
{
    cgroup_read_limit_events(group, out);
    if (state.v2) {
        const char *dir = group->path[0];
        out->memory_peak = read_number(dir, "memory.peak");
        out->memory_current = read_number(dir, "memory.current");
        out->cpu_usage_us = read_keyed(dir, "cpu.stat", "usage_usec");
        return;
    }
    out->memory_peak = read_number(dir_for(group, "memory"), "memory.max_usage_in_bytes");
    out->memory_current = read_number(dir_for(group, "memory"), "memory.usage_in_bytes");
    if (dir_for(group, "cpuacct"))
        out->cpu_usage_us = read_number(dir_for(group, "cpuacct"), "cpuacct.usage") / 1000;
}

int cgroup_freeze(sandbox_cgroup *group, bool frozen)
{
    if (state.v2)
        return write_file(group->path[0], "cgroup.freeze", frozen ? "1" : "0");
    const char *dir = dir_for(group, "freezer");
    if (!dir) {
        errno = ENOTSUP;
        return -1;
    }
    return write_file(dir, "freezer.state", frozen ? "FROZEN" : "THAWED");
}

void cgroup_reset_memory_peak(sandbox_cgroup *group)
{
    const char *dir = state.v2 ? NULL : dir_for(group, "memory");
    if (dir)
        write_file(dir, "memory.max_usage_in_bytes", "0");
}

void cgroup_kill_all(sandbox_cgroup *group)
{
    if (state.v2 && write_file(group->path[0], "cgroup.kill", "1") == 0)
        return;
    const char *dir = state.v2 ? group->path[0] : dir_for(group, "pids");
    char text[65536];
    if (!dir || read_file(dir, "cgroup.procs", text, sizeof text) <= 0)
        return;
    for (char *save = NULL, *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
        kill((pid_t)atoi(line), SIGKILL);
}

bool cgroup_is_empty(sandbox_cgroup *group)
{
    const char *dir = state.v2 ? group->path[0] : dir_for(group, "pids");
    if (!dir)
        dir = dir_for(group, "memory");
    char text[64];
    /* unreadable: the group is gone, and its processes with it */
    return !dir || read_file(dir, "cgroup.procs", text, sizeof text) <= 0;
}

#define REMOVE_RETRY_MS 10
#define REMOVE_ATTEMPTS 500

/* Removes what it can; true when nothing is left. */
static bool remove_directories(sandbox_cgroup *group)
{
    bool done = true;
    for (size_t i = 0; i < V1_COUNT; i++) {
        if (!state.present[i] || !group->path[i][0])
            continue;
        if (rmdir(group->path[i]) == 0 || errno == ENOENT)
            group->path[i][0] = '\0';
        else
            done = false; /* EBUSY: killed tasks have not finished leaving */
    }
    return done;
}

/* The end of a removal, whether its directories went or not. */
static void finish_removal(sandbox_cgroup *group, bool removed)
{
    if (group->removed)
        group->removed(group->removed_arg, removed);
    free(group);
}

static void retry_removal(void *arg)
{
    sandbox_cgroup *group = arg;
    group->removal_timer = 0;
    if (remove_directories(group)) {
        forget_pending(group);
        finish_removal(group, true);
    } else if (++group->removal_attempts >= REMOVE_ATTEMPTS) {
        log_warn("cgroup %s still has tasks after %d s; leaving it", group->path[0],
                 REMOVE_ATTEMPTS * REMOVE_RETRY_MS / 1000);
        forget_pending(group);
        finish_removal(group, false);
    } else {
        group->removal_timer = loop_timer_add(REMOVE_RETRY_MS, retry_removal, group);
    }
}

void cgroup_destroy(sandbox_cgroup *group) { cgroup_destroy_then(group, NULL, NULL); }

void cgroup_destroy_then(sandbox_cgroup *group, cgroup_removed_callback removed, void *arg)
{
    if (!group)
        return;
    group->removed = removed;
    group->removed_arg = arg;
    for (int i = 0; i < 2; i++)
        if (group->limit_event_fds[i] >= 0)
            close(group->limit_event_fds[i]);
    group->limit_event_fds[0] = group->limit_event_fds[1] = -1;
    cgroup_kill_all(group);
    if (!state.v2 && dir_for(group, "freezer"))
        write_file(dir_for(group, "freezer"), "freezer.state", "THAWED"); /* frozen tasks cannot die */
    /* Without blocking the loop: the directories go once their dying tasks have left. */
    if (remove_directories(group)) {
        finish_removal(group, true);
        return;
    }
    group->next_pending = pending_removal;
    pending_removal = group;
    group->removal_timer = loop_timer_add(REMOVE_RETRY_MS, retry_removal, group);
}

void cgroup_shutdown(void)
{
    /* The loop has stopped: finish the removals still waiting, blocking briefly. */
    while (pending_removal) {
        sandbox_cgroup *group = pending_removal;
        pending_removal = group->next_pending;
        if (group->removal_timer)
            loop_timer_cancel(group->removal_timer);
        bool removed = false;
        for (int attempt = 0; attempt < 200 && !(removed = remove_directories(group)); attempt++)
            usleep(REMOVE_RETRY_MS * 1000);
        finish_removal(group, removed);
    }
    for (size_t i = 0; i < V1_COUNT; i++) {
        if (!state.present[i])
            continue;
        if (state.v2) {
            char leaf[PATH_MAX + 16];
            snprintf(leaf, sizeof leaf, "%.4000s/daemon", state.parent[0]);
            rmdir(leaf); /* fails while the daemon is in it: fine, the service manager cleans up */
        }
        rmdir(state.parent[i]);
    }
}

/* ---- leftovers of a dead daemon ---- */

void cgroup_each_path(const char *name, void (*visit)(const char *path, void *arg), void *arg)
{
    for (size_t i = 0; i < V1_COUNT; i++) {
        if (!state.present[i])
            continue;
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%.3900s/%.64s", state.parent[i], name);
        visit(path, arg);
    }
}

/* Only what cgroup_create makes: /sys/fs/cgroup/.../cellbox/kernel-<name>, no "..", no link. */
static bool is_sandbox_group(const char *path)
{
    const char *base = strrchr(path, '/');
    if (strncmp(path, V2_ROOT "/", strlen(V2_ROOT) + 1) != 0 || strstr(path, "/..") || !base ||
        strncmp(base, "/kernel-", 8) != 0 || base - path < 8 || strncmp(base - 8, "/cellbox", 8) != 0)
        return false;
    struct stat st;
    return lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int cgroup_kill_leftover(const char *path)
{
    if (!is_sandbox_group(path))
        return -1;
    /* Frozen processes cannot die: thaw first (v1 freezer hierarchy, v2 any group). */
    write_file(path, "freezer.state", "THAWED");
    write_file(path, "cgroup.freeze", "0");
    char text[65536];
    int signalled = 0;
    if (read_file(path, "cgroup.procs", text, sizeof text) > 0) {
        for (char *save = NULL, *line = strtok_r(text, "\n", &save); line;
             line = strtok_r(NULL, "\n", &save))
            signalled += kill((pid_t)atoi(line), SIGKILL) == 0;
    }
    write_file(path, "cgroup.kill", "1"); /* v2, 5.14+: also what forks meanwhile */
    return signalled;
}

#define LEFTOVER_ATTEMPTS 200 /* of REMOVE_RETRY_MS each */

bool cgroup_remove_leftover(const char *path)
{
    if (!is_sandbox_group(path))
        return lstat(path, &(struct stat){0}) < 0; /* nothing there is fine; anything else is not ours */
    for (int attempt = 0; attempt < LEFTOVER_ATTEMPTS; attempt++) {
        if (rmdir(path) == 0 || errno == ENOENT)
            return true;
        if (errno != EBUSY)
            break;
        usleep(REMOVE_RETRY_MS * 1000); /* at start, before serving: no one waits on the loop */
        if (attempt % 20 == 19)
            cgroup_kill_leftover(path); /* a fork that raced the first kill */
    }
    log_warn("cannot remove the cgroup %s a previous daemon left: %s", path, strerror(errno));
    return false;
}
