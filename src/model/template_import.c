/* The import of a root filesystem tarball as a template (templates_import, templates.h): the
 * tarball is extracted into a new layer by a child process, then checked for what a kernel
 * needs, then the layer is committed and the template registered. */
#include "model/templates.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/ids.h"
#include "common/log.h"
#include "model/template_views.h"

#define READ_BLOCK (256 << 10)
#define EXTRACT_MESSAGE_MAX 1024
#define EXTRACT_UID 65534 /* nobody */

typedef struct tar_source {
    int fd;
    EVP_MD_CTX *digest; /* SHA-256 of the tarball as read: the layer's key */
    char block[READ_BLOCK];
} tar_source;

static la_ssize_t read_block(struct archive *archive, void *arg, const void **buffer)
{
    tar_source *source = arg;
    ssize_t n;
    do
        n = read(source->fd, source->block, sizeof source->block);
    while (n < 0 && errno == EINTR);
    if (n < 0) {
        archive_set_error(archive, errno, "cannot read the tarball");
        return -1;
    }
    EVP_DigestUpdate(source->digest, source->block, (size_t)n);
    *buffer = source->block;
    return n;
}

/* What an entry may be in a template's root: files, directories and links, owned by root,
   without setuid or setgid bits. Devices, pipes and sockets are skipped (a root filesystem's
   /dev is the sandbox's own). */
static bool keep_entry(struct archive_entry *entry)
{
    mode_t type = archive_entry_filetype(entry);
    if (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK)
        return false;
    archive_entry_set_uid(entry, 0);
    archive_entry_set_gid(entry, 0);
    archive_entry_set_perm(entry, archive_entry_perm(entry) & 01777 & ~(mode_t)(S_ISUID | S_ISGID));
    archive_entry_set_mode(entry, type | (archive_entry_perm(entry)));
    return true;
}

/* What an import may write into the data directory: a small compressed tarball can expand to
   fill the disk (a decompression bomb), so extraction stops past this many bytes of files. */
#define EXTRACTED_BYTES_MAX (32LL << 30)

/* -1: an error (libarchive's string says which); -2: past EXTRACTED_BYTES_MAX. */
static int copy_data(struct archive *reader, struct archive *writer, long long *written)
{
    const void *block;
    size_t size;
    la_int64_t offset;
    int rc;
    while ((rc = archive_read_data_block(reader, &block, &size, &offset)) == ARCHIVE_OK) {
        *written += (long long)size;
        if (*written > EXTRACTED_BYTES_MAX)
            return -2;
        if (archive_write_data_block(writer, block, size, offset) != ARCHIVE_OK)
            return -1;
    }
    return rc == ARCHIVE_EOF ? 0 : -1;
}

/* In the child, in the new layer's directory: every entry extracted with libarchive's checks
   (no "..", no absolute path, nothing written through a link); the first refusal ends it.
   Writes "ok <sha256 hex>" or "error <why>" to `report`. */
static int extract_in_child(int tar_fd, int report)
{
    char message[EXTRACT_MESSAGE_MAX];
    tar_source *source = calloc(1, sizeof *source);
    struct archive *reader = archive_read_new(), *writer = archive_write_disk_new();
    if (!source || !reader || !writer)
        return dprintf(report, "error out of memory"), 1;
    source->fd = tar_fd;
    source->digest = EVP_MD_CTX_new();
    EVP_DigestInit_ex(source->digest, EVP_sha256(), NULL);
    archive_read_support_filter_all(reader);
    archive_read_support_format_tar(reader);
    archive_read_support_format_gnutar(reader);
    archive_write_disk_set_options(
        writer, ARCHIVE_EXTRACT_SECURE_NODOTDOT | ARCHIVE_EXTRACT_SECURE_SYMLINKS |
                    ARCHIVE_EXTRACT_SECURE_NOABSOLUTEPATHS | ARCHIVE_EXTRACT_PERM |
                    ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_UNLINK);
    if (archive_read_open(reader, source, NULL, read_block, NULL) != ARCHIVE_OK) {
        snprintf(message, sizeof message, "error the body is not a tar archive: %s",
                 archive_error_string(reader));
        return dprintf(report, "%s", message), 1;
    }
    struct archive_entry *entry;
    int rc;
    long long entries = 0, skipped = 0, written = 0;
    while ((rc = archive_read_next_header(reader, &entry)) == ARCHIVE_OK) {
        entries++;
        if (!keep_entry(entry)) {
            skipped++;
            continue;
        }
        int copied = 0;
        if (archive_write_header(writer, entry) != ARCHIVE_OK ||
            (copied = copy_data(reader, writer, &written)) < 0 ||
            archive_write_finish_entry(writer) != ARCHIVE_OK) {
            if (copied == -2)
                return dprintf(report,
                               "error the tree is over %lld GiB once extracted: import a "
                               "smaller root filesystem",
                               EXTRACTED_BYTES_MAX >> 30),
                       1;
            snprintf(message, sizeof message, "error the tarball's entry '%.200s' was refused: %s",
                     archive_entry_pathname(entry),
                     archive_error_string(writer) ? archive_error_string(writer)
                                                  : archive_error_string(reader));
            return dprintf(report, "%s", message), 1;
        }
    }
    if (rc != ARCHIVE_EOF) {
        snprintf(message, sizeof message, "error the tarball cannot be read after %lld entries: %s",
                 entries, archive_error_string(reader));
        return dprintf(report, "%s", message), 1;
    }
    archive_write_close(writer);
    unsigned char digest[32];
    unsigned int length = 0;
    EVP_DigestFinal_ex(source->digest, digest, &length);
    char hex[65];
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", digest[i]);
    return dprintf(report, "ok %s %lld", hex, skipped), 0;
}

/* Extracts the tarball into `layer` in a child process working there (so that libarchive's
   relative paths land in it, and the daemon's own working directory never changes), and waits
   for it. The tarball's SHA-256 into `hex`. -1 with `why`. */
static int extract(int tar_fd, const char *layer, char *hex, long long *skipped, char *why,
                   size_t why_size)
{
    int report[2];
    if (pipe2(report, O_CLOEXEC) < 0) {
        snprintf(why, why_size, "cannot make a pipe: %s", strerror(errno));
        return -1;
    }
    /* The child parses the tarball as nobody, not root: a flaw in libarchive's parsers then
       reaches no more than the new layer (the only directory it may write) and what anyone may
       read. The layer's files are made root's when it is committed. */
    if (chown(layer, EXTRACT_UID, EXTRACT_UID) < 0) {
        close(report[0]);
        close(report[1]);
        snprintf(why, why_size, "cannot prepare %s: %s", layer, strerror(errno));
        return -1;
    }
    pid_t pid = fork();
    if (pid == 0) {
        close(report[0]);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        umask(022);
        if (chdir(layer) < 0 || setgroups(0, NULL) < 0 ||
            setresgid(EXTRACT_UID, EXTRACT_UID, EXTRACT_UID) < 0 ||
            setresuid(EXTRACT_UID, EXTRACT_UID, EXTRACT_UID) < 0 ||
            prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
            dprintf(report[1], "error cannot enter %s as nobody: %s", layer, strerror(errno));
            _exit(1);
        }
        _exit(extract_in_child(tar_fd, report[1]));
    }
    close(report[1]);
    if (pid < 0) {
        close(report[0]);
        snprintf(why, why_size, "cannot fork to extract: %s", strerror(errno));
        return -1;
    }
    char message[EXTRACT_MESSAGE_MAX + 1];
    size_t used = 0;
    ssize_t n;
    while (used < sizeof message - 1 &&
           ((n = read(report[0], message + used, sizeof message - 1 - used)) > 0 ||
            (n < 0 && errno == EINTR)))
        used += n > 0 ? (size_t)n : 0;
    message[used] = '\0';
    close(report[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (strncmp(message, "ok ", 3) == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0 &&
        sscanf(message + 3, "%64s %lld", hex, skipped) == 2)
        return 0;
    snprintf(why, why_size, "%s",
             strncmp(message, "error ", 6) == 0 ? message + 6 : "the extraction failed");
    return -1;
}

/* What a kernel needs of a root filesystem: its Python with libpython (the kernel binary links
   it), IPython, and the C library with its loader. The first missing piece, named. */
static bool has_what_a_kernel_needs(const char *layer, char *why, size_t why_size)
{
    static const struct {
        const char *const paths[3];
        const char *what;
    } needs[] = {
        {{"usr/bin/python3.11", "usr/bin/python3", NULL}, "python3.11 (usr/bin/python3.11)"},
        {{"usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0", NULL, NULL},
         "libpython3.11 (usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0)"},
        {{"usr/lib/python3/dist-packages/IPython", "usr/local/lib/python3.11/dist-packages/IPython",
          "usr/lib/python3.11/site-packages/IPython"},
         "IPython (usr/lib/python3/dist-packages/IPython: Debian's python3-ipython)"},
        {{"usr/lib/x86_64-linux-gnu/libc.so.6", NULL, NULL},
         "the C library (usr/lib/x86_64-linux-gnu/libc.so.6)"},
        {{"usr/lib64/ld-linux-x86-64.so.2", "usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", NULL},
         "the dynamic loader (usr/lib64/ld-linux-x86-64.so.2)"},
    };
    char found_usr[PATH_MAX + 16];
    struct stat st;
    snprintf(found_usr, sizeof found_usr, "%.4000s/usr", layer);
    if (lstat(found_usr, &st) < 0 || !S_ISDIR(st.st_mode)) {
        snprintf(why, why_size,
                 "the tarball has no usr directory: give a Debian root filesystem (merged /usr, "
                 "paths like usr/bin/python3.11 at its top), e.g. one exported from an OCI image");
        return false;
    }
    for (size_t i = 0; i < sizeof needs / sizeof needs[0]; i++) {
        bool found = false;
        for (int j = 0; j < 3 && needs[i].paths[j] && !found; j++) {
            char path[PATH_MAX + 128];
            snprintf(path, sizeof path, "%s/%s", layer, needs[i].paths[j]);
            found = lstat(path, &st) == 0;
        }
        if (!found) {
            snprintf(why, why_size,
                     "the root filesystem lacks %s, which a cellbox kernel needs: install it in "
                     "the image (apt-get install python3.11 libpython3.11 python3-ipython) and "
                     "export it again",
                     needs[i].what);
            return false;
        }
    }
    return true;
}

int templates_import(const char *name, int tar_fd, const char *preload, int pool_size, bool replace,
                     failure_kind *failure, char *why, size_t why_size)
{
    if (templates_check_name(name, replace, failure, why, why_size) < 0)
        return -1;
    /* Extracted under a key of its own, then committed under its content's. */
    char random[17], staging_key[TEMPLATES_LAYER_KEY_MAX], key[TEMPLATES_LAYER_KEY_MAX],
        layer[PATH_MAX + 64];
    id_random_hex(random, 8);
    snprintf(staging_key, sizeof staging_key, "root-%s", random);
    if (templates_layer_begin(staging_key, layer, sizeof layer, why, why_size) < 0) {
        *failure = FAILURE_INTERNAL;
        return -1;
    }
    char hex[65] = "";
    long long skipped = 0;
    *failure = FAILURE_INVALID;
    if (extract(tar_fd, layer, hex, &skipped, why, why_size) < 0 ||
        !has_what_a_kernel_needs(layer, why, why_size)) {
        templates_layer_discard(staging_key);
        return -1;
    }
    snprintf(key, sizeof key, "root-%.16s", hex);
    char staging_work[PATH_MAX + 80], final_layer[PATH_MAX + 64], final_work[PATH_MAX + 80];
    snprintf(final_layer, sizeof final_layer, "%s/staging/%s", template_views_root(), key);
    snprintf(staging_work, sizeof staging_work, "%s.work", layer);
    snprintf(final_work, sizeof final_work, "%s.work", final_layer);
    templates_layer_discard(key); /* an import of the same tarball that never finished */
    if (rename(layer, final_layer) < 0 || rename(staging_work, final_work) < 0) {
        *failure = FAILURE_INTERNAL;
        snprintf(why, why_size, "cannot name the layer %s: %s", key, strerror(errno));
        templates_layer_discard(staging_key);
        templates_layer_discard(key);
        return -1;
    }
    if (templates_layer_commit(key, why, why_size) < 0) {
        *failure = FAILURE_INTERNAL;
        return -1;
    }
    if (skipped > 0)
        log_info("template %s: %lld device, pipe or socket entries of the tarball skipped", name,
                 skipped);
    template_definition definition = {.name = name,
                                      .from = "rootfs",
                                      .layer_count = 1,
                                      .preload = preload ? preload : "",
                                      .pool_size = pool_size,
                                      .kind = "rootfs"};
    snprintf(definition.layers[0], sizeof definition.layers[0], "%s", key);
    if (templates_register(&definition, replace, failure, why, why_size) < 0) {
        templates_remove_layer_if_unused(key);
        return -1;
    }
    return 0;
}
