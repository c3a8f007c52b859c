#include "sandbox/confined_tar.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"

#define COPY_CHUNK (64 * 1024)

/* ---- creating ---- */

typedef struct tar_writer {
    confined *c;
    struct archive *archive;
    size_t prefix_length; /* of "DIR/", cut from each entry's sandbox path */
} tar_writer;

static int fail_archive(confined *c, struct archive *archive, const char *what)
{
    return confined_failf(c, EIO, "%s: %s", what, archive_error_string(archive));
}

static int nesting(const char *relative)
{
    int levels = 1;
    for (const char *p = relative; *p; p++)
        levels += *p == '/';
    return levels;
}

/* Copies exactly `size` bytes of fd into the entry: a file that shrank meanwhile is padded by
   libarchive, one that grew is cut, so the header stays true. */
static int copy_into_archive(tar_writer *w, int fd, long long size, const char *path)
{
    static char chunk[COPY_CHUNK];
    while (size > 0) {
        ssize_t got = read(fd, chunk, size < COPY_CHUNK ? (size_t)size : COPY_CHUNK);
        if (got < 0)
            return confined_failf(w->c, EIO, "cannot read '%s': %s", path, strerror(errno));
        if (got == 0)
            return 0;
        if (archive_write_data(w->archive, chunk, (size_t)got) < 0)
            return fail_archive(w->c, w->archive, "cannot write the archive");
        size -= got;
    }
    return 0;
}

static int add_to_archive(void *arg, int dirfd, const char *name, const char *entry_path,
                          const struct stat *st)
{
    tar_writer *w = arg;
    const char *relative = entry_path + w->prefix_length;
    if (S_ISDIR(st->st_mode) && nesting(relative) >= CONFINED_TAR_MAX_DEPTH)
        return confined_failf(w->c, E2BIG,
                              "'%s' is nested more than %d directories deep; archive "
                              "a subdirectory",
                              entry_path, CONFINED_TAR_MAX_DEPTH);
    if (!S_ISREG(st->st_mode) && !S_ISDIR(st->st_mode) && !S_ISLNK(st->st_mode))
        return 0; /* sockets, FIFOs, devices: nothing a tar can carry usefully */
    struct archive_entry *entry = archive_entry_new();
    archive_entry_set_pathname(entry, relative);
    archive_entry_set_mode(entry, st->st_mode);
    archive_entry_set_uid(entry, st->st_uid);
    archive_entry_set_gid(entry, st->st_gid);
    archive_entry_set_mtime(entry, st->st_mtim.tv_sec, st->st_mtim.tv_nsec);
    int fd = -1, rc = 0;
    if (S_ISREG(st->st_mode)) {
        struct stat now;
        fd = confined_open_entry(w->c, dirfd, name, entry_path);
        if (fd < 0 || fstat(fd, &now) < 0)
            rc = fd < 0 ? -1 : confined_fail(w->c, errno, entry_path);
        else
            archive_entry_set_size(entry, now.st_size);
    } else if (S_ISLNK(st->st_mode)) {
        char target[PATH_MAX];
        ssize_t length = readlinkat(dirfd, name, target, sizeof target - 1);
        if (length < 0)
            rc = confined_fail(w->c, errno, entry_path);
        else {
            target[length] = '\0';
            archive_entry_set_symlink(entry, target);
        }
    }
    if (rc == 0 && archive_write_header(w->archive, entry) < ARCHIVE_WARN)
        rc = fail_archive(w->c, w->archive, "cannot write the archive");
    if (rc == 0 && fd >= 0)
        rc = copy_into_archive(w, fd, (long long)archive_entry_size(entry), entry_path);
    if (fd >= 0)
        close(fd);
    archive_entry_free(entry);
    return rc;
}

/* The archive goes to a spool file on the host: it may not grow past the cap given. */
typedef struct capped_output {
    int fd;
    long long written, cap;
} capped_output;

static la_ssize_t write_capped(struct archive *archive, void *arg, const void *data, size_t length)
{
    capped_output *out = arg;
    if (out->written + (long long)length > out->cap) {
        archive_set_error(archive, EFBIG, "the archive would be larger than %lld bytes", out->cap);
        return -1;
    }
    size_t done = 0;
    while (done < length) {
        ssize_t n = write(out->fd, (const char *)data + done, length - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            archive_set_error(archive, errno ? errno : EIO, "cannot write the spool file: %s",
                              strerror(errno ? errno : EIO));
            return -1;
        }
        done += (size_t)n;
    }
    out->written += (long long)length;
    return (la_ssize_t)length;
}

int confined_tar_create(confined *c, const char *dir, int out_fd, long long max_bytes)
{
    char full[PATH_MAX];
    if (confined_normalize(c, dir, full, sizeof full) < 0)
        return -1;
    capped_output out = {.fd = out_fd, .cap = max_bytes};
    tar_writer w = {.c = c, .archive = archive_write_new()};
    w.prefix_length = strcmp(full, "/") == 0 ? 1 : strlen(full) + 1;
    /* pax restricted: plain ustar headers, with pax extensions only for what ustar cannot hold
       (long names, large sizes), so every tar reads it. */
    if (archive_write_set_format_pax_restricted(w.archive) != ARCHIVE_OK ||
        archive_write_open2(w.archive, &out, NULL, write_capped, NULL, NULL) != ARCHIVE_OK) {
        fail_archive(c, w.archive, "cannot start the archive");
        archive_write_free(w.archive);
        return -1;
    }
    int rc = confined_walk(c, full, CONFINED_TAR_MAX_DEPTH, 0, add_to_archive, &w);
    if (archive_write_close(w.archive) != ARCHIVE_OK && rc == 0)
        rc = fail_archive(c, w.archive, "cannot finish the archive");
    if (rc < 0 && archive_errno(w.archive) == EFBIG)
        rc = confined_failf(c, EFBIG, "'%s' is larger than %lld bytes as a tar archive: download "
                            "smaller directories", full, max_bytes);
    archive_write_free(w.archive);
    return rc;
}

/* ---- extracting ---- */

static struct archive *open_reader(confined *c, int in_fd)
{
    if (lseek(in_fd, 0, SEEK_SET) < 0) {
        confined_failf(c, EIO, "cannot rewind the uploaded archive: %s", strerror(errno));
        return NULL;
    }
    struct archive *archive = archive_read_new();
    archive_read_support_format_tar(archive); /* ustar, pax and GNU tar */
    archive_read_support_filter_gzip(archive);
    if (archive_read_open_fd(archive, in_fd, COPY_CHUNK) != ARCHIVE_OK) {
        confined_failf(c, EINVAL, "the body is not a tar archive: %s",
                       archive_error_string(archive));
        archive_read_free(archive);
        return NULL;
    }
    return archive;
}

/* "./a/b/" → "a/b"; "./" → "" (the directory itself). */
static const char *strip_name(const char *name, char out[PATH_MAX])
{
    while (name[0] == '.' && name[1] == '/')
        name += 2;
    snprintf(out, PATH_MAX, "%s", name);
    size_t length = strlen(out);
    while (length > 0 && out[length - 1] == '/')
        out[--length] = '\0';
    return strcmp(out, ".") == 0 ? "" : out;
}

static const char *kind_name(mode_t type)
{
    switch (type) {
    case AE_IFCHR: return "character device";
    case AE_IFBLK: return "block device";
    case AE_IFIFO: return "FIFO";
    case AE_IFSOCK: return "socket";
    default: return "special file";
    }
}

/* Refuses names that would land outside `dir` and kinds of file a sandbox user could not make
   (or that would share data with files outside the archive). */
static int check_entry(confined *c, struct archive_entry *entry)
{
    const char *name = archive_entry_pathname(entry);
    if (!name || !*name)
        return confined_failf(c, EINVAL, "the archive holds an entry without a usable name");
    if (name[0] == '/')
        return confined_failf(c, EINVAL,
                              "tar entry '%s' has an absolute name; entries must be "
                              "relative to the directory they are unpacked in",
                              name);
    for (const char *p = name; *p;) {
        size_t component = strcspn(p, "/");
        if (component == 2 && p[0] == '.' && p[1] == '.')
            return confined_failf(c, EINVAL,
                                  "tar entry '%s' contains '..'; entries must stay inside "
                                  "the directory they are unpacked in",
                                  name);
        p += component + (p[component] == '/');
    }
    if (archive_entry_hardlink(entry))
        return confined_failf(c, EINVAL,
                              "tar entry '%s' is a hard link; only regular files, "
                              "directories and symbolic links can be unpacked",
                              name);
    mode_t type = archive_entry_filetype(entry);
    if (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK)
        return confined_failf(c, EINVAL,
                              "tar entry '%s' is a %s; only regular files, directories "
                              "and symbolic links can be unpacked",
                              name, kind_name(type));
    if (type == AE_IFLNK && (!archive_entry_symlink(entry) || !*archive_entry_symlink(entry)))
        return confined_failf(c, EINVAL, "tar entry '%s' is a symbolic link without a target",
                              name);
    return 0;
}

static int next_header(confined *c, struct archive *archive, struct archive_entry **entry)
{
    int rc = archive_read_next_header(archive, entry);
    if (rc == ARCHIVE_EOF)
        return 0;
    if (rc < ARCHIVE_WARN)
        return confined_failf(c, EINVAL, "the body is not a complete tar archive: %s",
                              archive_error_string(archive));
    return 1;
}

static int check_archive(confined *c, int in_fd)
{
    struct archive *archive = open_reader(c, in_fd);
    if (!archive)
        return -1;
    struct archive_entry *entry;
    int rc;
    while ((rc = next_header(c, archive, &entry)) > 0 && (rc = check_entry(c, entry)) == 0)
        ;
    archive_read_free(archive);
    return rc;
}

static int write_entry_data(confined *c, struct archive *archive, int fd, const char *path)
{
    const void *block;
    size_t size;
    la_int64_t offset;
    int rc;
    /* Blocks come with offsets: a sparse file's holes stay holes. */
    while ((rc = archive_read_data_block(archive, &block, &size, &offset)) == ARCHIVE_OK) {
        for (size_t done = 0; done < size;) {
            ssize_t wrote =
                pwrite(fd, (const char *)block + done, size - done, offset + (off_t)done);
            if (wrote < 0)
                return confined_fail(c, errno, path);
            done += (size_t)wrote;
        }
    }
    if (rc != ARCHIVE_EOF)
        return confined_failf(c, EINVAL, "the body is not a complete tar archive: %s",
                              archive_error_string(archive));
    return 0;
}

static int extract_file(confined *c, struct archive *archive, struct archive_entry *entry,
                        const char *path)
{
    mode_t mode = archive_entry_perm(entry) & 0777;
    bool existed;
    int fd = confined_open_write(c, path, mode, &existed);
    if (fd < 0)
        return -1;
    struct timespec modified = {archive_entry_mtime(entry), archive_entry_mtime_nsec(entry)};
    int rc = write_entry_data(c, archive, fd, path);
    if (rc == 0 && ftruncate(fd, (off_t)archive_entry_size(entry)) < 0) /* a trailing hole */
        rc = confined_fail(c, errno, path);
    if (rc == 0)
        rc = confined_set_attributes(c, fd, mode, &modified);
    if (rc < 0) /* no half file left behind (a full disk, most likely) */
        confined_discard(c, path, fd);
    close(fd);
    return rc;
}

typedef struct directory_attributes {
    char *path;
    mode_t mode;
    struct timespec modified;
} directory_attributes;

/* A directory's mode and time are set after its contents are in, as tar does: a read-only
   directory in the archive must still receive its files, and each file made would move the
   directory's time. */
static int apply_directory_attributes(confined *c, directory_attributes *list, size_t count)
{
    int rc = 0;
    for (size_t i = count; i-- > 0;) {
        int fd = rc == 0 ? confined_open_directory(c, list[i].path) : -1;
        if (fd >= 0) {
            rc = confined_set_attributes(c, fd, list[i].mode, &list[i].modified);
            close(fd);
        } else if (rc == 0) {
            rc = -1;
        }
        free(list[i].path);
    }
    free(list);
    return rc;
}

static int extract_entries(confined *c, const char *dir, struct archive *archive)
{
    directory_attributes *directories = NULL;
    size_t directory_count = 0, capacity = 0;
    struct archive_entry *entry;
    int rc;
    while ((rc = next_header(c, archive, &entry)) > 0) {
        char stripped[PATH_MAX];
        const char *name = strip_name(archive_entry_pathname(entry), stripped);
        if (!*name)
            continue; /* "./": the directory itself */
        char *path;
        if (asprintf(&path, "%s/%s", dir, name) < 0)
            die("out of memory");
        mode_t type = archive_entry_filetype(entry);
        if (type == AE_IFREG) {
            rc = extract_file(c, archive, entry, path);
        } else if (type == AE_IFLNK) {
            rc = confined_symlink(c, archive_entry_symlink(entry), path);
        } else {
            bool existed;
            json_t *made = confined_mkdir(c, path, 0700, &existed);
            rc = made ? 0 : -1;
            json_decref(made);
            /* Only directories made here: one that was there keeps its mode (and may not even
               be the user's to change). */
            if (rc == 0 && !existed && directory_count == capacity) {
                capacity = capacity ? capacity * 2 : 16;
                directories = realloc(directories, capacity * sizeof *directories);
                if (!directories)
                    die("out of memory");
            }
            if (rc == 0 && !existed) {
                directories[directory_count++] = (directory_attributes){
                    path,
                    archive_entry_perm(entry) & 0777,
                    {archive_entry_mtime(entry), archive_entry_mtime_nsec(entry)}};
                path = NULL;
            }
        }
        free(path);
        if (rc < 0)
            break;
    }
    if (apply_directory_attributes(c, directories, directory_count) < 0 && rc == 0)
        rc = -1;
    return rc < 0 ? -1 : 0;
}

int confined_tar_extract(confined *c, const char *dir, int in_fd)
{
    char full[PATH_MAX];
    bool existed;
    if (confined_normalize(c, dir, full, sizeof full) < 0 || check_archive(c, in_fd) < 0)
        return -1;
    json_t *made = confined_mkdir(c, full, 0755, &existed);
    if (!made)
        return -1;
    json_decref(made);
    struct archive *archive = open_reader(c, in_fd);
    if (!archive)
        return -1;
    int rc = extract_entries(c, strcmp(full, "/") == 0 ? "" : full, archive);
    archive_read_free(archive);
    return rc;
}
