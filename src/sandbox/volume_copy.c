/* volume_copy — a workspace volume copied while its sandbox runs: the whole of a snapshot's or a
 * fork's files (docs/architecture.md, "Snapshots and hibernation").
 *
 * ext4: the volume is one image file on a loop device. The mount is frozen (FIFREEZE: every
 * write the sandbox made is on the image and no new one starts), the image copied, the mount
 * thawed. The copy is a reflink (FICLONE: no data copied) where the data directory's filesystem
 * shares extents (btrfs, xfs), else its data extents only (SEEK_DATA / SEEK_HOLE with
 * copy_file_range: a 1 GiB volume holding 10 MiB copies about 10 MiB).
 * tmpfs: the tree is copied file by file, through descriptors only, never following a link: the
 * sandbox's files are hostile and a link it planted must not make the daemon read a host file. */
#include "sandbox/volume.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define COPY_MAX_DEPTH 256       /* deeper trees are refused (each level holds a descriptor) */
#define COPY_MAX_ENTRIES 1000000 /* a tmpfs volume holds one inode per 16 KiB at most */

/* Copies `length` bytes at `offset` of src to the same offset of dst: copy_file_range (in the
   kernel, shared extents where the filesystem can), or read and write where the two files are
   on filesystems that do not copy between each other. Stops early at the end of src (a file
   that shrank while it was read). `copied` grows by what was written. 0, or -1 with errno. */
static int copy_range(int src, int dst, off_t offset, off_t length, long long *copied)
{
    loff_t in = offset, out = offset, end = offset + length;
    bool in_kernel = true;
    static char chunk[1 << 16]; /* the loop's thread only */
    while (in < end) {
        size_t want = (size_t)(end - in);
        ssize_t n = -1;
        if (in_kernel) {
            n = copy_file_range(src, &in, dst, &out, want, 0);
            if (n < 0 &&
                (errno == EXDEV || errno == EINVAL || errno == EOPNOTSUPP || errno == ENOSYS)) {
                in_kernel = false;
                continue;
            }
        } else {
            n = pread(src, chunk, want < sizeof chunk ? want : sizeof chunk, in);
            if (n > 0 && (n = pwrite(dst, chunk, (size_t)n, out)) > 0)
                in += n, out += n;
        }
        if (n < 0)
            return -1;
        if (n == 0)
            return 0;
        *copied += n;
    }
    return 0;
}

/* ---- ext4: the image ---- */

/* Copies the data extents of src into dst (same size, sparse); `copied` gets their bytes. */
static int copy_data_extents(int src, int dst, long long *copied, char *why, size_t why_size)
{
    *copied = 0;
    for (off_t offset = 0;;) {
        off_t data = lseek(src, offset, SEEK_DATA);
        if (data < 0 && errno == ENXIO)
            return 0; /* no data past offset */
        off_t hole = data < 0 ? -1 : lseek(src, data, SEEK_HOLE);
        if (hole < 0 || copy_range(src, dst, data, hole - data, copied) < 0) {
            int error = errno;
            snprintf(why, why_size, "cannot copy the workspace image: %s", strerror(error));
            errno = error;
            return -1;
        }
        offset = hole;
    }
}

static int copy_image(const char *from_image, const char *to_image, volume_copy_stats *stats,
                      char *why, size_t why_size)
{
    int src = open(from_image, O_RDONLY | O_CLOEXEC);
    if (src < 0) {
        snprintf(why, why_size, "cannot open the workspace image %s: %s", from_image,
                 strerror(errno));
        return -1;
    }
    struct stat st;
    int dst =
        fstat(src, &st) < 0 ? -1 : open(to_image, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (dst < 0) {
        snprintf(why, why_size, "cannot create %s: %s", to_image, strerror(errno));
        close(src);
        return -1;
    }
    int rc = 0;
    if (ioctl(dst, FICLONE, src) == 0) {
        stats->reflinked = true;
    } else if (ftruncate(dst, st.st_size) < 0) {
        snprintf(why, why_size, "cannot size %s: %s", to_image, strerror(errno));
        rc = -1;
    } else {
        rc = copy_data_extents(src, dst, &stats->bytes, why, why_size);
    }
    int saved = errno;
    if (rc == 0 && fsync(dst) < 0) {
        saved = errno;
        snprintf(why, why_size, "cannot write %s: %s", to_image, strerror(errno));
        rc = -1;
    }
    close(src);
    close(dst);
    if (rc < 0) {
        unlink(to_image);
        errno = saved;
    }
    return rc;
}

/* Freezes the mount so that the image holds every write the sandbox finished and none starts
   while it is read; thawed whatever the copy's outcome (a mount left frozen would hang the
   sandbox's next write). */
static int copy_frozen_image(const char *from_image, const char *from_mount, const char *to_image,
                             volume_copy_stats *stats, char *why, size_t why_size)
{
    int mount_fd = open(from_mount, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (mount_fd < 0) {
        snprintf(why, why_size, "cannot open the workspace %s: %s", from_mount, strerror(errno));
        return -1;
    }
    /* EBUSY: already frozen (a paused sandbox's fork); EOPNOTSUPP: nothing to freeze. Both
       copy as is after a sync. */
    bool frozen = ioctl(mount_fd, FIFREEZE, 0) == 0;
    if (!frozen)
        syncfs(mount_fd);
    int rc = copy_image(from_image, to_image, stats, why, why_size);
    int saved = errno;
    if (frozen && ioctl(mount_fd, FITHAW, 0) < 0 && rc == 0) {
        snprintf(why, why_size, "cannot thaw the workspace %s: %s", from_mount, strerror(errno));
        rc = -1;
    }
    close(mount_fd);
    errno = saved;
    return rc;
}

/* ---- tmpfs (or any directory): the tree ---- */

typedef struct tree_copy {
    uid_t uid; /* owner of what is made; (uid_t)-1 keeps the source's */
    gid_t gid;
    volume_copy_stats *stats;
    char *why;
    size_t why_size;
} tree_copy;

static int tree_fail(tree_copy *t, const char *what, const char *name)
{
    int error = errno;
    snprintf(t->why, t->why_size, "cannot copy the workspace: %s %.200s: %s", what, name,
             strerror(error));
    errno = error;
    return -1;
}

static void set_owner_and_times(tree_copy *t, int fd, const struct stat *st)
{
    if (fchown(fd, t->uid == (uid_t)-1 ? st->st_uid : t->uid,
               t->gid == (gid_t)-1 ? st->st_gid : t->gid) < 0) {
        /* root makes these: only a filesystem without owners refuses, and then the files
           belong to the daemon's uid, not to anyone else */
    }
    fchmod(fd, st->st_mode & 07777 & ~(mode_t)(S_ISUID | S_ISGID));
    struct timespec times[2] = {st->st_atim, st->st_mtim};
    futimens(fd, times);
}

static int copy_file_data(int src, int dst, long long size, tree_copy *t, const char *name)
{
    return copy_range(src, dst, 0, size, &t->stats->bytes) < 0 ? tree_fail(t, "writing", name) : 0;
}

static int copy_entry(tree_copy *t, int from_dir, int to_dir, const char *name, int depth);

static int copy_directory(tree_copy *t, int from, int to, int depth)
{
    DIR *dir = fdopendir(from);
    if (!dir) {
        close(from);
        return tree_fail(t, "reading", "a directory");
    }
    int rc = 0;
    for (struct dirent *entry; rc == 0 && (entry = readdir(dir));) {
        if (strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0)
            continue;
        rc = copy_entry(t, dirfd(dir), to, entry->d_name, depth + 1);
    }
    closedir(dir);
    return rc;
}

static int copy_entry(tree_copy *t, int from_dir, int to_dir, const char *name, int depth)
{
    if (depth > COPY_MAX_DEPTH || ++t->stats->files > COPY_MAX_ENTRIES) {
        errno = E2BIG;
        return tree_fail(t, "too deep or too many entries at", name);
    }
    struct stat st;
    if (fstatat(from_dir, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return errno == ENOENT ? 0 : tree_fail(t, "reading", name); /* gone meanwhile */
    if (S_ISLNK(st.st_mode)) {
        char target[4096];
        ssize_t n = readlinkat(from_dir, name, target, sizeof target - 1);
        if (n < 0)
            return tree_fail(t, "reading the link", name);
        target[n] = '\0';
        if (symlinkat(target, to_dir, name) < 0)
            return tree_fail(t, "making the link", name);
        fchownat(to_dir, name, t->uid == (uid_t)-1 ? st.st_uid : t->uid,
                 t->gid == (gid_t)-1 ? st.st_gid : t->gid, AT_SYMLINK_NOFOLLOW);
        return 0;
    }
    if (S_ISDIR(st.st_mode)) {
        int from = openat(from_dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (from < 0)
            return tree_fail(t, "opening", name);
        if (mkdirat(to_dir, name, 0700) < 0 && errno != EEXIST) {
            close(from);
            return tree_fail(t, "making", name);
        }
        int to = openat(to_dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (to < 0) {
            close(from);
            return tree_fail(t, "opening the copy of", name);
        }
        int rc = copy_directory(t, from, to, depth);
        set_owner_and_times(t, to, &st); /* after its entries: their making changes its times */
        close(to);
        return rc;
    }
    if (!S_ISREG(st.st_mode))
        return 0; /* FIFOs, sockets, devices (nodev): nothing a copy can carry */
    int from = openat(from_dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (from < 0)
        return errno == ENOENT ? 0 : tree_fail(t, "opening", name);
    int to = openat(to_dir, name, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (to < 0) {
        close(from);
        return tree_fail(t, "creating the copy of", name);
    }
    int rc = copy_file_data(from, to, st.st_size, t, name);
    if (rc == 0)
        set_owner_and_times(t, to, &st);
    close(from);
    close(to);
    return rc;
}

int volume_copy_tree(const char *from_dir, const char *to_dir, uid_t uid, gid_t gid,
                     volume_copy_stats *stats, char *why, size_t why_size)
{
    tree_copy t = {.uid = uid, .gid = gid, .stats = stats, .why = why, .why_size = why_size};
    int from = open(from_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (from < 0)
        return tree_fail(&t, "opening", from_dir);
    int to = open(to_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (to < 0) {
        close(from);
        return tree_fail(&t, "opening", to_dir);
    }
    int rc = volume_copy_tree_at(from, to, uid, gid, stats, why, why_size);
    int saved = errno;
    close(from);
    close(to);
    errno = saved;
    return rc;
}

int volume_copy_tree_at(int from_dir, int to_dir, uid_t uid, gid_t gid, volume_copy_stats *stats,
                        char *why, size_t why_size)
{
    tree_copy t = {.uid = uid, .gid = gid, .stats = stats, .why = why, .why_size = why_size};
    int from = fcntl(from_dir, F_DUPFD_CLOEXEC, 0); /* copy_directory closes it */
    if (from < 0)
        return tree_fail(&t, "opening", "the folder to copy");
    int rc = copy_directory(&t, from, to_dir, 0);
    int saved = errno;
    if (rc == 0 && syncfs(to_dir) < 0) {
        saved = errno;
        rc = tree_fail(&t, "writing", "the workspace");
    }
    errno = saved;
    return rc;
}

int volume_copy(volume_kind kind, const char *from_image, const char *from_mount, const char *to,
                volume_copy_stats *stats, char *why, size_t why_size)
{
    *stats = (volume_copy_stats){0};
    struct timespec started, ended;
    clock_gettime(CLOCK_MONOTONIC, &started);
    int rc;
    if (kind == VOLUME_EXT4) {
        rc = copy_frozen_image(from_image, from_mount, to, stats, why, why_size);
    } else {
        if (mkdir(to, 0700) < 0) {
            snprintf(why, why_size, "cannot create %s: %s", to, strerror(errno));
            return -1;
        }
        rc = volume_copy_tree(from_mount, to, (uid_t)-1, (gid_t)-1, stats, why, why_size);
    }
    clock_gettime(CLOCK_MONOTONIC, &ended);
    stats->elapsed_us =
        (ended.tv_sec - started.tv_sec) * 1000000LL + (ended.tv_nsec - started.tv_nsec) / 1000;
    return rc;
}
