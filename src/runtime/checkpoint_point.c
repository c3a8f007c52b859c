/* checkpoint_point — see checkpoint_point.h. */
#include "runtime/checkpoint_point.h"

#include <asm/prctl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MAX_CARRIED_FILES 64
#define CARRIED_PATH_MAX 1024
#define MAX_SIGNAL 64
/* How long the imaged kernel waits for "checkpoint_done" before it goes on by itself: the daemon
   answers within its own 5 s limit, or it is gone. */
#define DONE_WAIT_MS 60000
#define MAX_DONE_FRAME (64 << 10)

typedef struct carried_file {
    int fd;
    int flags;                 /* F_GETFL, less O_CREAT|O_TRUNC|O_EXCL at reopen */
    long long offset;          /* lseek(SEEK_CUR); -1 for a directory */
    char path[CARRIED_PATH_MAX];
} carried_file;

/* Everything here is in the process's own memory, so a restored copy finds it as it was. */
static struct {
    checkpoint_resume resume;
    struct sigaction actions[MAX_SIGNAL + 1];
    bool action_saved[MAX_SIGNAL + 1];
    sigset_t mask;
    char cwd[PATH_MAX];
    int channel_flags;
    int carried_count;
    carried_file carried[MAX_CARRIED_FILES];
    json_t *not_carried;       /* the report's entries, built before the image is taken */
} state;

const checkpoint_resume *checkpoint_point_resume(void) { return &state.resume; }

static int thread_count(void)
{
    FILE *status = fopen("/proc/self/status", "re");
    char line[256];
    int threads = -1;
    while (status && fgets(line, sizeof line, status))
        if (sscanf(line, "Threads: %d", &threads) == 1)
            break;
    if (status)
        fclose(status);
    return threads;
}

static void record_signals(void)
{
    for (int signal_number = 1; signal_number <= MAX_SIGNAL; signal_number++)
        state.action_saved[signal_number] =
            signal_number != SIGKILL && signal_number != SIGSTOP &&
            sigaction(signal_number, NULL, &state.actions[signal_number]) == 0;
    sigprocmask(SIG_SETMASK, NULL, &state.mask);
}

static const char *kind_of(mode_t mode, const char *target)
{
    if (S_ISSOCK(mode) || strncmp(target, "socket:", 7) == 0)
        return "socket";
    if (S_ISFIFO(mode) || strncmp(target, "pipe:", 5) == 0)
        return "pipe";
    if (S_ISCHR(mode))
        return "device";
    if (target[0] != '/')
        return "kernel object"; /* anon_inode:[eventfd], [eventpoll], memfd: ... */
    return "file";
}

static void not_carried(const char *name, const char *kind, const char *why)
{
    json_array_append_new(state.not_carried,
                          json_pack("{s:s, s:s, s:s}", "name", name, "kind", kind, "why", why));
}

/* Each open descriptor above the channel (0-3 are the sandbox's own, given again at a restore):
   a regular file or directory is carried by path, anything else is named as not carried. */
static void record_files(void)
{
    state.carried_count = 0;
    DIR *directory = opendir("/proc/self/fd");
    int own = directory ? dirfd(directory) : -1;
    struct dirent *entry;
    while (directory && (entry = readdir(directory))) {
        char *end;
        long fd = strtol(entry->d_name, &end, 10);
        if (*end || fd <= 3 || fd == own)
            continue;
        char link[64], target[CARRIED_PATH_MAX], name[32];
        snprintf(link, sizeof link, "/proc/self/fd/%ld", fd);
        snprintf(name, sizeof name, "fd %ld", fd);
        ssize_t length = readlink(link, target, sizeof target - 1);
        struct stat status;
        if (length < 0 || fstat((int)fd, &status) < 0)
            continue;
        target[length] = '\0';
        const char *kind = kind_of(status.st_mode, target);
        bool regular = S_ISREG(status.st_mode) || S_ISDIR(status.st_mode);
        if (strcmp(kind, "file") != 0 || !regular || strstr(target, " (deleted)")) {
            not_carried(name, strcmp(kind, "file") == 0 ? "file" : kind,
                        strstr(target, " (deleted)") ? "the file was deleted"
                        : strcmp(kind, "file") == 0 ? "only regular files and directories are carried"
                                                    : "only files are carried: a restore has new "
                                                      "sockets, pipes and devices");
            continue;
        }
        if (state.carried_count == MAX_CARRIED_FILES) {
            not_carried(name, "file", "more than 64 open files: the rest are not carried");
            continue;
        }
        carried_file *file = &state.carried[state.carried_count++];
        file->fd = (int)fd;
        file->flags = fcntl((int)fd, F_GETFL);
        file->offset = S_ISDIR(status.st_mode) ? -1 : (long long)lseek((int)fd, 0, SEEK_CUR);
        snprintf(file->path, sizeof file->path, "%s", target);
    }
    if (directory)
        closedir(directory);
}

static void record_children(void)
{
    char path[64], pids[4096];
    snprintf(path, sizeof path, "/proc/self/task/%ld/children", (long)syscall(SYS_gettid));
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t length = fd >= 0 ? read(fd, pids, sizeof pids - 1) : -1;
    if (fd >= 0)
        close(fd);
    pids[length > 0 ? length : 0] = '\0';
    char *save = NULL;
    for (char *pid = strtok_r(pids, " \n", &save); pid; pid = strtok_r(NULL, " \n", &save)) {
        char name[32];
        snprintf(name, sizeof name, "pid %s", pid);
        not_carried(name, "process", "a child process is not imaged: it is left to the original");
    }
}

static json_t *files_report(bool reopened_now)
{
    json_t *files = json_array();
    for (int i = 0; i < state.carried_count; i++) {
        const carried_file *file = &state.carried[i];
        json_t *entry = json_pack("{s:i, s:s, s:I, s:b}", "fd", file->fd, "path", file->path,
                                  "offset", (json_int_t)file->offset, "carried", 1);
        if (reopened_now && fcntl(file->fd, F_GETFD) < 0) /* reopen_files could not */
            json_object_set_new(entry, "carried", json_false());
        json_array_append_new(files, entry);
    }
    return files;
}

static char *report_text(bool reopened_now, json_t *extra_not_carried)
{
    json_t *not_carried_now = json_deep_copy(state.not_carried);
    json_array_extend(not_carried_now, extra_not_carried);
    json_t *report = json_pack("{s:i, s:o, s:o}", "threads", 1, "open_files",
                               files_report(reopened_now), "not_carried", not_carried_now);
    /* In a zygote's clone jansson allocates from the zygote's arena (runtime/zygote.c): its
       text is freed by jansson's own free, and the caller gets a copy from malloc. */
    char *dumped = json_dumps(report, JSON_COMPACT);
    json_decref(report);
    char *text = dumped ? strdup(dumped) : NULL;
    json_free_t jansson_free;
    json_get_alloc_funcs(NULL, &jansson_free);
    if (dumped)
        jansson_free(dumped);
    return text;
}

/* ---- the channel, outside Python: one frame out, one frame in ---- */

static bool wait_for(int fd, short events, int timeout_ms)
{
    struct pollfd ready = {.fd = fd, .events = events};
    int rc;
    do
        rc = poll(&ready, 1, timeout_ms);
    while (rc < 0 && errno == EINTR);
    return rc == 1;
}

static bool write_all(int fd, const char *data, size_t length)
{
    for (int tries = 0; length > 0 && tries < 10000; tries++) {
        ssize_t n = write(fd, data, length);
        if (n > 0) {
            data += n, length -= (size_t)n;
        } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
            if (!wait_for(fd, POLLOUT, DONE_WAIT_MS))
                return false;
        } else {
            return false;
        }
    }
    return length == 0;
}

static bool send_frame(int fd, const char *body)
{
    uint32_t length = (uint32_t)strlen(body);
    unsigned char prefix[4] = {length & 0xff, (length >> 8) & 0xff, (length >> 16) & 0xff, length >> 24};
    return write_all(fd, (const char *)prefix, 4) && write_all(fd, body, length);
}

static bool read_exactly(int fd, char *into, size_t length)
{
    for (int tries = 0; length > 0 && tries < 10000; tries++) {
        ssize_t n = read(fd, into, length);
        if (n > 0) {
            into += n, length -= (size_t)n;
        } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
            if (!wait_for(fd, POLLIN, DONE_WAIT_MS))
                return false;
        } else {
            return false;
        }
    }
    return length == 0;
}

/* The daemon's next frame: "checkpoint_done" (NULL returned), or any other body, returned for
   Python to handle (the daemon holds its requests meanwhile, so it should never come). */
static char *await_done(int fd)
{
    unsigned char prefix[4];
    if (!read_exactly(fd, (char *)prefix, 4))
        return NULL; /* the daemon is gone or silent: go on, Python finds out */
    uint32_t length = prefix[0] | prefix[1] << 8 | prefix[2] << 16 | (uint32_t)prefix[3] << 24;
    if (length > MAX_DONE_FRAME)
        return NULL;
    char *body = malloc(length + 1);
    if (!body || !read_exactly(fd, body, length)) {
        free(body);
        return NULL;
    }
    body[length] = '\0';
    if (strstr(body, "\"checkpoint_done\"")) {
        free(body);
        return NULL;
    }
    return body;
}

/* ---- after a restore ---- */

static void reapply_signals(void)
{
    for (int signal_number = 1; signal_number <= MAX_SIGNAL; signal_number++)
        if (state.action_saved[signal_number])
            sigaction(signal_number, &state.actions[signal_number], NULL);
    sigprocmask(SIG_SETMASK, &state.mask, NULL);
}

static void reopen_files(json_t *failures)
{
    for (int i = 0; i < state.carried_count; i++) {
        const carried_file *file = &state.carried[i];
        int flags = (file->flags & ~(O_CREAT | O_TRUNC | O_EXCL)) | O_CLOEXEC;
        int fd = open(file->path, flags);
        const char *why = NULL;
        if (fd < 0)
            why = strerror(errno);
        else if (fd != file->fd && dup3(fd, file->fd, (file->flags & O_CLOEXEC) ? O_CLOEXEC : 0) < 0)
            why = strerror(errno);
        else if (fd == file->fd && !(file->flags & O_CLOEXEC))
            fcntl(fd, F_SETFD, 0);
        if (fd >= 0 && fd != file->fd)
            close(fd);
        if (!why && file->offset >= 0 && lseek(file->fd, file->offset, SEEK_SET) < 0)
            why = strerror(errno);
        if (why) {
            char name[32];
            snprintf(name, sizeof name, "fd %d", file->fd);
            json_array_append_new(failures, json_pack("{s:s, s:s, s:s+}", "name", name, "kind",
                                                      "file", "why", "cannot reopen it: ", why));
            close(file->fd);
        }
    }
}

static char *come_back(uint64_t scratch_address, int channel_fd)
{
    const checkpoint_scratch_header *scratch = (const void *)(uintptr_t)scratch_address;
    munmap((void *)scratch, scratch->length);
    reapply_signals();
    json_t *failures = json_array();
    if (chdir(state.cwd) < 0)
        json_array_append_new(failures, json_pack("{s:s, s:s, s:s}", "name", state.cwd, "kind",
                                                  "directory", "why", "cannot return to it"));
    fcntl(channel_fd, F_SETFL, state.channel_flags);
    reopen_files(failures);
    char *text = report_text(true, failures);
    json_decref(failures);
    return text;
}

checkpoint_outcome checkpoint_point(int channel_fd, char **text)
{
    *text = NULL;
    int threads = thread_count();
    if (!CONTEXT_SWITCH_SUPPORTED || threads != 1) {
        char why[256];
        if (!CONTEXT_SWITCH_SUPPORTED)
            snprintf(why, sizeof why, "process images are supported on x86_64 only");
        else
            snprintf(why, sizeof why,
                     "has %d threads: a process image holds one (stop the threads the cells "
                     "started, e.g. a thread pool's shutdown(), then try again)", threads);
        *text = strdup(why);
        return CHECKPOINT_REFUSED;
    }
    json_decref(state.not_carried);
    state.not_carried = json_array();
    record_signals();
    if (!getcwd(state.cwd, sizeof state.cwd))
        snprintf(state.cwd, sizeof state.cwd, "/workspace");
    state.channel_flags = fcntl(channel_fd, F_GETFL);
    record_files();
    record_children();
#if CONTEXT_SWITCH_SUPPORTED
    unsigned long fs_base = 0;
    syscall(SYS_arch_prctl, ARCH_GET_FS, &fs_base);
    state.resume.fs_base = fs_base;
#endif
    char *report = report_text(false, NULL);
    uint64_t resumed = context_save(&state.resume.context);
    if (resumed) {
        *text = come_back(resumed, channel_fd);
        return CHECKPOINT_RESTORED;
    }
    char *frame = NULL;
    if (report && asprintf(&frame, "{\"channel\":\"cellbox\",\"type\":\"checkpoint_ready\","
                                   "\"report\":%s}", report) < 0)
        frame = NULL;
    free(report);
    /* From here until "checkpoint_done" the daemon reads this process's memory. */
    char *other = frame && send_frame(channel_fd, frame) ? await_done(channel_fd) : NULL;
    free(frame);
    *text = other ? other : strdup("");
    return CHECKPOINT_GOES_ON;
}
