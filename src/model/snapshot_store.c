#include "model/snapshot_store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fs.h"
#include "common/ids.h"
#include "common/log.h"

#define KEY_BYTES 32
#define SEAL_BYTES 32
#define SEAL_MAX_DEPTH 64 /* a workspace tree deeper than this is refused when sealed */
#define SEAL_CHUNK (1 << 20)

static char *folder; /* DATA_DIR/snapshots */
static unsigned char key[KEY_BYTES];

/* ---- the key ---- */

static int make_key(const char *path, char *why, size_t why_size)
{
    for (size_t got = 0; got < KEY_BYTES;) {
        ssize_t n = getrandom(key + got, KEY_BYTES - got, 0);
        if (n < 0 && errno != EINTR) {
            snprintf(why, why_size, "cannot make the snapshot key: %s", strerror(errno));
            return -1;
        }
        got += n > 0 ? (size_t)n : 0;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 || write(fd, key, KEY_BYTES) != KEY_BYTES || fsync(fd) < 0) {
        snprintf(why, why_size, "cannot write the snapshot key %s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd), unlink(path);
        return -1;
    }
    close(fd);
    return 0;
}

static int load_key(const char *data_dir, char *why, size_t why_size)
{
    char path[4200];
    snprintf(path, sizeof path, "%.4000s/snapshot.key", data_dir);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT)
        return make_key(path, why, why_size);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        snprintf(why, why_size, "cannot read the snapshot key %s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    /* A key others can read lets them seal a snapshot of their own making. */
    bool private = st.st_uid == geteuid() && (st.st_mode & 077) == 0 && st.st_size == KEY_BYTES;
    bool read_whole = private && read(fd, key, KEY_BYTES) == KEY_BYTES;
    close(fd);
    if (!read_whole) {
        snprintf(why, why_size,
                 "the snapshot key %s must be %d bytes, the daemon's and mode 0600; "
                 "remove it to make a new one (existing snapshots are then refused)",
                 path, KEY_BYTES);
        return -1;
    }
    return 0;
}

/* ---- the seal ---- */

typedef struct seal_context {
    EVP_MAC_CTX *mac;
    unsigned char *chunk;                             /* one block of a file, SEAL_CHUNK bytes */
    unsigned char zero_digest[SHA256_DIGEST_LENGTH]; /* a whole block of zeros' SHA-256 */
    bool have_zero_digest;
} seal_context;

static bool seal_update(seal_context *s, const void *data, size_t length)
{
    return EVP_MAC_update(s->mac, data, length) == 1;
}

/* A regular file: its size, then the SHA-256 of each SEAL_CHUNK block of its bytes, holes read
   as zeros. The seal covers the bytes, not the layout: a copy that fills the holes, or a byte
   written back into a hole, seals the same. A block wholly in a hole is never read (a 1 GiB
   workspace image holding 10 MiB reads 10 MiB): its digest is the zero block's, made once. */
static int seal_file(seal_context *s, int fd)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return -1;
    long long size = st.st_size;
    seal_update(s, &size, sizeof size);
    unsigned char digest[SHA256_DIGEST_LENGTH];
    off_t next_data = 0; /* no data before this offset */
    for (off_t block = 0; block < st.st_size; block += SEAL_CHUNK) {
        size_t length = st.st_size - block < SEAL_CHUNK ? (size_t)(st.st_size - block) : SEAL_CHUNK;
        if (next_data < block) {
            next_data = lseek(fd, block, SEEK_DATA);
            if (next_data < 0 && errno != ENXIO)
                return -1;
            if (next_data < 0)
                next_data = st.st_size; /* only a hole is left */
        }
        if (next_data >= block + (off_t)length) {
            if (length == SEAL_CHUNK && s->have_zero_digest) {
                seal_update(s, s->zero_digest, sizeof s->zero_digest);
                continue;
            }
            memset(s->chunk, 0, length);
            SHA256(s->chunk, length, digest);
            if (length == SEAL_CHUNK)
                memcpy(s->zero_digest, digest, sizeof digest), s->have_zero_digest = true;
            seal_update(s, digest, sizeof digest);
            continue;
        }
        for (size_t got = 0; got < length;) {
            ssize_t n = pread(fd, s->chunk + got, length - got, block + (off_t)got);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                errno = n == 0 ? EIO : errno; /* the file shrank while it was sealed */
                return -1;
            }
            got += (size_t)n;
        }
        SHA256(s->chunk, length, digest);
        seal_update(s, digest, sizeof digest);
    }
    return 0;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

/* Every entry beneath dir_fd, in name order, links never followed: path, kind, contents. */
static int seal_tree(seal_context *s, int dir_fd, const char *relative, int depth)
{
    if (depth > SEAL_MAX_DEPTH) {
        errno = ELOOP;
        return -1;
    }
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", dir_fd);
    struct dirent **names;
    int count = scandir(proc, &names, NULL, by_name);
    if (count < 0)
        return -1;
    int rc = 0;
    for (int i = 0; i < count; i++) {
        const char *name = names[i]->d_name;
        bool skip = strcmp(name, ".") == 0 || strcmp(name, "..") == 0 ||
                    (depth == 0 && strcmp(name, SNAPSHOT_SEAL) == 0);
        if (skip || rc < 0)
            continue;
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", relative, name);
        seal_update(s, path, strlen(path) + 1);
        struct stat st;
        if (fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
            rc = -1;
            continue;
        }
        unsigned kind = st.st_mode & S_IFMT, mode = st.st_mode & 07777;
        seal_update(s, &kind, sizeof kind);
        seal_update(s, &mode, sizeof mode);
        if (S_ISLNK(st.st_mode)) {
            char target[4096];
            ssize_t n = readlinkat(dir_fd, name, target, sizeof target);
            rc = n < 0 ? -1 : (seal_update(s, target, (size_t)n), 0);
        } else if (S_ISDIR(st.st_mode) || S_ISREG(st.st_mode)) {
            int flags = S_ISDIR(st.st_mode) ? O_RDONLY | O_DIRECTORY : O_RDONLY;
            int fd = openat(dir_fd, name, flags | O_NOFOLLOW | O_CLOEXEC);
            rc = fd < 0                ? -1
                 : S_ISDIR(st.st_mode) ? seal_tree(s, fd, path, depth + 1)
                                       : seal_file(s, fd);
            if (fd >= 0)
                close(fd);
        }
    }
    for (int i = 0; i < count; i++)
        free(names[i]);
    free(names);
    return rc;
}

/* The HMAC of the snapshot folder at `dir`. 0, or -1 with errno. */
static int compute_seal(const char *dir, unsigned char out[SEAL_BYTES])
{
    errno = 0;
    EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    seal_context s = {.mac = mac ? EVP_MAC_CTX_new(mac) : NULL, .chunk = malloc(SEAL_CHUNK)};
    OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, "SHA256", 0),
                           OSSL_PARAM_construct_end()};
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    size_t length = 0;
    int rc = -1;
    if (s.mac && s.chunk && fd >= 0 && EVP_MAC_init(s.mac, key, KEY_BYTES, params) == 1 &&
        seal_tree(&s, fd, "", 0) == 0 && EVP_MAC_final(s.mac, out, &length, SEAL_BYTES) == 1 &&
        length == SEAL_BYTES)
        rc = 0;
    else if (errno == 0)
        errno = EIO;
    int saved = errno;
    if (fd >= 0)
        close(fd);
    free(s.chunk);
    EVP_MAC_CTX_free(s.mac);
    EVP_MAC_free(mac);
    errno = saved;
    return rc;
}

/* ---- the folder ---- */

int snapshot_store_init(const char *data_dir, char *why, size_t why_size)
{
    if (asprintf(&folder, "%s/snapshots", data_dir) < 0)
        die("out of memory");
    if (fs_mkdir_p(folder, 0700) < 0) {
        snprintf(why, why_size, "cannot create %s: %s", folder, strerror(errno));
        return -1;
    }
    DIR *dir = opendir(folder);
    for (struct dirent *entry; dir && (entry = readdir(dir));) {
        size_t length = strlen(entry->d_name);
        if (length > 8 && strcmp(entry->d_name + length - 8, ".partial") == 0) {
            char path[4400]; /* a snapshot a dead daemon did not finish: never one */
            snprintf(path, sizeof path, "%s/%s", folder, entry->d_name);
            fs_remove_tree(path);
        }
    }
    if (dir)
        closedir(dir);
    return load_key(data_dir, why, why_size);
}

bool snapshot_store_path(const char *id, const char *name, char *out, size_t size)
{
    if (!id || !id_is_uuid(id))
        return false;
    if (name)
        snprintf(out, size, "%s/%s/%s", folder, id, name);
    else
        snprintf(out, size, "%s/%s", folder, id);
    return true;
}

int snapshot_store_begin(const char *id, char *out, size_t size, char *why, size_t why_size)
{
    snprintf(out, size, "%s/%s.partial", folder, id);
    if (mkdir(out, 0700) < 0) {
        snprintf(why, why_size, "cannot create %s: %s", out, strerror(errno));
        return -1;
    }
    return 0;
}

void snapshot_store_abort(const char *id)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.partial", folder, id);
    if (fs_remove_tree(path) < 0 && errno != ENOENT)
        log_warn("cannot remove %s: %s", path, strerror(errno));
}

static int write_file_synced(const char *path, const void *data, size_t length)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    for (size_t done = 0; done < length;) {
        ssize_t n = write(fd, (const char *)data + done, length - done);
        if (n < 0) {
            int saved = errno;
            close(fd);
            errno = saved;
            return -1;
        }
        done += (size_t)n;
    }
    int rc = fsync(fd);
    int saved = errno;
    close(fd);
    errno = saved;
    return rc;
}

/* Every file of the folder on disk before it is renamed: a crash after the rename must not
   leave a snapshot whose files are still only in the page cache. */
static int sync_tree(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = syncfs(fd);
    int saved = errno;
    close(fd);
    errno = saved;
    return rc;
}

int snapshot_store_commit(const char *id, const char *description, char *why, size_t why_size)
{
    char partial[4200], path[4300], final[4200];
    snprintf(partial, sizeof partial, "%s/%s.partial", folder, id);
    snprintf(final, sizeof final, "%s/%s", folder, id);
    snprintf(path, sizeof path, "%s/%s", partial, SNAPSHOT_DESCRIPTION);
    int rc = write_file_synced(path, description, strlen(description));
    unsigned char seal[SEAL_BYTES];
    if (rc == 0)
        rc = compute_seal(partial, seal);
    snprintf(path, sizeof path, "%s/%s", partial, SNAPSHOT_SEAL);
    if (rc == 0)
        rc = write_file_synced(path, seal, SEAL_BYTES);
    if (rc == 0)
        rc = sync_tree(partial);
    if (rc == 0)
        rc = rename(partial, final);
    if (rc == 0) {
        int parent = open(folder, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (parent >= 0)
            fsync(parent), close(parent);
        return 0;
    }
    int saved = errno;
    snprintf(why, why_size, "%s while writing the snapshot %s in %s",
             saved == ENOSPC ? "no space left on the daemon's disk" : strerror(saved), id, folder);
    errno = saved;
    return -1;
}

static void tampered_message(const char *id, char *why, size_t why_size)
{
    snprintf(why, why_size,
             "the snapshot's seal does not match: snapshot %s was changed "
             "outside cellbox, and is refused whole; delete it (DELETE /v1/snapshots/%s)",
             id, id);
}

json_t *snapshot_store_load(const char *id, bool verify, failure_kind *failure, char *why,
                            size_t why_size)
{
    char dir[4200], path[4300];
    *failure = FAILURE_NOT_FOUND;
    if (!snapshot_store_path(id, NULL, dir, sizeof dir)) {
        snprintf(why, why_size, "snapshot %.64s does not exist (see GET /v1/snapshots)",
                 id ? id : "");
        return NULL;
    }
    snprintf(path, sizeof path, "%s/%s", dir, SNAPSHOT_DESCRIPTION);
    json_t *description = json_load_file(path, 0, NULL);
    struct stat st;
    if (!description && lstat(dir, &st) < 0) {
        snprintf(why, why_size, "snapshot %s does not exist (see GET /v1/snapshots)", id);
        return NULL;
    }
    /* Its folder is there but its description does not parse (or is gone): only a change made
       outside cellbox does that (a commit renames the folder in whole), so it is refused as
       tampered, as a seal that does not match is, and never called missing. */
    if (!description) {
        *failure = FAILURE_FORBIDDEN;
        tampered_message(id, why, why_size);
        return NULL;
    }
    if (verify && snapshot_store_check_seal(id, why, why_size) < 0) {
        *failure = FAILURE_FORBIDDEN;
        json_decref(description);
        return NULL;
    }
    return description;
}

int snapshot_store_check_seal(const char *id, char *why, size_t why_size)
{
    char dir[4200], path[4300];
    if (!snapshot_store_path(id, NULL, dir, sizeof dir))
        return -1;
    unsigned char expected[SEAL_BYTES], found[SEAL_BYTES];
    snprintf(path, sizeof path, "%s/%s", dir, SNAPSHOT_SEAL);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    bool read_seal = fd >= 0 && read(fd, found, SEAL_BYTES) == SEAL_BYTES;
    if (fd >= 0)
        close(fd);
    if (read_seal && compute_seal(dir, expected) == 0 &&
        CRYPTO_memcmp(expected, found, SEAL_BYTES) == 0)
        return 0;
    tampered_message(id, why, why_size);
    return -1;
}

void snapshot_store_each(void (*visit)(const char *id, json_t *description, void *arg), void *arg)
{
    DIR *dir = opendir(folder);
    if (!dir)
        return;
    for (struct dirent *entry; (entry = readdir(dir));) {
        if (!id_is_uuid(entry->d_name) || strlen(entry->d_name) != UUID_STRING_LENGTH)
            continue;
        char path[4400];
        snprintf(path, sizeof path, "%s/%s/%s", folder, entry->d_name, SNAPSHOT_DESCRIPTION);
        json_t *description = json_load_file(path, 0, NULL);
        if (description)
            visit(entry->d_name, description, arg);
        json_decref(description);
    }
    closedir(dir);
}

int snapshot_store_remove(const char *id)
{
    char dir[4200];
    if (!snapshot_store_path(id, NULL, dir, sizeof dir)) {
        errno = ENOENT;
        return -1;
    }
    struct stat st;
    if (lstat(dir, &st) < 0)
        return -1;
    return fs_remove_tree(dir);
}
