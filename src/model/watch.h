/* watch — changes in a sandbox's directory, from inotify on the daemon's loop: E2B envd's
 * WatchDir stream and its polling watchers (api/envd_filesystem.c) are built on it.
 *
 * The daemon is root on the host and a sandbox can plant links, so a watched directory is opened
 * through box_open_files and sandbox/confined.h (inside the sandbox's "/", as the sandbox user,
 * never following a link out) and the inotify watch is added on that open descriptor
 * (/proc/self/fd/N), never on a path the host resolves. With `recursive`, the subdirectories
 * there at the start and those made later are watched the same way (each opened by name beneath
 * its parent's descriptor, without following links), WATCH_MAX_DEPTH levels deep.
 *
 * Bounds: WATCH_MAX_PER_SANDBOX watches per sandbox (one more fails with E2BIG's sentence),
 * WATCH_MAX_DIRECTORIES directories per watch (at the start: the watch fails; later: it ends,
 * saying so). A sandbox that makes changes faster than the daemon reads them overflows the
 * kernel's queue: the watch ends, saying so. Watches end with their sandbox; they keep watching
 * while it is paused (nothing changes inside a frozen sandbox). */
#ifndef CELLBOX_MODEL_WATCH_H
#define CELLBOX_MODEL_WATCH_H

#include <stdbool.h>
#include <stddef.h>

#include "model/box.h"

#define WATCH_MAX_PER_SANDBOX 32
#define WATCH_MAX_DIRECTORIES 4096
#define WATCH_MAX_DEPTH 16

typedef struct watch watch;

/* What happened to an entry, as envd's EventType names it (and fsnotify's order of them). */
typedef enum watch_change {
    WATCH_CREATE, /* made, or moved in */
    WATCH_WRITE,  /* its contents written */
    WATCH_REMOVE, /* removed */
    WATCH_RENAME, /* moved away (its new name, inside, is a CREATE) */
    WATCH_CHMOD,  /* its permissions, owner or times changed */
} watch_change;

typedef struct watch_callbacks {
    /* `name` is relative to the watched directory ("a.txt", "sub/b.txt"), as envd names it. */
    void (*on_change)(void *arg, watch_change change, const char *name);
    /* The watch ended by itself; `error` says why: 0 the watched directory was removed or moved
       away (`why` NULL), ESRCH the sandbox is gone, EMFILE a bound was passed, EOVERFLOW the
       kernel's queue overflowed (changes were lost); `why` then says so in a sentence. The watch
       is freed once on_end returns: forget it. */
    void (*on_end)(void *arg, int error, const char *why);
} watch_callbacks;

/* Starts watching `path` of sandbox b; NULL with *error (an errno value: ENOENT, ENOTDIR,
   EACCES, E2BIG past a bound, EMFILE) and `why` (a sentence naming the path) on failure. */
watch *watch_start(box *b, const char *path, bool recursive, const watch_callbacks *callbacks,
                   void *arg, int *error, char *why, size_t why_size);
/* The watched directory's absolute sandbox path ("/workspace/data"). */
const char *watch_path(const watch *w);
/* Reads the changes the kernel queued for this watch and not yet read by the loop, calling the
   callbacks as the loop would (the watch may end in them): a poll then answers everything done
   before it, a file removed by the call just before included. */
void watch_take_pending(watch *w);
/* Stops a watch; no callback is called after (also when called from one). */
void watch_stop(watch *w);

#endif
