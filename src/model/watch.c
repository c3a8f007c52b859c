#include "model/watch.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/loop.h"

/* What inotify reports for a watched directory: its entries made, written, removed, moved and
   changed, and its own end (IN_IGNORED comes by itself). Self events of a subdirectory are left
   out: its parent reports the same change under the entry's name. */
#define WATCH_EVENTS                                                                               \
    (IN_CREATE | IN_MODIFY | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_ATTRIB |                 \
     IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_EXCL_UNLINK)

typedef struct watched_directory {
    int descriptor; /* inotify's watch descriptor; -1 once inotify dropped it */
    char *relative; /* its path below the watched directory; "" for the directory itself */
} watched_directory;

struct watch {
    box *b;
    int inotify_fd;
    loop_watch loop;
    bool recursive;
    char path[PATH_MAX]; /* the watched directory's absolute sandbox path */
    watched_directory *directories;
    size_t directory_count, directory_capacity;
    const watch_callbacks *callbacks;
    void *arg;
    watch *next;
    bool stopped; /* its memory waits for the end of the batch: nothing more is reported */
};

static watch *all_watches;

const char *watch_path(const watch *w)
{
    return w->path;
}

static size_t watches_of(const box *b)
{
    size_t count = 0;
    for (watch *w = all_watches; w; w = w->next)
        count += w->b == b;
    return count;
}

static void release_memory(void *arg)
{
    watch *w = arg;
    for (size_t i = 0; i < w->directory_count; i++)
        free(w->directories[i].relative);
    free(w->directories);
    free(w);
}

/* Out of the list and the loop at once; the memory after the batch, which may still hold an
   event for it (loop.h). */
static void free_watch(watch *w)
{
    for (watch **at = &all_watches; *at; at = &(*at)->next)
        if (*at == w) {
            *at = w->next;
            break;
        }
    loop_watch_remove(&w->loop);
    if (w->inotify_fd >= 0)
        close(w->inotify_fd);
    w->inotify_fd = -1;
    w->stopped = true;
    loop_defer(release_memory, w);
}

void watch_stop(watch *w)
{
    free_watch(w);
}

/* Ends a watch from the inside: the owner hears why, then the watch is gone. */
static void end_watch(watch *w, int error, const char *why)
{
    const watch_callbacks *callbacks = w->callbacks;
    void *arg = w->arg;
    free_watch(w);
    callbacks->on_end(arg, error, why);
}

static void on_box_gone(box *b)
{
    char why[160];
    snprintf(why, sizeof why, "sandbox %s was removed: its watches ended with it", box_id(b));
    for (watch *w = all_watches, *next; w; w = next) {
        next = w->next;
        if (w->b == b)
            end_watch(w, ESRCH, why);
    }
}

/* ---- adding directories ---- */

/* The absolute sandbox path of `relative` below the watched directory; false if too long. */
static bool full_path(const watch *w, const char *relative, char out[PATH_MAX])
{
    bool root = strcmp(w->path, "/") == 0;
    int n = snprintf(out, PATH_MAX, "%s%s%s", w->path, *relative && !root ? "/" : "", relative);
    return n >= 0 && n < PATH_MAX;
}

/* The inotify watch on the directory open at `fd`, through /proc/self/fd: inotify_add_watch
   takes a path, and only this path names the directory the confined open found (a path the host
   resolves could be redirected by a link the sandbox planted). -1 with errno. */
static int add_descriptor(watch *w, int fd, const char *relative)
{
    if (w->directory_count == WATCH_MAX_DIRECTORIES) {
        errno = E2BIG;
        return -1;
    }
    char proc_path[64];
    snprintf(proc_path, sizeof proc_path, "/proc/self/fd/%d", fd);
    int descriptor = inotify_add_watch(w->inotify_fd, proc_path, WATCH_EVENTS);
    if (descriptor < 0)
        return -1;
    if (w->directory_count == w->directory_capacity) {
        w->directory_capacity = w->directory_capacity ? 2 * w->directory_capacity : 16;
        w->directories = realloc(w->directories, w->directory_capacity * sizeof *w->directories);
        if (!w->directories)
            die("out of memory");
    }
    w->directories[w->directory_count++] =
        (watched_directory){.descriptor = descriptor, .relative = strdup(relative)};
    return 0;
}

typedef struct tree_walk {
    watch *w;
    int error; /* errno of the first directory that could not be watched */
} tree_walk;

/* A directory met by the walk: opened by name beneath its parent without following a link, as
   the sandbox user (the walk runs as it), and watched. */
static int watch_visited(void *arg, int dirfd, const char *name, const char *entry_path,
                         const struct stat *st)
{
    tree_walk *walk = arg;
    if (!S_ISDIR(st->st_mode))
        return 0;
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return 0; /* gone or unreadable meanwhile: nothing to watch there */
    const char *relative = entry_path + strlen(walk->w->path) + (strcmp(walk->w->path, "/") != 0);
    int rc = add_descriptor(walk->w, fd, relative);
    if (rc < 0 && !walk->error)
        walk->error = errno;
    close(fd);
    return walk->error == E2BIG ? -1 : 0;
}

/* `relative`'s subdirectories (all of them, WATCH_MAX_DEPTH levels); -1 with *error when the
   directory bound was passed. */
static int add_subdirectories(watch *w, confined *c, const char *relative, int *error)
{
    char full[PATH_MAX];
    if (!full_path(w, relative, full))
        return 0;
    tree_walk walk = {.w = w};
    confined_walk(c, full, WATCH_MAX_DEPTH, 0, watch_visited, &walk);
    *error = walk.error;
    return walk.error == E2BIG ? -1 : 0;
}

/* A directory made (or moved in) below a recursive watch: it and what it already holds. False
   when the watch ended (it is freed). */
static void report(watch *w, uint32_t mask, const char *name);

/* What a directory made after the watch started already holds when its own watch is added: a
   file created (and written) in it before then (mkdir then write, at once) raised no event, so it
   is reported as created, and written if it holds bytes, now. One created between the watch and
   this listing may be reported twice. */
static void report_entries_already_there(watch *w, int fd, const char *relative)
{
    int copy = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    DIR *directory = copy >= 0 ? fdopendir(copy) : NULL;
    if (!directory) {
        if (copy >= 0)
            close(copy);
        return;
    }
    struct dirent *entry;
    for (int count = 0; !w->stopped && count < WATCH_MAX_DIRECTORIES && (entry = readdir(directory));
         count++) {
        if (strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0)
            continue;
        char name[PATH_MAX];
        int n = snprintf(name, sizeof name, "%s/%s", relative, entry->d_name);
        struct stat st;
        /* a file that already holds bytes was written too: report what a watch would have seen */
        bool written = fstatat(dirfd(directory), entry->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                       S_ISREG(st.st_mode) && st.st_size > 0;
        if (n > 0 && n < (int)sizeof name)
            report(w, IN_CREATE | (written ? IN_MODIFY : 0), name);
    }
    closedir(directory);
}

static bool follow_new_directory(watch *w, const char *relative)
{
    confined c;
    char why[256];
    if (!box_open_files(w->b, &c, why, sizeof why))
        return true;
    char full[PATH_MAX];
    int fd = full_path(w, relative, full) ? confined_open_directory(&c, full) : -1;
    int error = 0;
    if (fd >= 0) {
        if (add_descriptor(w, fd, relative) < 0)
            error = errno;
        else
            report_entries_already_there(w, fd, relative);
        close(fd);
        if (w->stopped) {
            box_close_files(&c);
            return false;
        }
        if (!error)
            add_subdirectories(w, &c, relative, &error);
    }
    box_close_files(&c);
    if (error == E2BIG) {
        char message[PATH_MAX + 200];
        snprintf(message, sizeof message,
                 "'%s' holds more than %d directories, the most one recursive watch follows: "
                 "watch a subdirectory, or without recursive",
                 w->path, WATCH_MAX_DIRECTORIES);
        end_watch(w, EMFILE, message);
        return false;
    }
    if (error)
        log_warn("watch: cannot follow %s/%s in sandbox %s: %s", w->path, relative, box_id(w->b),
                 strerror(error));
    return true;
}

/* ---- events ---- */

static watched_directory *directory_of(watch *w, int descriptor)
{
    for (size_t i = 0; i < w->directory_count; i++)
        if (w->directories[i].descriptor == descriptor)
            return &w->directories[i];
    return NULL;
}

static void report(watch *w, uint32_t mask, const char *name)
{
    static const struct {
        uint32_t mask;
        watch_change change;
    } changes[] = {
        {IN_CREATE | IN_MOVED_TO, WATCH_CREATE},
        {IN_MOVED_FROM, WATCH_RENAME},
        {IN_ATTRIB, WATCH_CHMOD},
        {IN_MODIFY, WATCH_WRITE},
        {IN_DELETE, WATCH_REMOVE},
    };
    for (size_t i = 0; i < sizeof changes / sizeof *changes && !w->stopped; i++)
        if (mask & changes[i].mask)
            w->callbacks->on_change(w->arg, changes[i].change, name);
}

/* One inotify event; false when the watch ended (it is freed). */
static bool handle_event(watch *w, const struct inotify_event *event)
{
    if (event->mask & IN_Q_OVERFLOW) {
        end_watch(w, EOVERFLOW,
                  "the sandbox changed files faster than they could be reported (the kernel's "
                  "event queue overflowed) and changes were lost: watch again");
        return false;
    }
    watched_directory *directory = directory_of(w, event->wd);
    if (!directory)
        return true;
    bool top = directory->relative[0] == '\0';
    if (event->mask & IN_IGNORED) {
        directory->descriptor = -1;
        if (top) {
            end_watch(w, 0, NULL);
            return false;
        }
        return true;
    }
    if ((event->mask & (IN_DELETE_SELF | IN_MOVE_SELF)) || event->len == 0)
        return true; /* the parent reports it by name; the top's end comes as IN_IGNORED */
    char name[PATH_MAX];
    int n = snprintf(name, sizeof name, "%s%s%s", directory->relative, top ? "" : "/", event->name);
    if (n < 0 || n >= (int)sizeof name)
        return true; /* no sandbox path is that long */
    report(w, event->mask, name);
    if (w->stopped)
        return false;
    if (w->recursive && (event->mask & IN_ISDIR) && (event->mask & (IN_CREATE | IN_MOVED_TO)))
        return follow_new_directory(w, name);
    return true;
}

static void on_inotify_ready(void *owner, uint32_t events)
{
    watch *w = owner;
    char buffer[64 * 1024] __attribute__((aligned(__alignof__(struct inotify_event))));
    /* bounded: a sandbox writing without pause cannot keep the loop here */
    for (int reads = 0; reads < 16; reads++) {
        ssize_t length = read(w->inotify_fd, buffer, sizeof buffer);
        if (length <= 0)
            return;
        for (char *at = buffer; at < buffer + length;) {
            const struct inotify_event *event = (const struct inotify_event *)at;
            at += sizeof *event + event->len;
            if (!handle_event(w, event))
                return;
        }
    }
}

void watch_take_pending(watch *w) { on_inotify_ready(w, EPOLLIN); }

/* ---- start ---- */

static watch *fail_start(watch *w, int *error, int code, char *why, size_t why_size,
                         const char *message)
{
    *error = code;
    snprintf(why, why_size, "%s", message);
    free_watch(w);
    return NULL;
}

watch *watch_start(box *b, const char *path, bool recursive, const watch_callbacks *callbacks,
                   void *arg, int *error, char *why, size_t why_size)
{
    static bool hooked;
    if (!hooked)
        box_add_box_gone_hook(on_box_gone);
    hooked = true;
    if (watches_of(b) >= WATCH_MAX_PER_SANDBOX) {
        *error = EMFILE;
        snprintf(why, why_size,
                 "sandbox %s has %d directory watches, the most it may have: stop one "
                 "(WatchHandle.stop(), RemoveWatcher) before starting another",
                 box_id(b), WATCH_MAX_PER_SANDBOX);
        return NULL;
    }
    watch *w = calloc(1, sizeof *w);
    if (!w)
        die("out of memory");
    *w = (watch){.b = b,
                 .inotify_fd = -1,
                 .loop = {.fd = -1},
                 .recursive = recursive,
                 .callbacks = callbacks,
                 .arg = arg,
                 .next = all_watches};
    all_watches = w;
    confined c;
    if (!box_open_files(b, &c, why, why_size)) {
        *error = EAGAIN;
        free_watch(w);
        return NULL;
    }
    int fd = confined_normalize(&c, path, w->path, sizeof w->path) == 0
                 ? confined_open_directory(&c, w->path)
                 : -1;
    if (fd < 0) {
        *error = c.error;
        snprintf(why, why_size, "%s", c.why);
        box_close_files(&c);
        free_watch(w);
        return NULL;
    }
    w->inotify_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    int rc = w->inotify_fd >= 0 ? add_descriptor(w, fd, "") : -1;
    int walk_error = 0;
    if (rc == 0 && recursive)
        rc = add_subdirectories(w, &c, "", &walk_error);
    int failure = rc < 0 ? (walk_error ? walk_error : errno) : 0;
    close(fd);
    box_close_files(&c);
    char message[PATH_MAX + 200];
    if (failure == E2BIG) {
        snprintf(message, sizeof message,
                 "'%s' holds more than %d directories, the most one recursive watch follows: "
                 "watch a subdirectory, or without recursive",
                 w->path, WATCH_MAX_DIRECTORIES);
        return fail_start(w, error, EMFILE, why, why_size, message);
    }
    if (failure) {
        /* EMFILE from inotify_init1 (max_user_instances), ENOSPC from inotify_add_watch
           (max_user_watches): the host's inotify limits, shared by every sandbox */
        snprintf(message, sizeof message,
                 "cannot watch '%s': %s (the host's inotify limits are reached): stop other "
                 "watches, or ask the operator to raise fs.inotify.max_user_instances and "
                 "max_user_watches",
                 w->path, strerror(failure));
        return fail_start(w, error, EMFILE, why, why_size, message);
    }
    loop_watch_add(&w->loop, w->inotify_fd, EPOLLIN, on_inotify_ready, w);
    return w;
}
