#include "model/template_files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/fs.h"
#include "sandbox/confined.h"
#include "sandbox/confined_tar.h"

#define TEMPLATE_FILES_UNPACK_UID 65534 /* nobody */
#define MAX_DEPTH 128 /* deepest directory copied or digested (one descriptor per level) */

static int open_beneath(int root_fd, const char *path, int flags)
{
    struct open_how how = {.flags = (unsigned long long)(flags | O_CLOEXEC),
                           .resolve =
                               RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
    for (int attempt = 0; attempt < 16; attempt++) {
        long fd = syscall(SYS_openat2, root_fd, path, &how, sizeof how);
        if (fd >= 0 || errno != EAGAIN)
            return (int)fd;
    }
    return -1;
}

/* The source as a path beneath the context: "/a" and "a" alike, "." for the context itself. */
static const char *relative_source(const char *source)
{
    while (*source == '/')
        source++;
    return *source ? source : ".";
}

static bool leaves_context(const char *source)
{
    for (const char *p = source; *p;) {
        size_t length = strcspn(p, "/");
        if (length == 2 && p[0] == '.' && p[1] == '.')
            return true;
        p += length;
        while (*p == '/')
            p++;
    }
    return false;
}

/* Where a source is: its parent directory (O_PATH, reached without a link) and its own name in
   it (a link itself when the source is one: copied as a link), with its status. */
typedef struct source_location {
    int parent_fd;
    char name[NAME_MAX + 1];
    struct stat st;
} source_location;

static int open_source(const char *context_dir, const char *source, source_location *where,
                       char *why, size_t why_size)
{
    if (!context_dir) {
        snprintf(why, why_size,
                 "COPY source \"%s\": the build has no context: send one (a tar in the request's "
                 "`context` part, or the CLI's CONTEXT_DIR)",
                 source);
        return -1;
    }
    if (leaves_context(source)) {
        snprintf(why, why_size, "COPY source \"%s\" leaves the build context: name files inside it",
                 source);
        return -1;
    }
    char relative[PATH_MAX];
    snprintf(relative, sizeof relative, "%s", relative_source(source));
    size_t length = strlen(relative);
    while (length > 1 && relative[length - 1] == '/')
        relative[--length] = '\0';
    char *slash = strrchr(relative, '/');
    const char *parent = ".";
    if (slash) {
        *slash = '\0';
        parent = relative;
    }
    snprintf(where->name, sizeof where->name, "%s", slash ? slash + 1 : relative);
    int root = open(context_dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root < 0) {
        snprintf(why, why_size, "cannot open the build context: %s", strerror(errno));
        return -1;
    }
    where->parent_fd = open_beneath(root, parent, O_PATH | O_DIRECTORY);
    int error = errno;
    close(root);
    if (where->parent_fd < 0 ||
        fstatat(where->parent_fd, where->name, &where->st, AT_SYMLINK_NOFOLLOW) < 0) {
        if (where->parent_fd >= 0) {
            error = errno;
            close(where->parent_fd);
        }
        snprintf(why, why_size, "COPY source \"%s\" is not in the build context%s", source,
                 error == ELOOP || error == EXDEV ? " (a symbolic link leads out of it)" : "");
        return -1;
    }
    return 0;
}

int template_files_check_source(const char *context_dir, const char *source, char *why,
                                size_t why_size)
{
    source_location where;
    if (open_source(context_dir, source, &where, why, why_size) < 0)
        return -1;
    close(where.parent_fd);
    return 0;
}

/* ---- digest ---- */

static int compare_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names in a directory, sorted (a fixed order: the digest must not depend on readdir's). */
static char **sorted_names(int dirfd, int *count)
{
    int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
    if (!dir) {
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    char **names = NULL;
    int n = 0, capacity = 0;
    struct dirent *entry;
    while ((entry = readdir(dir))) {
        if (strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0)
            continue;
        if (n == capacity) {
            capacity = capacity ? capacity * 2 : 16;
            names = realloc(names, (size_t)capacity * sizeof *names);
            if (!names)
                abort();
        }
        names[n++] = strdup(entry->d_name);
    }
    closedir(dir);
    if (n)
        qsort(names, (size_t)n, sizeof *names, compare_names);
    *count = n;
    return names;
}

static void free_names(char **names, int count)
{
    for (int i = 0; i < count; i++)
        free(names[i]);
    free(names);
}

static void digest_text(EVP_MD_CTX *digest, const char *text)
{
    EVP_DigestUpdate(digest, text, strlen(text) + 1); /* with its NUL: names cannot run together */
}

static int digest_entry(int dirfd, const char *name, const char *path, int depth,
                        EVP_MD_CTX *digest)
{
    struct stat st;
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 || depth > MAX_DEPTH)
        return -1;
    char header[64];
    snprintf(header, sizeof header, "%o", (unsigned)st.st_mode);
    digest_text(digest, path);
    digest_text(digest, header);
    if (S_ISLNK(st.st_mode)) {
        char target[PATH_MAX];
        ssize_t length = readlinkat(dirfd, name, target, sizeof target - 1);
        if (length < 0)
            return -1;
        target[length] = '\0';
        digest_text(digest, target);
    } else if (S_ISREG(st.st_mode)) {
        int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
            return -1;
        char chunk[65536];
        ssize_t got;
        while ((got = read(fd, chunk, sizeof chunk)) > 0)
            EVP_DigestUpdate(digest, chunk, (size_t)got);
        close(fd);
        if (got < 0)
            return -1;
    } else if (S_ISDIR(st.st_mode)) {
        int fd = openat(dirfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int count = 0;
        char **names = fd >= 0 ? sorted_names(fd, &count) : NULL;
        int rc = fd >= 0 && (names || count == 0) ? 0 : -1;
        for (int i = 0; rc == 0 && i < count; i++) {
            char child[PATH_MAX];
            snprintf(child, sizeof child, "%s/%s", path, names[i]);
            rc = digest_entry(fd, names[i], child, depth + 1, digest);
        }
        free_names(names, count);
        if (fd >= 0)
            close(fd);
        return rc;
    }
    return 0;
}

int template_files_digest(const char *context_dir, const char *source, EVP_MD_CTX *digest,
                          char *why, size_t why_size)
{
    source_location where;
    if (open_source(context_dir, source, &where, why, why_size) < 0)
        return -1;
    int rc = digest_entry(where.parent_fd, where.name, relative_source(source), 0, digest);
    close(where.parent_fd);
    if (rc < 0)
        snprintf(why, why_size, "cannot read COPY source \"%s\" in the build context: %s", source,
                 strerror(errno));
    return rc;
}

/* ---- copy ---- */

/* mkdir -p of `path` (relative) beneath the layer's root, refusing links on the way. */
static int make_directories(int root_fd, const char *path)
{
    char partial[PATH_MAX];
    snprintf(partial, sizeof partial, "%s", path);
    for (char *slash = partial;; slash++) {
        slash = strchr(slash, '/');
        if (slash)
            *slash = '\0';
        if (partial[0] && mkdirat(root_fd, partial, 0755) < 0 && errno != EEXIST)
            return -1;
        if (!slash)
            break;
        *slash = '/';
    }
    int fd = open_beneath(root_fd, path[0] ? path : ".", O_PATH | O_DIRECTORY);
    return fd;
}

int template_files_make_directory(const char *layer_dir, const char *directory, char *why,
                                  size_t why_size)
{
    int layer_fd = open(layer_dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    int fd = layer_fd < 0 ? -1 : make_directories(layer_fd, directory + 1); /* relative */
    if (fd < 0)
        snprintf(why, why_size, "cannot make %s in the layer: %s", directory, strerror(errno));
    if (fd >= 0)
        close(fd);
    if (layer_fd >= 0)
        close(layer_fd);
    return fd < 0 ? -1 : 0;
}

static int copy_entry(int from_dir, const char *from_name, int to_dir, const char *to_name,
                      int depth);

static int copy_directory_contents(int from_fd, int to_fd, int depth)
{
    int count = 0;
    char **names = sorted_names(from_fd, &count);
    if (!names && count)
        return -1;
    int rc = 0;
    for (int i = 0; rc == 0 && i < count; i++)
        rc = copy_entry(from_fd, names[i], to_fd, names[i], depth + 1);
    free_names(names, count);
    return rc;
}

static int copy_regular_file(int from_dir, const char *from_name, int to_dir, const char *to_name,
                             mode_t mode)
{
    int in = openat(from_dir, from_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (in < 0)
        return -1;
    unlinkat(to_dir, to_name, 0); /* a link or file of an earlier source: replaced */
    int out =
        openat(to_dir, to_name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode & 0777);
    if (out < 0) {
        close(in);
        return -1;
    }
    char chunk[65536];
    ssize_t got;
    int rc = 0;
    while (rc == 0 && (got = read(in, chunk, sizeof chunk)) != 0) {
        if (got < 0 || write(out, chunk, (size_t)got) != got)
            rc = -1;
    }
    if (rc == 0)
        rc = fchmod(out, mode & 0777); /* exactly the source's bits, whatever the umask */
    close(in);
    close(out);
    return rc;
}

static int copy_entry(int from_dir, const char *from_name, int to_dir, const char *to_name,
                      int depth)
{
    struct stat st;
    if (depth > MAX_DEPTH || fstatat(from_dir, from_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return -1;
    if (S_ISREG(st.st_mode))
        return copy_regular_file(from_dir, from_name, to_dir, to_name, st.st_mode);
    if (S_ISLNK(st.st_mode)) {
        char target[PATH_MAX];
        ssize_t length = readlinkat(from_dir, from_name, target, sizeof target - 1);
        if (length < 0)
            return -1;
        target[length] = '\0';
        unlinkat(to_dir, to_name, 0);
        return symlinkat(target, to_dir, to_name);
    }
    if (S_ISDIR(st.st_mode)) {
        if (mkdirat(to_dir, to_name, st.st_mode & 0777) < 0 && errno != EEXIST)
            return -1;
        int from = openat(from_dir, from_name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int to = openat(to_dir, to_name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int rc = from >= 0 && to >= 0 ? copy_directory_contents(from, to, depth) : -1;
        if (from >= 0)
            close(from);
        if (to >= 0)
            close(to);
        return rc;
    }
    return 0; /* sockets, FIFOs and devices of a context are not copied */
}

static bool is_archive(int fd)
{
    unsigned char head[512];
    ssize_t got = pread(fd, head, sizeof head, 0);
    if (got < 262)
        return got >= 2 && head[0] == 0x1f && head[1] == 0x8b; /* a small gzip */
    return memcmp(head + 257, "ustar", 5) == 0 || (head[0] == 0x1f && head[1] == 0x8b);
}

/* ADD of a local tar: unpacked into a directory of its own with the context's checks, then
   copied into the layer as any directory is. */
static int extract_archive(int to_fd, int archive_fd, char *why, size_t why_size)
{
    char scratch[] = "/var/tmp/cellbox-add-XXXXXX";
    if (!mkdtemp(scratch)) {
        snprintf(why, why_size, "ADD: cannot make a directory to unpack into: %s", strerror(errno));
        return -1;
    }
    int rc = template_files_extract_context(archive_fd, scratch, why, why_size);
    int from = rc == 0 ? open(scratch, O_PATH | O_DIRECTORY | O_CLOEXEC) : -1;
    if (rc == 0 && (from < 0 || copy_directory_contents(from, to_fd, 0) < 0)) {
        snprintf(why, why_size, "ADD: cannot copy the archive's files: %s", strerror(errno));
        rc = -1;
    }
    if (from >= 0)
        close(from);
    fs_remove_tree(scratch);
    return rc;
}

static int copy_one_source(const char *context_dir, const char *source, int layer_fd,
                           const char *destination, bool into_directory, bool extract_archives,
                           char *why, size_t why_size)
{
    source_location where;
    if (open_source(context_dir, source, &where, why, why_size) < 0)
        return -1;
    const char *inside = destination + 1; /* relative to the layer's root */
    char parent[PATH_MAX], name[NAME_MAX + 1];
    bool is_directory = S_ISDIR(where.st.st_mode);
    if (is_directory || into_directory) {
        snprintf(parent, sizeof parent, "%s", inside);
        snprintf(name, sizeof name, "%s", where.name);
    } else {
        const char *slash = strrchr(inside, '/');
        snprintf(parent, sizeof parent, "%.*s", slash ? (int)(slash - inside) : 0, inside);
        snprintf(name, sizeof name, "%s", slash ? slash + 1 : inside);
    }
    int rc = -1;
    int to = make_directories(layer_fd, parent);
    int archive = -1;
    if (to >= 0 && S_ISREG(where.st.st_mode) && extract_archives) {
        archive = openat(where.parent_fd, where.name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (archive >= 0 && !is_archive(archive)) {
            close(archive);
            archive = -1;
        }
    }
    if (to < 0) {
        snprintf(why, why_size, "cannot make the directory %s in the layer: %s", destination,
                 strerror(errno));
    } else if (archive >= 0) {
        rc = extract_archive(to, archive, why, why_size);
        close(archive);
        archive = -2; /* `why` is set */
    } else if (is_directory) {
        int from =
            openat(where.parent_fd, where.name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        rc = from >= 0 ? copy_directory_contents(from, to, 0) : -1;
        if (from >= 0)
            close(from);
    } else {
        rc = copy_entry(where.parent_fd, where.name, to, name, 0);
    }
    if (rc < 0 && to >= 0 && archive != -2)
        snprintf(why, why_size, "cannot copy \"%s\" to %s: %s", source, destination,
                 strerror(errno));
    if (to >= 0)
        close(to);
    close(where.parent_fd);
    return rc;
}

int template_files_copy(const char *context_dir, char *const *sources, int source_count,
                        const char *destination, bool into_directory, bool extract_archives,
                        const char *layer_dir, char *why, size_t why_size)
{
    int layer_fd = open(layer_dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (layer_fd < 0) {
        snprintf(why, why_size, "cannot open the new layer: %s", strerror(errno));
        return -1;
    }
    int rc = 0;
    for (int i = 0; rc == 0 && i < source_count; i++)
        rc = copy_one_source(context_dir, sources[i], layer_fd, destination,
                             into_directory || source_count > 1, extract_archives, why, why_size);
    close(layer_fd);
    return rc;
}

/* ---- sealing a layer ---- */

/* nftw has no argument: one seal runs at a time, from the loop. */
static struct {
    long long bytes;
} seal;

static int seal_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    /* A server the step left running made its socket; a FIFO is a step's scratch: neither is a
       file a template holds, and templates_layer_commit would refuse the layer for them. */
    if (S_ISSOCK(st->st_mode) || S_ISFIFO(st->st_mode))
        return unlink(path) < 0 ? 1 : 0;
    seal.bytes += (long long)st->st_blocks * 512;
    return seal.bytes > TEMPLATE_FILES_MAX_LAYER_BYTES ? 1 : 0;
}

int template_files_seal_layer(const char *layer_dir, char *why, size_t why_size)
{
    seal.bytes = 0;
    if (nftw(layer_dir, seal_entry, 32, FTW_PHYS | FTW_MOUNT) == 0)
        return 0;
    if (seal.bytes > TEMPLATE_FILES_MAX_LAYER_BYTES)
        snprintf(why, why_size,
                 "the step left more than %lld GiB of files, the most one layer may hold: "
                 "install less in one RUN, or remove caches in the same RUN",
                 TEMPLATE_FILES_MAX_LAYER_BYTES >> 30);
    else
        snprintf(why, why_size, "cannot read the step's layer: %s", strerror(errno));
    return -1;
}

/* Back to root's once unpacked: nobody else may change the context while the build reads it. */
static int make_root_owned(const char *path, const struct stat *st, int type, struct FTW *where)
{
    return lchown(path, 0, 0) < 0 ? 1 : 0;
}

int template_files_extract_context(int tar_fd, const char *dir, char *why, size_t why_size)
{
    /* confined.c acts with an unprivileged user's powers only (never root's, so the archive's
       names cannot reach what only root may write): nobody's, in a directory only it owns. */
    if (chown(dir, TEMPLATE_FILES_UNPACK_UID, TEMPLATE_FILES_UNPACK_UID) < 0 ||
        chmod(dir, 0700) < 0) {
        snprintf(why, why_size, "cannot prepare %s: %s", dir, strerror(errno));
        return -1;
    }
    int root = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root < 0) {
        snprintf(why, why_size, "cannot open %s: %s", dir, strerror(errno));
        return -1;
    }
    confined c;
    confined_init(&c, root, TEMPLATE_FILES_UNPACK_UID, TEMPLATE_FILES_UNPACK_UID);
    int rc = confined_tar_extract(&c, "/", tar_fd);
    if (rc < 0)
        snprintf(why, why_size, "the archive: %s", c.why);
    close(root);
    if (nftw(dir, make_root_owned, 32, FTW_PHYS) != 0 && rc == 0) {
        snprintf(why, why_size, "cannot make the unpacked files root's: %s", strerror(errno));
        rc = -1;
    }
    return rc;
}
