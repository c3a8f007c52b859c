#include "sandbox/confined.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/buffer.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/text.h"
#include "sandbox/file_metadata.h"

/* openat2 can answer EAGAIN when a rename elsewhere raced with a ".." step; it is safe to retry. */
#define RESOLVE_ATTEMPTS 16
/* Recursive removal holds one descriptor per level; deeper trees are refused, not half-removed. */
#define MAX_REMOVE_DEPTH 512

/* ---- errors ---- */

int confined_failf(confined *c, int error, const char *fmt, ...)
{
    c->error = error;
    c->inode_limit = 0;
    va_list args;
    va_start(args, fmt);
    vsnprintf(c->why, sizeof c->why, fmt, args);
    va_end(args);
    return -1;
}

static int resolve(confined *c, const char *path, int flags, mode_t mode);

/* ENOSPC is two limits: no bytes left, or no inodes (each file and directory takes one; many
   small files use them up long before the bytes). statvfs of the nearest directory that exists
   on the way to `path` tells which: the number of inodes when none is free, else 0. */
static long long inode_limit_reached(confined *c, const char *path)
{
    char directory[PATH_MAX];
    if (confined_normalize(c, path, directory, sizeof directory) < 0)
        return 0;
    for (int depth = 0; depth < PATH_MAX / 2 && strcmp(directory, "/") != 0; depth++) {
        char *slash = strrchr(directory, '/');
        slash[slash == directory ? 1 : 0] = '\0';
        int fd = resolve(c, directory, O_PATH | O_DIRECTORY, 0);
        if (fd < 0)
            continue; /* not made yet: its parent's file system is the one */
        struct statvfs st;
        bool exhausted = fstatvfs(fd, &st) == 0 && st.f_files > 0 && st.f_favail == 0;
        close(fd);
        return exhausted ? (long long)st.f_files : 0;
    }
    return 0;
}

/* Adds to the last failure's sentence (cut at the end of c->why if it is long). */
static void append_why(confined *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void append_why(confined *c, const char *fmt, ...)
{
    size_t used = strlen(c->why);
    va_list args;
    va_start(args, fmt);
    vsnprintf(c->why + used, sizeof c->why - used, fmt, args);
    va_end(args);
}

int confined_fail(confined *c, int error, const char *path)
{
    long long inode_limit;
    switch (error) {
    case ENOENT: return confined_failf(c, error, "'%s' does not exist", path);
    case EACCES:
    case EPERM:
        return confined_failf(
            c, error, "permission denied on '%s': the sandbox user (uid %u) may not do this there",
            path, (unsigned)c->uid);
    case EROFS:
        return confined_failf(c, error,
                              "'%s' is on a read-only filesystem; write beneath %s (also named "
                              "/home/user) or /tmp",
                              path, CONFINED_WORKSPACE);
    case ELOOP:
        return confined_failf(c, error,
                              "'%s' goes through too many symbolic links, or through a /proc "
                              "link, which is never followed",
                              path);
    case EXDEV:
        return confined_failf(
            c, error, "'%s' resolves outside the sandbox; paths and links must stay inside it",
            path);
    case ENOTDIR: return confined_failf(c, error, "a component of '%s' is not a directory", path);
    case EISDIR: return confined_failf(c, error, "'%s' is a directory", path);
    case ENOTEMPTY:
        return confined_failf(c, error,
                              "'%s' is a directory that is not empty; pass recursive=true to "
                              "remove it with everything in it",
                              path);
    case EEXIST: return confined_failf(c, error, "'%s' already exists", path);
    case ENOSPC:
    case EDQUOT:
        if ((inode_limit = inode_limit_reached(c, path)) == 0)
            return confined_failf(c, error, "the sandbox's disk is full writing '%s'", path);
        confined_failf(c, error,
                       "the sandbox's disk has no free inodes writing '%s': it holds %lld files "
                       "and directories at most, and has that many; delete files you do not need",
                       path, inode_limit);
        c->inode_limit = inode_limit;
        return -1;
    case EFBIG:
        return confined_failf(c, error, "'%s' would be larger than the largest file allowed", path);
    case ENAMETOOLONG:
        return confined_failf(c, error, "'%s': a name in it or the whole path is too long", path);
    case EBUSY:
        return confined_failf(c, error, "'%s' is a mount point; it cannot be moved or removed",
                              path);
    default: return confined_failf(c, error, "'%s': %s", path, strerror(error));
    }
}

/* ---- the sandbox user's identity ---- */

void confined_init(confined *c, int root_fd, uid_t uid, gid_t gid)
{
    memset(c, 0, sizeof *c);
    c->root_fd = root_fd;
    c->uid = uid;
    c->gid = gid;
}

/* Permission checks use the filesystem uid and gid and the supplementary groups, so all three
   become the sandbox user's (who has no supplementary groups inside either). Changing the fsuid
   from 0 also drops the capabilities that bypass permissions (CAP_DAC_OVERRIDE, CAP_FOWNER...)
   until it is 0 again. Per thread; the daemon is single-threaded. */
static int become_user(confined *c)
{
    /* A filesystem uid of 0 keeps every capability: nothing would be checked at all. */
    if (c->uid == 0 || c->gid == 0)
        return confined_failf(c, EPERM,
                              "the sandbox runs as root; the daemon will not act on "
                              "its files with root's powers");
    if (c->user_depth++ > 0)
        return 0;
    c->saved_groups = NULL;
    c->saved_group_count = getgroups(0, NULL);
    if (c->saved_group_count > 0) {
        c->saved_groups = malloc((size_t)c->saved_group_count * sizeof(gid_t));
        if (!c->saved_groups)
            die("out of memory");
        c->saved_group_count = getgroups(c->saved_group_count, c->saved_groups);
        if (c->saved_group_count < 0 || setgroups(0, NULL) < 0)
            die("cannot drop supplementary groups for file operations: %s", strerror(errno));
    }
    c->saved_fsgid = (gid_t)setfsgid(c->gid);
    c->saved_fsuid = (uid_t)setfsuid(c->uid);
    /* setfsuid reports no error; an invalid id (-1) changes nothing and returns the current one. */
    if ((uid_t)setfsuid((uid_t)-1) != c->uid || (gid_t)setfsgid((gid_t)-1) != c->gid)
        die("cannot take the sandbox user's identity (uid %u) for file operations",
            (unsigned)c->uid);
    return 0;
}

static void become_daemon(confined *c)
{
    if (--c->user_depth > 0)
        return;
    setfsuid(c->saved_fsuid);
    setfsgid(c->saved_fsgid);
    if ((uid_t)setfsuid((uid_t)-1) != c->saved_fsuid)
        die("cannot restore the daemon's filesystem identity");
    if (c->saved_group_count > 0 && setgroups((size_t)c->saved_group_count, c->saved_groups) < 0)
        die("cannot restore the daemon's supplementary groups: %s", strerror(errno));
    free(c->saved_groups);
    c->saved_groups = NULL;
}

/* ---- paths ---- */

int confined_normalize(confined *c, const char *path, char *out, size_t size)
{
    if (!path || !*path)
        return confined_failf(c, EINVAL,
                              "the path is empty; give a path inside the sandbox "
                              "(relative paths are relative to %s)",
                              CONFINED_WORKSPACE);
    /* A query value cannot carry one (the server refuses it), a JSON string can: every API's
       paths come through here, so the rule is the same for all of them. */
    if (text_has_control_bytes(path, strlen(path)))
        return confined_failf(c, EINVAL,
                              "'%s' holds a control byte (below 0x20, or 0x7f): paths cannot "
                              "contain them",
                              path);
    size_t length = 0;
    if (path[0] != '/') {
        length = strlen(CONFINED_WORKSPACE);
        if (length >= size)
            return confined_fail(c, ENAMETOOLONG, path);
        memcpy(out, CONFINED_WORKSPACE, length);
    }
    for (const char *p = path; *p;) {
        while (*p == '/')
            p++;
        size_t component = strcspn(p, "/");
        if (component == 0 || (component == 1 && p[0] == '.')) {
            p += component;
            continue;
        }
        /* Refused rather than resolved: ".." is never needed in an API path, and a client that
           sends one is probably being steered by a hostile file name. */
        if (component == 2 && p[0] == '.' && p[1] == '.')
            return confined_failf(
                c, EINVAL, "'%s' contains '..'; give the path without '..' components", path);
        if (length + 1 + component >= size)
            return confined_fail(c, ENAMETOOLONG, path);
        out[length++] = '/';
        memcpy(out + length, p, component);
        length += component;
        p += component;
    }
    if (length == 0)
        out[length++] = '/';
    out[length] = '\0';
    return 0;
}

static bool is_beneath(const char *path, const char *dir)
{
    size_t length = strlen(dir);
    return strncmp(path, dir, length) == 0 && (path[length] == '\0' || path[length] == '/');
}

/* Kernel filesystems expose the sandbox's processes and devices; nothing there is a file a
   client means to move, and writes there have effects. */
static bool is_kernel_path(const char *path)
{
    return is_beneath(path, "/proc") || is_beneath(path, "/sys") || is_beneath(path, "/dev");
}

/* The same refusal after resolution, for links that lead there and for such filesystems mounted
   elsewhere. An fstatfs failure counts as a kernel filesystem: refuse when in doubt. */
static bool on_kernel_filesystem(int fd)
{
    struct statfs fs;
    if (fstatfs(fd, &fs) < 0)
        return true;
    switch ((unsigned long)fs.f_type) {
    case PROC_SUPER_MAGIC:
    case SYSFS_MAGIC:
    case DEVPTS_SUPER_MAGIC:
    case CGROUP_SUPER_MAGIC:
    case CGROUP2_SUPER_MAGIC:
    case DEBUGFS_MAGIC:
    case TRACEFS_MAGIC:
    case SECURITYFS_MAGIC:
    case BPF_FS_MAGIC: return true;
    default: return false;
    }
}

static int fail_kernel_path(confined *c, const char *path)
{
    return confined_failf(c, EACCES,
                          "'%s' is in or leads to /proc, /sys or /dev, which files cannot "
                          "be read or written in",
                          path);
}

/* Normalizes an API path and refuses kernel filesystems by name. */
static int checked_path(confined *c, const char *path, char out[PATH_MAX])
{
    if (confined_normalize(c, path, out, PATH_MAX) < 0)
        return -1;
    if (is_kernel_path(out))
        return fail_kernel_path(c, out);
    return 0;
}

/* Resolves a normalized sandbox path beneath the root. RESOLVE_IN_ROOT makes the root "/" for
   everything on the way (absolute links, ".." at the top), so no link can lead to a host file;
   RESOLVE_NO_MAGICLINKS refuses /proc/<pid>/fd-style links, which jump anywhere. -1 with errno. */
static int resolve(confined *c, const char *path, int flags, mode_t mode)
{
    struct open_how how = {
        .flags = (unsigned long long)(flags | O_CLOEXEC),
        .mode = (flags & O_CREAT) ? mode : 0,
        .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
    };
    const char *relative = path[1] ? path + 1 : ".";
    for (int attempt = 0; attempt < RESOLVE_ATTEMPTS; attempt++) {
        long fd = syscall(SYS_openat2, c->root_fd, relative, &how, sizeof how);
        if (fd >= 0)
            return (int)fd;
        if (errno != EAGAIN)
            return -1;
    }
    return -1;
}

/* resolve, refusing kernel filesystems, with the failure recorded. */
static int open_checked(confined *c, const char *path, int flags, mode_t mode)
{
    int fd = resolve(c, path, flags, mode);
    if (fd < 0)
        return confined_fail(c, errno, path);
    if (on_kernel_filesystem(fd)) {
        close(fd);
        return fail_kernel_path(c, path);
    }
    return fd;
}

/* "/a/b/c" → parent "/a/b", returns "c"; "/a" → parent "/". The caller refuses "/" itself. */
static const char *split_parent(const char *path, char parent[PATH_MAX])
{
    const char *slash = strrchr(path, '/');
    size_t length = slash == path ? 1 : (size_t)(slash - path);
    memcpy(parent, path, length);
    parent[length] = '\0';
    return slash + 1;
}

static char *join_path(const char *dir, const char *name)
{
    char *path;
    if (asprintf(&path, "%s/%s", strcmp(dir, "/") == 0 ? "" : dir, name) < 0)
        die("out of memory");
    return path;
}

/* ---- entries ---- */

static const char *type_name(mode_t mode)
{
    if (S_ISREG(mode))
        return "file";
    if (S_ISDIR(mode))
        return "dir";
    if (S_ISLNK(mode))
        return "symlink";
    return "other";
}

json_t *confined_entry(const char *path, const struct stat *st, const char *symlink_target)
{
    const char *name = path[1] ? strrchr(path, '/') + 1 : "/";
    char mode[16], modified[ISO_TIME_BUFFER];
    snprintf(mode, sizeof mode, "%04o", (unsigned)(st->st_mode & 07777));
    int64_t modified_us = (int64_t)st->st_mtim.tv_sec * 1000000 + st->st_mtim.tv_nsec / 1000;
    clock_format_iso(modified_us > 0 ? modified_us : 0, modified);
    json_t *entry = json_object();
    json_object_set_new(entry, "name", text_json_string(name));
    json_object_set_new(entry, "path", text_json_string(path));
    json_object_set_new(entry, "type", json_string(type_name(st->st_mode)));
    json_object_set_new(entry, "size", json_integer((json_int_t)st->st_size));
    json_object_set_new(entry, "mode", json_string(mode));
    json_object_set_new(entry, "uid", json_integer((json_int_t)st->st_uid));
    json_object_set_new(entry, "gid", json_integer((json_int_t)st->st_gid));
    json_object_set_new(entry, "modified_at", json_string(modified));
    if (symlink_target)
        json_object_set_new(entry, "symlink_target", text_json_string(symlink_target));
    return entry;
}

/* A file's or directory's user-defined metadata (file_metadata.h) joins its entry when it has
   any: most files have none, and their entries stay as they were. Steals `metadata`. */
static void add_metadata(json_t *entry, json_t *metadata)
{
    if (json_object_size(metadata) > 0)
        json_object_set(entry, "metadata", metadata);
    json_decref(metadata);
}

/* The entry of the file open at fd (an O_PATH|O_NOFOLLOW descriptor shows a link itself). */
static json_t *entry_of_fd(confined *c, const char *path, int fd)
{
    struct stat st;
    if (fstat(fd, &st) < 0) {
        confined_fail(c, errno, path);
        return NULL;
    }
    char target[PATH_MAX];
    ssize_t length = S_ISLNK(st.st_mode) ? readlinkat(fd, "", target, sizeof target - 1) : -1;
    if (length >= 0)
        target[length] = '\0';
    json_t *entry = confined_entry(path, &st, length >= 0 ? target : NULL);
    if (S_ISREG(st.st_mode) || S_ISDIR(st.st_mode))
        add_metadata(entry, file_metadata_read(fd, NULL));
    return entry;
}

json_t *confined_entry_of_fd(confined *c, const char *path, int fd)
{
    if (become_user(c) < 0)
        return NULL;
    json_t *entry = entry_of_fd(c, path, fd);
    become_daemon(c);
    return entry;
}

int confined_set_metadata(confined *c, int fd, const char *path, json_t *metadata)
{
    char why[512];
    if (file_metadata_check(metadata, why, sizeof why) < 0)
        return confined_failf(c, EINVAL, "invalid metadata for '%s': %s", path, why);
    if (become_user(c) < 0)
        return -1;
    int rc = file_metadata_replace(fd, metadata);
    if (rc < 0 && errno == ENOTSUP)
        confined_failf(c, ENOTSUP,
                       "the file system holding '%s' keeps no extended attributes, so it cannot "
                       "hold metadata: write the file under %s, or without metadata",
                       path, CONFINED_WORKSPACE);
    else if (rc < 0)
        confined_fail(c, errno, path);
    become_daemon(c);
    return rc;
}

/* ---- reading and writing ---- */

static int fail_not_regular(confined *c, const char *path, mode_t mode)
{
    if (S_ISDIR(mode))
        return confined_fail(c, EISDIR, path);
    return confined_failf(c, EINVAL,
                          "'%s' is not a regular file (a FIFO, socket or device); only "
                          "regular files can be read or written",
                          path);
}

static int open_read_as_user(confined *c, const char *path, struct stat *st)
{
    /* Looked at through an O_PATH descriptor first: a FIFO or device is refused before it is ever
       opened for real (opening some devices has effects). */
    int probe = open_checked(c, path, O_PATH, 0);
    if (probe < 0)
        return -1;
    int rc = fstat(probe, st);
    close(probe);
    if (rc < 0)
        return confined_fail(c, errno, path);
    if (!S_ISREG(st->st_mode))
        return fail_not_regular(c, path, st->st_mode);
    /* Resolved again, so checked again once open: O_NONBLOCK keeps a FIFO swapped in meanwhile
       from blocking the daemon, O_NOCTTY a terminal from becoming ours. */
    int fd = open_checked(c, path, O_RDONLY | O_NONBLOCK | O_NOCTTY, 0);
    if (fd < 0)
        return -1;
    if (fstat(fd, st) < 0 || !S_ISREG(st->st_mode)) {
        close(fd);
        return fail_not_regular(c, path, st->st_mode);
    }
    return fd;
}

int confined_open_read(confined *c, const char *path, struct stat *st)
{
    char full[PATH_MAX];
    if (checked_path(c, path, full) < 0 || become_user(c) < 0)
        return -1;
    int fd = open_read_as_user(c, full, st);
    become_daemon(c);
    return fd;
}

/* mkdir -p, one component at a time: each existing step is resolved from the root again (a link
   there leads somewhere inside the sandbox, never out), and each new one is made with mkdirat in
   the directory just resolved, which never follows a link. */
static int make_directories(confined *c, const char *path, mode_t mode, bool *existed)
{
    int fd = resolve(c, path, O_PATH | O_DIRECTORY, 0);
    *existed = fd >= 0;
    if (fd < 0 && errno != ENOENT) {
        if (errno == ENOTDIR)
            return confined_failf(c, EEXIST,
                                  "'%s' or one of its parents is a file, not a directory", path);
        return confined_fail(c, errno, path);
    }
    if (fd >= 0) {
        bool kernel = on_kernel_filesystem(fd);
        close(fd);
        return kernel ? fail_kernel_path(c, path) : 0;
    }
    /* The deepest ancestor that exists; "/" always does. */
    char prefix[PATH_MAX];
    snprintf(prefix, sizeof prefix, "%s", path);
    int parent = -1;
    while (parent < 0) {
        char *slash = strrchr(prefix, '/');
        slash[slash == prefix ? 1 : 0] = '\0';
        parent = resolve(c, prefix, O_PATH | O_DIRECTORY, 0);
        if (parent < 0 && (errno != ENOENT || strcmp(prefix, "/") == 0))
            return confined_fail(c, errno, prefix);
    }
    size_t length = strcmp(prefix, "/") == 0 ? 0 : strlen(prefix);
    for (const char *next = path + length + 1; parent >= 0 && *next;) {
        if (on_kernel_filesystem(parent)) {
            close(parent);
            return fail_kernel_path(c, prefix);
        }
        size_t component = strcspn(next, "/");
        snprintf(prefix + length, sizeof prefix - length, "/%.*s", (int)component, next);
        length += 1 + component;
        next += component + (next[component] == '/');
        int made = mkdirat(parent, prefix + length - component, mode);
        int error = errno;
        close(parent);
        if (made < 0 && error != EEXIST)
            return confined_fail(c, error, prefix);
        parent = resolve(c, prefix, O_PATH | O_DIRECTORY, 0);
        if (parent < 0 && errno == ENOTDIR)
            return confined_failf(c, EEXIST, "'%s' is a file, not a directory", prefix);
        if (parent < 0)
            return confined_fail(c, errno, prefix);
    }
    close(parent);
    return 0;
}

static int make_parent_directories(confined *c, const char *path)
{
    char parent[PATH_MAX];
    split_parent(path, parent);
    bool existed;
    return strcmp(parent, "/") == 0 ? 0 : make_directories(c, parent, 0755, &existed);
}

static int open_write_as_user(confined *c, const char *path, mode_t mode, bool *existed)
{
    if (strcmp(path, "/") == 0)
        return confined_fail(c, EISDIR, path);
    if (make_parent_directories(c, path) < 0)
        return -1;
    int probe = resolve(c, path, O_PATH, 0);
    *existed = probe >= 0;
    if (probe < 0 && errno != ENOENT)
        return confined_fail(c, errno, path);
    if (probe >= 0) {
        struct stat st;
        bool kernel = on_kernel_filesystem(probe);
        int rc = fstat(probe, &st);
        close(probe);
        if (kernel)
            return fail_kernel_path(c, path);
        if (rc < 0)
            return confined_fail(c, errno, path);
        if (!S_ISREG(st.st_mode))
            return fail_not_regular(c, path, st.st_mode);
    }
    /* No O_TRUNC: the file is emptied only once it is known to be a regular file. */
    int fd = open_checked(c, path, O_WRONLY | O_CREAT | O_NONBLOCK | O_NOCTTY, mode & 0777);
    if (fd < 0)
        return -1;
    struct stat st = {0};
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return fail_not_regular(c, path, st.st_mode);
    }
    /* fchmod: the mode asked for, whatever the daemon's umask. */
    if (ftruncate(fd, 0) < 0 || (!*existed && fchmod(fd, mode & 0777) < 0)) {
        int error = errno;
        close(fd);
        return confined_fail(c, error, path);
    }
    return fd;
}

int confined_open_write(confined *c, const char *path, mode_t mode, bool *existed)
{
    char full[PATH_MAX];
    if (checked_path(c, path, full) < 0 || become_user(c) < 0)
        return -1;
    int fd = open_write_as_user(c, full, mode, existed);
    become_daemon(c);
    return fd;
}

void confined_discard(confined *c, const char *path, int fd)
{
    char full[PATH_MAX], parent_path[PATH_MAX];
    struct stat open_file, there;
    if (checked_path(c, path, full) < 0 || strcmp(full, "/") == 0 || fstat(fd, &open_file) < 0)
        return;
    const char *name = split_parent(full, parent_path);
    if (become_user(c) < 0)
        return;
    int parent = resolve(c, parent_path, O_PATH | O_DIRECTORY, 0);
    if (parent >= 0 && fstatat(parent, name, &there, AT_SYMLINK_NOFOLLOW) == 0 &&
        there.st_dev == open_file.st_dev && there.st_ino == open_file.st_ino)
        unlinkat(parent, name, 0);
    if (parent >= 0)
        close(parent);
    become_daemon(c);
}

int confined_open_directory(confined *c, const char *path)
{
    char full[PATH_MAX];
    if (checked_path(c, path, full) < 0 || become_user(c) < 0)
        return -1;
    int fd = open_checked(c, full, O_RDONLY | O_DIRECTORY | O_NONBLOCK, 0);
    become_daemon(c);
    return fd;
}

int confined_set_attributes(confined *c, int fd, mode_t mode, const struct timespec *modified)
{
    if (become_user(c) < 0)
        return -1;
    int rc = fchmod(fd, mode & 0777);
    if (rc == 0 && modified) {
        struct timespec times[2] = {{.tv_nsec = UTIME_OMIT}, *modified};
        rc = futimens(fd, times);
    }
    int error = errno;
    become_daemon(c);
    if (rc < 0)
        return confined_failf(c, error, "cannot set the mode or time of a file: %s",
                              strerror(error));
    return 0;
}

/* ---- stat, mkdir, move, remove, symlink ---- */

static json_t *stat_as_user(confined *c, const char *path)
{
    /* O_NOFOLLOW with O_PATH opens a final link itself, so the entry shows the link. */
    int fd = open_checked(c, path, O_PATH | (strcmp(path, "/") == 0 ? 0 : O_NOFOLLOW), 0);
    if (fd < 0)
        return NULL;
    json_t *entry = entry_of_fd(c, path, fd);
    close(fd);
    return entry;
}

json_t *confined_stat(confined *c, const char *path)
{
    char full[PATH_MAX];
    if (checked_path(c, path, full) < 0 || become_user(c) < 0)
        return NULL;
    json_t *entry = stat_as_user(c, full);
    become_daemon(c);
    return entry;
}

json_t *confined_mkdir(confined *c, const char *path, mode_t mode, bool *existed)
{
    char full[PATH_MAX];
    if (checked_path(c, path, full) < 0 || become_user(c) < 0)
        return NULL;
    json_t *entry = make_directories(c, full, mode, existed) < 0 ? NULL : stat_as_user(c, full);
    become_daemon(c);
    return entry;
}

/* The parent directory of `path`, resolved, and the last component's name in it. Operations on
   that name (unlinkat, renameat2, symlinkat, fstatat with AT_SYMLINK_NOFOLLOW) never follow it. */
static int open_parent(confined *c, const char *path, const char **name)
{
    char parent[PATH_MAX];
    if (strcmp(path, "/") == 0)
        return confined_failf(c, EBUSY,
                              "the sandbox's root directory cannot be moved, removed or replaced");
    *name = split_parent(path, parent);
    return open_checked(c, parent, O_PATH | O_DIRECTORY, 0);
}

static json_t *move_as_user(confined *c, const char *from, const char *to)
{
    const char *from_name, *to_name;
    struct stat st;
    int from_dir = open_parent(c, from, &from_name);
    if (from_dir < 0)
        return NULL;
    int to_dir = -1;
    json_t *entry = NULL;
    if (fstatat(from_dir, from_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        confined_fail(c, errno, from);
    else if (make_parent_directories(c, to) == 0 && (to_dir = open_parent(c, to, &to_name)) >= 0) {
        if (renameat2(from_dir, from_name, to_dir, to_name, 0) == 0)
            entry = stat_as_user(c, to);
        else if (errno == EXDEV) /* not an escape here: two filesystems (say /workspace and /tmp) */
            confined_failf(c, EINVAL,
                           "cannot move '%s' to '%s': they are on different filesystems; "
                           "copy it, then remove the original",
                           from, to);
        else if (errno == EINVAL)
            confined_failf(c, EINVAL, "cannot move '%s' into itself ('%s')", from, to);
        else if (errno == ENOTEMPTY || errno == EEXIST)
            confined_failf(c, errno,
                           "cannot move '%s' to '%s': a directory that is not empty is there", from,
                           to);
        else
            confined_fail(c, errno, errno == ENOENT ? from : to);
    }
    close(from_dir);
    if (to_dir >= 0)
        close(to_dir);
    return entry;
}

json_t *confined_move(confined *c, const char *from, const char *to)
{
    char full_from[PATH_MAX], full_to[PATH_MAX];
    if (checked_path(c, from, full_from) < 0 || checked_path(c, to, full_to) < 0 ||
        become_user(c) < 0)
        return NULL;
    json_t *entry = move_as_user(c, full_from, full_to);
    become_daemon(c);
    return entry;
}

/* Whether the entry `name` in dirfd ("": dirfd itself) is where a filesystem is mounted:
   /workspace, /tmp, a volume. Removing one fails only at the very end (EBUSY, or EROFS from its
   read-only parent), after everything in it is gone: so it is refused before anything is
   touched, and a walk does not enter one. */
static bool is_mount_point(int dirfd, const char *name)
{
    struct statx stx;
    int flags = AT_SYMLINK_NOFOLLOW | (*name ? 0 : AT_EMPTY_PATH);
    return statx(dirfd, name, flags, 0, &stx) == 0 &&
           (stx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) &&
           (stx.stx_attributes & STATX_ATTR_MOUNT_ROOT);
}

static int fail_mount_point(confined *c, const char *path)
{
    return confined_failf(c, EBUSY,
                          "'%s' is a mount point (the workspace, /tmp or a volume) and cannot be "
                          "removed; remove the files in it instead",
                          path);
}

/* Empties the directory open at dirfd (which this function closes). Each child is removed by name
   in dirfd, and subdirectories are opened relative to dirfd with O_NOFOLLOW: a link, even one
   swapped in while we work, is removed as a link and never entered. */
static int remove_contents(confined *c, int dirfd, const char *path, int depth, size_t *removed)
{
    if (depth > MAX_REMOVE_DEPTH) {
        close(dirfd);
        return confined_failf(c, ELOOP,
                              "'%s' is nested more than %d directories deep; remove its inner "
                              "directories first",
                              path, MAX_REMOVE_DEPTH);
    }
    if (on_kernel_filesystem(dirfd)) {
        close(dirfd);
        return fail_kernel_path(c, path);
    }
    DIR *dir = fdopendir(dirfd);
    if (!dir) {
        close(dirfd);
        return confined_fail(c, errno, path);
    }
    int result = 0;
    struct dirent *child;
    while (result == 0 && (errno = 0, child = readdir(dir)) != NULL) {
        const char *name = child->d_name;
        if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
            continue;
        /* a directory is entered first (as rm -r does), so that a walk that stops says what
           it removed beneath; d_type is only a hint, unlinkat's EISDIR has the last word */
        if (child->d_type != DT_DIR && unlinkat(dirfd, name, 0) == 0) {
            ++*removed;
            continue;
        }
        if (child->d_type != DT_DIR && errno == ENOENT)
            continue;
        char *child_path = join_path(path, name);
        if (child->d_type != DT_DIR && errno != EISDIR) {
            result = confined_fail(c, errno, child_path);
        } else {
            int subdir =
                openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
            if (subdir < 0) {
                result = errno == ENOENT ? 0 : confined_fail(c, errno, child_path);
            } else if (is_mount_point(subdir, "")) {
                close(subdir);
                result = fail_mount_point(c, child_path);
            } else if (remove_contents(c, subdir, child_path, depth + 1, removed) < 0) {
                result = -1;
            } else if (unlinkat(dirfd, name, AT_REMOVEDIR) == 0) {
                ++*removed;
            } else if (errno != ENOENT) {
                result = confined_fail(c, errno, child_path);
            }
        }
        free(child_path);
    }
    if (result == 0 && errno != 0)
        result = confined_fail(c, errno, path);
    closedir(dir);
    return result;
}

/* Entries removed while readdir runs may hide others from it: a few passes, then the directory's
   own removal says whether it is empty. */
static int remove_tree(confined *c, int parent, const char *name, const char *path, size_t *removed)
{
    for (int pass = 0; pass < 3; pass++) {
        int dirfd =
            openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        if (dirfd < 0)
            return confined_fail(c, errno, path);
        if (remove_contents(c, dirfd, path, 1, removed) < 0)
            return -1;
        if (unlinkat(parent, name, AT_REMOVEDIR) == 0)
            return 0;
        if (errno != ENOTEMPTY)
            return confined_fail(c, errno, path);
    }
    return confined_failf(c, ENOTEMPTY,
                          "'%s' kept filling up while it was being removed; stop what "
                          "writes there and try again",
                          path);
}

static int remove_as_user(confined *c, const char *path, bool recursive)
{
    const char *name;
    struct stat st;
    int parent = open_parent(c, path, &name);
    if (parent < 0)
        return -1;
    int rc;
    size_t removed = 0;
    if (fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        rc = confined_fail(c, errno, path);
    else if (!S_ISDIR(st.st_mode)) /* a link is removed, never its target */
        rc = unlinkat(parent, name, 0) < 0 ? confined_fail(c, errno, path) : 0;
    else if (is_mount_point(parent, name))
        rc = fail_mount_point(c, path);
    else if (recursive)
        rc = remove_tree(c, parent, name, path, &removed);
    else
        rc = unlinkat(parent, name, AT_REMOVEDIR) < 0 ? confined_fail(c, errno, path) : 0;
    if (rc < 0 && removed > 0) /* a walk that stopped half-way says so */
        append_why(c,
                   "; %zu entr%s beneath '%s' had been removed before that, the rest is "
                   "still there",
                   removed, removed == 1 ? "y" : "ies", path);
    close(parent);
    return rc;
}

int confined_remove(confined *c, const char *path, bool recursive)
{
    char full[PATH_MAX];
    if (checked_path(c, path, full) < 0 || become_user(c) < 0)
        return -1;
    int rc = remove_as_user(c, full, recursive);
    become_daemon(c);
    return rc;
}

static int symlink_as_user(confined *c, const char *target, const char *path)
{
    const char *name;
    struct stat st;
    if (make_parent_directories(c, path) < 0)
        return -1;
    int parent = open_parent(c, path, &name);
    if (parent < 0)
        return -1;
    int rc = symlinkat(target, parent, name);
    if (rc < 0 && errno == EEXIST && fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
        if (S_ISDIR(st.st_mode))
            errno = EEXIST;
        else if (unlinkat(parent, name, 0) == 0)
            rc = symlinkat(target, parent, name);
    }
    if (rc < 0)
        confined_fail(c, errno, path);
    close(parent);
    return rc;
}

int confined_symlink(confined *c, const char *target, const char *path)
{
    char full[PATH_MAX];
    if (checked_path(c, path, full) < 0 || become_user(c) < 0)
        return -1;
    int rc = symlink_as_user(c, target, full);
    become_daemon(c);
    return rc;
}

/* ---- walking and listing ---- */

static int compare_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void free_names(char **names, size_t count)
{
    for (size_t i = 0; i < count; i++)
        free(names[i]);
    free(names);
}

/* The names in a directory, sorted; read all at once so that only dirfd stays open while the
   walk descends. NULL (with *count 0 for an empty directory) or a failure recorded. */
static char **read_names(confined *c, int dirfd, const char *path, size_t *count, bool *failed)
{
    *count = 0;
    *failed = false;
    int copy = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *dir = copy < 0 ? NULL : fdopendir(copy);
    if (!dir) {
        if (copy >= 0)
            close(copy);
        *failed = true;
        confined_fail(c, errno, path);
        return NULL;
    }
    char **names = NULL;
    size_t capacity = 0;
    struct dirent *child;
    while ((child = readdir(dir)) != NULL) {
        if (strcmp(child->d_name, ".") == 0 || strcmp(child->d_name, "..") == 0)
            continue;
        if (*count == CONFINED_MAX_DIRECTORY) {
            *failed = true;
            confined_failf(c, E2BIG, "'%s' holds more than %d entries; too many to read at once",
                           path, CONFINED_MAX_DIRECTORY);
            break;
        }
        if (*count == capacity) {
            capacity = capacity ? capacity * 2 : 64;
            names = realloc(names, capacity * sizeof *names);
            if (!names)
                die("out of memory");
        }
        names[(*count)++] = strdup(child->d_name);
    }
    closedir(dir);
    if (*failed) {
        free_names(names, *count);
        *count = 0;
        return NULL;
    }
    if (*count > 1)
        qsort(names, *count, sizeof *names, compare_names);
    return names;
}

typedef struct walk {
    confined *c;
    confined_visit visit;
    void *arg;
    const char *top; /* the directory walked, for messages */
    size_t visited, max_entries;
} walk;

static int walk_directory(walk *w, int dirfd, const char *path, int depth)
{
    size_t count;
    bool failed;
    char **names = read_names(w->c, dirfd, path, &count, &failed);
    if (failed)
        return -1;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < count; i++) {
        struct stat st;
        if (fstatat(dirfd, names[i], &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue; /* removed meanwhile */
        char *child_path = join_path(path, names[i]);
        if (w->max_entries && ++w->visited > w->max_entries)
            rc = confined_failf(w->c, E2BIG,
                                "'%s' holds more than %zu entries; ask for fewer levels "
                                "or a subdirectory",
                                w->top, w->max_entries);
        else
            rc = w->visit(w->arg, dirfd, names[i], child_path, &st);
        if (rc == 0 && S_ISDIR(st.st_mode) && depth > 1 && !is_kernel_path(child_path)) {
            /* O_NOFOLLOW: a directory swapped for a link since fstatat is not entered. An
               unreadable directory is listed but not entered, as `ls -R` would; kernel
               filesystems are listed but never entered. */
            int subdir = openat(dirfd, names[i],
                                O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
            if (subdir >= 0 && !on_kernel_filesystem(subdir))
                rc = walk_directory(w, subdir, child_path, depth - 1);
            if (subdir >= 0)
                close(subdir);
        }
        free(child_path);
    }
    free_names(names, count);
    return rc;
}

static int walk_as_user(confined *c, const char *path, int depth, size_t max_entries,
                        confined_visit visit, void *arg)
{
    int dirfd = open_checked(c, path, O_RDONLY | O_DIRECTORY | O_NONBLOCK, 0);
    if (dirfd < 0) {
        if (c->error == ENOTDIR) /* the path itself is a file, or a component is */
            confined_failf(c, ENOTDIR, "'%s' is not a directory", path);
        return -1;
    }
    walk w = {.c = c, .visit = visit, .arg = arg, .top = path, .max_entries = max_entries};
    int rc = walk_directory(&w, dirfd, path, depth);
    close(dirfd);
    return rc;
}

int confined_walk(confined *c, const char *path, int depth, size_t max_entries,
                  confined_visit visit, void *arg)
{
    char full[PATH_MAX];
    if (checked_path(c, path, full) < 0 || become_user(c) < 0)
        return -1;
    int rc = walk_as_user(c, full, depth, max_entries, visit, arg);
    become_daemon(c);
    return rc;
}

int confined_open_entry(confined *c, int dirfd, const char *name, const char *entry_path)
{
    if (become_user(c) < 0)
        return -1;
    int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    struct stat st = {0};
    if (fd < 0)
        confined_fail(c, errno, entry_path);
    else if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        fd = fail_not_regular(c, entry_path, st.st_mode);
    }
    become_daemon(c);
    return fd;
}

static int add_to_list(void *arg, int dirfd, const char *name, const char *entry_path,
                       const struct stat *st)
{
    char target[PATH_MAX];
    ssize_t length = S_ISLNK(st->st_mode) ? readlinkat(dirfd, name, target, sizeof target - 1) : -1;
    if (length >= 0)
        target[length] = '\0';
    json_t *entry = confined_entry(entry_path, st, length >= 0 ? target : NULL);
    if (S_ISREG(st->st_mode) || S_ISDIR(st->st_mode))
        add_metadata(entry, file_metadata_read(dirfd, name));
    json_array_append_new(arg, entry);
    return 0;
}

static int compare_entry_paths(const void *a, const void *b)
{
    return strcmp(json_string_value(json_object_get(*(json_t *const *)a, "path")),
                  json_string_value(json_object_get(*(json_t *const *)b, "path")));
}

/* The walk visits in name order directory by directory; the API promises the whole list in path
   order. */
static json_t *sorted_by_path(json_t *entries)
{
    size_t count = json_array_size(entries);
    json_t **items = malloc((count ? count : 1) * sizeof *items);
    if (!items)
        die("out of memory");
    for (size_t i = 0; i < count; i++)
        items[i] = json_incref(json_array_get(entries, i));
    qsort(items, count, sizeof *items, compare_entry_paths);
    json_t *sorted = json_array();
    for (size_t i = 0; i < count; i++)
        json_array_append_new(sorted, items[i]);
    free(items);
    json_decref(entries);
    return sorted;
}

json_t *confined_list(confined *c, const char *path, int depth)
{
    json_t *entries = json_array();
    if (confined_walk(c, path, depth, CONFINED_MAX_ENTRIES, add_to_list, entries) < 0) {
        json_decref(entries);
        return NULL;
    }
    return sorted_by_path(entries);
}
