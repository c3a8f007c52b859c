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
    loop_timer *removal_timer;
    sandbox_cgroup *next_pending;    /* in the list of groups waiting to be removed */
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

/* The daemon's own cgroup path in a hierarchy, from /proc/self/cgroup. */
static bool own_cgroup(const char *controller, char *out, size_t size)
{
    FILE *f = fopen("/proc/self/cgroup", "re");
    if (!f)
        return false;
    char line[PATH_MAX + 128];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *controllers = strchr(line, ':');
        char *path = controllers ? strchr(controllers + 1, ':') : NULL;
        if (!path)
            continue;
        *path++ = '\0';
        controllers++;
        if (!controller) {
            found = (strcmp(line, "0") == 0 && *controllers == '\0');
        } else {
            for (char *save = NULL, *c = strtok_r(controllers, ",", &save); c && !found;
                 c = strtok_r(NULL, ",", &save))
                found = strcmp(c, controller) == 0;
        }
        if (found)
            snprintf(out, size, "%s", strcmp(path, "/") == 0 ? "" : path);
    }
    fclose(f);
    return found;
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

/* On v2 the "no internal processes" rule: the daemon moves into cellbox/daemon so that
   cellbox/ can enable controllers for the sandboxes beside it. */
static int init_v2(char *why, size_t why_size)
{
    char self[PATH_MAX], base[PATH_MAX + 32], daemon_leaf[PATH_MAX + 64];
    if (!own_cgroup(NULL, self, sizeof self)) {
        snprintf(why, why_size, "cannot find the daemon's cgroup in /proc/self/cgroup");
        return -1;
    }
    snprintf(base, sizeof base, "/sys/fs/cgroup%.3000s", self);
    snprintf(state.parent[0], PATH_MAX, "%.4000s/cellbox", base);
    snprintf(daemon_leaf, sizeof daemon_leaf, "%.4000s/daemon", state.parent[0]);
    if ((mkdir(state.parent[0], 0755) < 0 && errno != EEXIST) ||
        (mkdir(daemon_leaf, 0755) < 0 && errno != EEXIST)) {
        snprintf(why, why_size, "cannot create cgroup %s: %s (cellboxd needs a delegated cgroup, "
                 "e.g. a systemd unit with Delegate=yes)", state.parent[0], strerror(errno));
        return -1;
    }
    char pid[32];
    snprintf(pid, sizeof pid, "%d", getpid());
    if (write_file(daemon_leaf, "cgroup.procs", pid) < 0) {
        snprintf(why, why_size, "cannot move the daemon into %s: %s", daemon_leaf, strerror(errno));
        return -1;
    }
    if (write_file(base, "cgroup.subtree_control", "+memory +pids +cpu") < 0 ||
        write_file(state.parent[0], "cgroup.subtree_control", "+memory +pids +cpu") < 0) {
        snprintf(why, why_size, "cannot enable the memory, pids and cpu controllers under %s: %s "
                 "(other processes in the daemon's cgroup? run cellboxd in a cgroup of its own)",
                 base, strerror(errno));
        return -1;
    }
    state.present[0] = true;
    return 0;
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
        /* Another daemon sharing our cgroup may have removed the parent when it stopped. */
        if (mkdir(state.parent[i], 0755) < 0 && errno != EEXIST) {
            snprintf(why, why_size, "cannot create cgroup %s: %s", state.parent[i], strerror(errno));
            cgroup_destroy(group);
            return NULL;
        }
        snprintf(group->path[i], PATH_MAX, "%.3900s/%.64s", state.parent[i], name);
        snprintf(group->procs[i], sizeof group->procs[i], "%.4000s/cgroup.procs", group->path[i]);
        if (mkdir(group->path[i], 0755) < 0 && errno != EEXIST) {
            snprintf(why, why_size, "cannot create cgroup %s: %s", group->path[i], strerror(errno));
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

void cgroup_procs_files(sandbox_cgroup *group, const char **out, size_t max)
{
    size_t n = 0;
    for (size_t i = 0; i < V1_COUNT && n < max; i++)
        if (state.present[i])
            out[n++] = group->procs[i];
    out[n] = NULL;
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

static void retry_removal(void *arg)
{
    sandbox_cgroup *group = arg;
    group->removal_timer = NULL;
    if (remove_directories(group)) {
        forget_pending(group);
        free(group);
    } else if (++group->removal_attempts >= REMOVE_ATTEMPTS) {
        log_warn("cgroup %s still has tasks after %d s; leaving it", group->path[0],
                 REMOVE_ATTEMPTS * REMOVE_RETRY_MS / 1000);
        forget_pending(group);
        free(group);
    } else {
        group->removal_timer = loop_timer_add(REMOVE_RETRY_MS, retry_removal, group);
    }
}

void cgroup_destroy(sandbox_cgroup *group)
{
    if (!group)
        return;
    for (int i = 0; i < 2; i++)
        if (group->limit_event_fds[i] >= 0)
            close(group->limit_event_fds[i]);
    group->limit_event_fds[0] = group->limit_event_fds[1] = -1;
    cgroup_kill_all(group);
    if (!state.v2 && dir_for(group, "freezer"))
        write_file(dir_for(group, "freezer"), "freezer.state", "THAWED"); /* frozen tasks cannot die */
    /* Without blocking the loop: the directories go once their dying tasks have left. */
    if (remove_directories(group)) {
        free(group);
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
        for (int attempt = 0; attempt < 200 && !remove_directories(group); attempt++)
            usleep(REMOVE_RETRY_MS * 1000);
        free(group);
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
