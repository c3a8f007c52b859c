/* confined — file operations on a sandbox's filesystem, done by the daemon from outside it.
 *
 * The daemon is root on the host and the sandbox's files are hostile: a path from the API, or a
 * symbolic link a sandboxed program planted, must never reach a host file. So every path is
 * resolved with openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS) beneath a descriptor of the
 * sandbox's "/" (absolute links resolve inside it, ".." stops at it, /proc/self/fd-style links
 * are refused), walks never follow links, and each operation runs with the sandbox user's
 * filesystem identity (setfsuid/setfsgid, no supplementary groups), so permissions apply as they
 * would inside and created files belong to that user. /proc, /sys and /dev are refused.
 *
 * API paths are sandbox paths: relative ones are relative to /workspace. Failures return -1 or
 * NULL with `error` (an errno value) and `why` (a sentence for the client) set in the confined;
 * the API layer (api/errors.h) turns `error` into a status code. */
#ifndef CELLBOX_SANDBOX_CONFINED_H
#define CELLBOX_SANDBOX_CONFINED_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>

#define CONFINED_WORKSPACE "/workspace"
#define CONFINED_MAX_DEPTH 10          /* deepest list the API allows */
#define CONFINED_MAX_ENTRIES 100000    /* most entries one list returns (the daemon's memory) */
#define CONFINED_MAX_DIRECTORY 1000000 /* most entries a walk reads from one directory */

typedef struct confined {
    int root_fd; /* O_PATH descriptor of the sandbox's "/"; the caller owns it */
    uid_t uid;   /* the sandbox user, whose permissions every operation has */
    gid_t gid;
    int error;      /* errno of the last failure */
    char why[512];  /* the last failure in words, naming the path */
    long long inode_limit; /* when the last failure was ENOSPC for want of inodes (files), not
                              bytes: how many the file system holds; 0 otherwise */
    int user_depth; /* nesting of operations running as the user (only the outermost switches) */
    /* private: the daemon's own identity, put back when the outermost operation ends */
    uid_t saved_fsuid;
    gid_t saved_fsgid;
    gid_t *saved_groups;
    int saved_group_count;
} confined;

void confined_init(confined *c, int root_fd, uid_t uid, gid_t gid);

/* The absolute, normalized sandbox path ("a/./b" → "/workspace/a/b"); -1 (EINVAL) for "..",
   a control byte, an empty path or one too long. */
int confined_normalize(confined *c, const char *path, char *out, size_t size);

/* A regular file opened for reading (O_NONBLOCK: a FIFO or device swapped in never blocks us and
   is refused); st receives its status. Links are followed, inside the sandbox. */
int confined_open_read(confined *c, const char *path, struct stat *st);
/* A regular file opened for writing and emptied, its parent directories made first; created
   with `mode` (exactly) if it did not exist. *existed says which. */
int confined_open_write(confined *c, const char *path, mode_t mode, bool *existed);
/* Removes the file at `path` if it is still the one open at fd (a failed upload's remains). */
void confined_discard(confined *c, const char *path, int fd);
/* A directory opened for reading (for confined_set_attributes). */
int confined_open_directory(confined *c, const char *path);
/* Sets the permission bits (masked to 0777: never setuid, setgid or sticky) and, unless NULL,
   the modification time of the file open at fd, as the sandbox user (so only its own files). */
int confined_set_attributes(confined *c, int fd, mode_t mode, const struct timespec *modified);

json_t *confined_stat(confined *c, const char *path);            /* the entry; links not followed */
json_t *confined_list(confined *c, const char *path, int depth); /* [entry], sorted by path */
/* mkdir -p: the entry of the directory, *existed if it was there already; EEXIST when a file is
   in the way. */
json_t *confined_mkdir(confined *c, const char *path, mode_t mode, bool *existed);
/* rename(2), with `to`'s parents made first: a file there is replaced, an empty directory too.
   The entry at `to`. */
json_t *confined_move(confined *c, const char *from, const char *to);
/* A file, link (never its target) or empty directory; with `recursive`, a directory and all in
   it, walked without following links. */
int confined_remove(confined *c, const char *path, bool recursive);
/* A symbolic link at `path` (replacing a file or link there) pointing to `target`, verbatim. */
int confined_symlink(confined *c, const char *target, const char *path);

/* Walks the directory at `path` (links in `path` followed, none beneath it), `depth` levels deep,
   calling `visit` before descending, children in name order, as the sandbox user; E2BIG past
   `max_entries` (0: no limit). `dirfd` and `name` locate the entry for *at calls; `entry_path`
   is its absolute sandbox path. visit returns 0, or -1 to stop the walk (after confined_fail or
   confined_failf). Unreadable subdirectories are skipped; kernel filesystems are never entered. */
typedef int (*confined_visit)(void *arg, int dirfd, const char *name, const char *entry_path,
                              const struct stat *st);
int confined_walk(confined *c, const char *path, int depth, size_t max_entries,
                  confined_visit visit, void *arg);
/* From a visit: the regular file `name` in dirfd opened for reading, never following a link. */
int confined_open_entry(confined *c, int dirfd, const char *name, const char *entry_path);

/* An entry: {"name", "path", "type", "size", "mode", "uid", "gid", "modified_at",
   "symlink_target"?}. The entries of confined_stat, _list, _mkdir, _move and _entry_of_fd also
   hold "metadata" ({key: value}, sandbox/file_metadata.h) for a file or directory that has any. */
json_t *confined_entry(const char *path, const struct stat *st, const char *symlink_target);
/* The entry of the file open at fd (`path` names it), read as the sandbox user. */
json_t *confined_entry_of_fd(confined *c, const char *path, int fd);

/* Replaces the user-defined metadata of the file open at fd (opened for writing) with `metadata`
   ({key: string}): EINVAL with the reason when file_metadata_check refuses it, ENOTSUP where the
   file system keeps no extended attributes, ENOSPC past what it holds per file. */
int confined_set_metadata(confined *c, int fd, const char *path, json_t *metadata);

/* Record a failure and return -1: with the standard sentence for `error` about `path`, or with
   the caller's own. */
int confined_fail(confined *c, int error, const char *path);
int confined_failf(confined *c, int error, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
