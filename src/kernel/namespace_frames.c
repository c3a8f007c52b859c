#include "kernel/namespace_frames.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/text.h"

#define KERNEL_PID_IN_SANDBOX 2 /* pid 1 is the supervisor, which forks the interpreter first */
#define MAX_CHILDREN_READ 4096  /* bytes of /proc/PID/task/PID/children: the kernel is the first */
#define MAX_REPORTED 1000
#define MAX_NAME_BYTES 200
#define MAX_WHY_BYTES 300

/* The last number of /proc/PID/status's NSpid line: the pid in its innermost namespace. 0 if
   the process is gone; -1 if it has no such line. */
static long long innermost_pid(pid_t pid, pid_t *parent)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    long long innermost = -1;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "PPid:", 5) == 0 && parent)
            *parent = (pid_t)strtol(line + 5, NULL, 10);
        if (strncmp(line, "NSpid:", 6) == 0) {
            char *last = strrchr(line, '\t');
            innermost = last ? strtoll(last + 1, NULL, 10) : -1;
        }
    }
    fclose(f);
    return innermost;
}

static bool is_kernel_of(pid_t candidate, pid_t supervisor)
{
    pid_t parent = 0;
    return innermost_pid(candidate, &parent) == KERNEL_PID_IN_SANDBOX && parent == supervisor;
}

pid_t namespace_kernel_process(pid_t supervisor)
{
    if (supervisor <= 0)
        return 0;
    long long own = innermost_pid(supervisor, NULL);
    if (own == 0)
        return 0;
    if (own != 1) /* not a sandbox's first process: the kernel runs as this very process */
        return supervisor;
    char path[96], children[MAX_CHILDREN_READ + 1];
    snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)supervisor, (int)supervisor);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, children, MAX_CHILDREN_READ);
    close(fd);
    if (n <= 0)
        return 0;
    children[n] = '\0';
    char *cursor = children, *end;
    for (long child = strtol(cursor, &end, 10); end != cursor; child = strtol(cursor, &end, 10)) {
        cursor = end;
        if (child > 0 && is_kernel_of((pid_t)child, supervisor))
            return (pid_t)child;
    }
    return 0;
}

int namespace_open_kernel_process(pid_t supervisor, char *why, size_t why_size)
{
    pid_t pid = namespace_kernel_process(supervisor);
    if (pid == 0) {
        snprintf(why, why_size, "its Python process is gone");
        return -1;
    }
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (pidfd < 0) {
        snprintf(why, why_size, "cannot open its Python process: %s", strerror(errno));
        return -1;
    }
    /* The pid was looked up before the pidfd was opened: had the process ended and its pid been
       reused meanwhile, the pidfd would name another process. Checked again now that it is
       held: the pid names the kernel for as long as the pidfd is open. */
    if (pid != supervisor && !is_kernel_of(pid, supervisor)) {
        close(pidfd);
        snprintf(why, why_size, "its Python process ended");
        return -1;
    }
    return pidfd;
}

int namespace_take_fd(int process_pidfd, json_t *fd_value, char *why, size_t why_size)
{
    if (!json_is_integer(fd_value) || json_integer_value(fd_value) < 0 ||
        json_integer_value(fd_value) > 1 << 20) {
        snprintf(why, why_size, "the kernel named no descriptor (\"fd\" must be a small integer)");
        return -1;
    }
    int fd = (int)syscall(SYS_pidfd_getfd, process_pidfd, (int)json_integer_value(fd_value), 0);
    if (fd < 0) {
        snprintf(why, why_size, "cannot take the kernel's descriptor %lld: %s",
                 (long long)json_integer_value(fd_value), strerror(errno));
        return -1;
    }
    return fd; /* pidfd_getfd sets close-on-exec on the copy */
}

/* A memfd is a regular file of the kernel's internal shmem mount: fstatfs says tmpfs, and
   F_GET_SEALS works (on other files it fails with EINVAL). A regular file on disk, a FIFO or a
   device cannot pass, so reading or writing it never blocks. A tmpfs file passes this much too
   (the kernel's own, with its own access): the seals tell it from a memfd, below. */
static int memfd_seals(int fd, struct stat *st, char *why, size_t why_size)
{
    struct statfs fs;
    if (fstat(fd, st) < 0 || fstatfs(fd, &fs) < 0) {
        snprintf(why, why_size, "cannot inspect the kernel's descriptor: %s", strerror(errno));
        return -1;
    }
    int seals = fcntl(fd, F_GET_SEALS);
    if (!S_ISREG(st->st_mode) || fs.f_type != TMPFS_MAGIC || seals < 0) {
        snprintf(why, why_size, "the kernel's descriptor is not a memfd");
        return -1;
    }
    return seals;
}

int namespace_check_sealed(int fd, long long max_bytes, long long *size, char *why, size_t why_size)
{
    struct stat st;
    int seals = memfd_seals(fd, &st, why, why_size);
    if (seals < 0)
        return -1;
    int needed = F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK;
    if ((seals & needed) != needed) {
        snprintf(why, why_size, "the kernel's namespace memfd is not sealed against changes");
        return -1;
    }
    if (st.st_size > max_bytes) {
        snprintf(why, why_size, "the kernel's namespace is %lld bytes, over the %lld-byte limit",
                 (long long)st.st_size, max_bytes);
        return -1;
    }
    *size = st.st_size;
    return 0;
}

int namespace_check_empty_buffer(int fd, char *why, size_t why_size)
{
    struct stat st;
    int seals = memfd_seals(fd, &st, why, why_size);
    if (seals < 0)
        return -1;
    /* No seal at all, not even F_SEAL_SEAL: which only a memfd made with MFD_ALLOW_SEALING has
       (every other shmem file, a tmpfs file of the sandbox's included, carries F_SEAL_SEAL). */
    if (seals != 0) {
        snprintf(why, why_size, "the kernel's buffer is not an unsealed memfd");
        return -1;
    }
    if (st.st_size != 0) {
        snprintf(why, why_size, "the kernel's buffer memfd is not empty");
        return -1;
    }
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || (flags & O_ACCMODE) != O_RDWR) {
        snprintf(why, why_size, "the kernel's buffer memfd is not open for writing");
        return -1;
    }
    return 0;
}

static json_t *bounded_string(json_t *value, size_t limit)
{
    const char *text = json_string_value(value);
    size_t length = json_string_length(value);
    return text_json_stringn(text, text_utf8_fit(text, length, limit));
}

static int rebuild_names(json_t *carried, json_t *out, json_int_t *unlisted)
{
    for (size_t i = 0; i < json_array_size(carried); i++) {
        json_t *name = json_array_get(carried, i);
        if (!json_is_string(name))
            return -1;
        if (json_array_size(out) < MAX_REPORTED)
            json_array_append_new(out, bounded_string(name, MAX_NAME_BYTES));
        else
            (*unlisted)++;
    }
    return 0;
}

static int rebuild_refusals(json_t *not_carried, json_t *out, json_int_t *unlisted)
{
    for (size_t i = 0; i < json_array_size(not_carried); i++) {
        json_t *entry = json_array_get(not_carried, i);
        json_t *name = json_object_get(entry, "name"), *reason = json_object_get(entry, "why");
        if (!json_is_string(name) || !json_is_string(reason))
            return -1;
        if (json_array_size(out) < MAX_REPORTED)
            json_array_append_new(out, json_pack("{s:o, s:o}", "name",
                                                 bounded_string(name, MAX_NAME_BYTES), "why",
                                                 bounded_string(reason, MAX_WHY_BYTES)));
        else
            (*unlisted)++;
    }
    return 0;
}

json_t *namespace_report_from_kernel(json_t *report, char *why, size_t why_size)
{
    json_t *carried = json_object_get(report, "carried");
    json_t *not_carried = json_object_get(report, "not_carried");
    json_t *bytes = json_object_get(report, "bytes");
    json_t *unlisted_value = json_object_get(report, "unlisted");
    if (!json_is_array(carried) || !json_is_array(not_carried) || !json_is_integer(bytes) ||
        json_integer_value(bytes) < 0) {
        snprintf(why, why_size,
                 "the kernel's report is not {\"carried\": [...], \"not_carried\": "
                 "[...], \"bytes\": N}");
        return NULL;
    }
    json_int_t unlisted = json_is_integer(unlisted_value) && json_integer_value(unlisted_value) > 0
                              ? json_integer_value(unlisted_value)
                              : 0;
    json_t *names = json_array(), *refusals = json_array();
    if (rebuild_names(carried, names, &unlisted) < 0 ||
        rebuild_refusals(not_carried, refusals, &unlisted) < 0) {
        json_decref(names);
        json_decref(refusals);
        snprintf(why, why_size, "the kernel's report names something that is not a string");
        return NULL;
    }
    json_t *rebuilt = json_pack("{s:o, s:o, s:I}", "carried", names, "not_carried", refusals,
                                "bytes", json_integer_value(bytes));
    if (unlisted)
        json_object_set_new(rebuilt, "unlisted", json_integer(unlisted));
    return rebuilt;
}
