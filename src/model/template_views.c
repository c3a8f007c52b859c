#include "model/template_views.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "common/fs.h"
#include "common/log.h"
#include "model/templates.h"

/* A view's directories: at most one per top-level directory of its layers. */
#define MAX_VIEW_DIRECTORIES 32
/* What the kernel takes as one mount's options (a page). */
#define OVERLAY_OPTIONS_MAX 4096
/* Unmounting a view: a mount point stacked this deep is a leftover of crashes, not a view. */
#define MAX_STACKED_MOUNTS 8

static char templates_root[PATH_MAX];

const char *template_views_root(void) { return templates_root; }

static void under_root(char *out, size_t out_size, const char *what, const char *name)
{
    snprintf(out, out_size, "%.3800s/%s%s%.100s", templates_root, what, name ? "/" : "",
             name ? name : "");
}

bool template_views_is_layer_key(const char *key)
{
    const char *hex = strncmp(key, "root-", 5) == 0 ? key + 5 : key;
    if (strlen(hex) != 16)
        return false;
    for (const char *c = hex; *c; c++)
        if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f')))
            return false;
    return true;
}

/* ---- unmounting what a view or a build view left ---- */

static void unmount_all_at(const char *path)
{
    for (int i = 0; i < MAX_STACKED_MOUNTS && umount2(path, MNT_DETACH | UMOUNT_NOFOLLOW) == 0; i++)
        ;
}

/* Unmounts every mount below `dir` (each top-level directory and home/user) and removes the
   directories, never anything in them: a directory still holding files (a mount that would not
   go) stays, and is logged. */
static void unmount_view_tree(const char *dir)
{
    DIR *view = opendir(dir);
    if (!view)
        return;
    struct dirent *entry;
    while ((entry = readdir(view)) != NULL) {
        if (entry->d_name[0] == '.')
            continue;
        char path[PATH_MAX + 256], home[PATH_MAX + 300];
        snprintf(path, sizeof path, "%s/%s", dir, entry->d_name);
        snprintf(home, sizeof home, "%s/user", path);
        if (strcmp(entry->d_name, "home") == 0) {
            unmount_all_at(home);
            rmdir(home);
        }
        unmount_all_at(path);
        if (rmdir(path) < 0 && errno != ENOENT)
            log_warn("templates: cannot remove %s: %s", path, strerror(errno));
    }
    closedir(view);
    unmount_all_at(dir);
    rmdir(dir);
}

int template_views_init(const char *data_dir)
{
    snprintf(templates_root, sizeof templates_root, "%s/templates", data_dir);
    static const char *const folders[] = {"layers", "staging", "views", "skeleton/opt/cellbox",
                                          "skeleton/empty"};
    for (size_t i = 0; i < sizeof folders / sizeof folders[0]; i++) {
        char path[PATH_MAX + 64];
        under_root(path, sizeof path, folders[i], NULL);
        if (fs_mkdir_p(path, 0755) < 0)
            return -1;
    }
    /* A crashed daemon's views: unmounted before they are mounted again. Its unfinished layers
       (staging) are no template's: removed. */
    char views[PATH_MAX + 64], staging[PATH_MAX + 64];
    under_root(views, sizeof views, "views", NULL);
    DIR *dir = opendir(views);
    struct dirent *entry;
    while (dir && (entry = readdir(dir)) != NULL) {
        char path[PATH_MAX + 320];
        snprintf(path, sizeof path, "%s/%s", views, entry->d_name);
        if (entry->d_name[0] != '.')
            unmount_view_tree(path);
    }
    if (dir)
        closedir(dir);
    under_root(staging, sizeof staging, "staging", NULL);
    if (fs_remove_tree(staging) < 0 || fs_mkdir_p(staging, 0755) < 0)
        return -1;
    return 0;
}

/* ---- layers ---- */

void templates_layer_path(const char *key, char *out, size_t out_size)
{
    under_root(out, out_size, "layers", key);
}

bool templates_layer_exists(const char *key)
{
    char path[PATH_MAX + 64];
    struct stat st;
    if (!template_views_is_layer_key(key))
        return false;
    templates_layer_path(key, path, sizeof path);
    return lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static void staging_path(const char *key, const char *suffix, char *out, size_t out_size)
{
    snprintf(out, out_size, "%s/staging/%s%s", templates_root, key, suffix);
}

int templates_layer_begin(const char *key, char *path, size_t path_size, char *why,
                          size_t why_size)
{
    if (!templates_root[0]) { /* never under "/": templates_init has not run (a test driver) */
        snprintf(why, why_size, "the template store is not set up (templates_init)");
        return -1;
    }
    if (!template_views_is_layer_key(key)) {
        snprintf(why, why_size, "'%.40s' is not a layer key (16 hex digits)", key);
        return -1;
    }
    char work[PATH_MAX + 64];
    staging_path(key, "", path, path_size);
    staging_path(key, ".work", work, sizeof work);
    /* A step of an earlier build that never finished: what it left goes first. */
    if (fs_remove_tree(path) < 0 || fs_remove_tree(work) < 0 || mkdir(path, 0755) < 0 ||
        mkdir(work, 0700) < 0) {
        snprintf(why, why_size, "cannot make the layer %s: %s", path, strerror(errno));
        templates_layer_discard(key);
        return -1;
    }
    return 0;
}

void templates_layer_discard(const char *key)
{
    if (!template_views_is_layer_key(key))
        return;
    char path[PATH_MAX + 64], work[PATH_MAX + 64];
    staging_path(key, "", path, sizeof path);
    staging_path(key, ".work", work, sizeof work);
    if (fs_remove_tree(path) < 0 && errno != ENOENT)
        log_warn("templates: cannot remove %s: %s", path, strerror(errno));
    if (fs_remove_tree(work) < 0 && errno != ENOENT)
        log_warn("templates: cannot remove %s: %s", work, strerror(errno));
}

/* What a layer's walk found wrong: the first file it refused. */
static char refused[PATH_MAX + 128];

/* Every file of a finished layer becomes root's, setuid and setgid bits go, and only the kinds
   of file a root filesystem needs stay: what a build step (the sandbox user) left can never be
   taken over or run with privileges by a later sandbox. Overlayfs' whiteouts (character devices
   0:0, made by the kernel when a step deleted a file of a lower layer) are kept: a sandbox user
   cannot make one (mknod needs a capability it lacks). Never follows a link (FTW_PHYS). */
static int make_root_owned(const char *path, const struct stat *st, int type, struct FTW *where)
{
    bool whiteout = S_ISCHR(st->st_mode) && st->st_rdev == makedev(0, 0);
    if (!S_ISREG(st->st_mode) && !S_ISDIR(st->st_mode) && !S_ISLNK(st->st_mode) && !whiteout) {
        snprintf(refused, sizeof refused, "%s is a device, pipe or socket, which a template "
                 "cannot hold", path);
        return 1;
    }
    if (lchown(path, 0, 0) < 0) {
        snprintf(refused, sizeof refused, "cannot make %s root's: %s", path, strerror(errno));
        return 1;
    }
    if ((S_ISREG(st->st_mode) || S_ISDIR(st->st_mode)) && (st->st_mode & (S_ISUID | S_ISGID)) &&
        chmod(path, st->st_mode & 07777 & ~(mode_t)(S_ISUID | S_ISGID)) < 0) {
        snprintf(refused, sizeof refused, "cannot clear %s's setuid bit: %s", path,
                 strerror(errno));
        return 1;
    }
    return 0;
}

int templates_layer_commit(const char *key, char *why, size_t why_size)
{
    char path[PATH_MAX + 64], final[PATH_MAX + 64];
    staging_path(key, "", path, sizeof path);
    templates_layer_path(key, final, sizeof final);
    refused[0] = '\0';
    int walked = nftw(path, make_root_owned, 32, FTW_PHYS);
    if (walked != 0) {
        snprintf(why, why_size, "%s", refused[0] ? refused : strerror(errno));
        templates_layer_discard(key);
        return -1;
    }
    if (rename(path, final) < 0) {
        /* Another build made the same layer meanwhile (same key, same content): keep that one. */
        if (errno == ENOTEMPTY || errno == EEXIST) {
            templates_layer_discard(key);
            return 0;
        }
        snprintf(why, why_size, "cannot commit the layer %s: %s", final, strerror(errno));
        templates_layer_discard(key);
        return -1;
    }
    templates_layer_discard(key); /* the overlay's work directories */
    return 0;
}

void template_views_remove_layer(const char *key)
{
    char path[PATH_MAX + 64];
    if (!template_views_is_layer_key(key))
        return;
    templates_layer_path(key, path, sizeof path);
    if (fs_remove_tree(path) < 0 && errno != ENOENT)
        log_warn("templates: cannot remove the layer %s: %s", path, strerror(errno));
}

/* ---- what a layer holds ---- */

static long long counted_bytes;

static int count_bytes(const char *path, const struct stat *st, int type, struct FTW *where)
{
    if (S_ISREG(st->st_mode))
        counted_bytes += st->st_size;
    return 0;
}

long long template_views_layer_bytes(const char *key)
{
    char path[PATH_MAX + 64];
    templates_layer_path(key, path, sizeof path);
    counted_bytes = 0;
    nftw(path, count_bytes, 32, FTW_PHYS);
    return counted_bytes;
}

/* "name-version.dist-info" -> "name==version" (wheel names have no '-' in either part). */
static void add_distribution(json_t *packages, const char *entry)
{
    size_t length = strlen(entry);
    const char *suffix = ".dist-info";
    if (length <= strlen(suffix) || strcmp(entry + length - strlen(suffix), suffix) != 0)
        return;
    char stem[256];
    snprintf(stem, sizeof stem, "%.*s", (int)(length - strlen(suffix)), entry);
    char *dash = strchr(stem, '-');
    if (!dash)
        return;
    *dash = '\0';
    char text[300];
    snprintf(text, sizeof text, "%s==%s", stem, dash + 1);
    size_t i;
    json_t *value;
    json_array_foreach(packages, i, value) if (strcmp(json_string_value(value), text) == 0) return;
    json_array_append_new(packages, json_string(text));
}

static void scan_site_directory(json_t *packages, const char *dir)
{
    DIR *site = opendir(dir);
    struct dirent *entry;
    while (site && (entry = readdir(site)) != NULL)
        add_distribution(packages, entry->d_name);
    if (site)
        closedir(site);
}

void template_views_layer_packages(const char *key, json_t *packages)
{
    char layer[PATH_MAX + 64], lib[PATH_MAX + 128];
    templates_layer_path(key, layer, sizeof layer);
    snprintf(lib, sizeof lib, "%s/usr/local/lib", layer);
    DIR *dir = opendir(lib);
    struct dirent *entry;
    while (dir && (entry = readdir(dir)) != NULL) {
        if (strncmp(entry->d_name, "python3", 7) != 0)
            continue;
        char site[PATH_MAX + 300];
        snprintf(site, sizeof site, "%.4000s/%.100s/dist-packages", lib, entry->d_name);
        scan_site_directory(packages, site);
    }
    if (dir)
        closedir(dir);
    snprintf(lib, sizeof lib, "%s/usr/lib/python3/dist-packages", layer);
    scan_site_directory(packages, lib);
}

/* ---- views ---- */

/* Top-level names a view never has: the sandbox's root makes them itself (rootfs.c), or they are
   merged-usr links; home is the workspace, of which a view has only home/user. */
static bool is_view_directory(const char *name)
{
    static const char *const never[] = {"home", "root", "dev", "proc", "sys", "tmp", "run",
                                        "workspace", "bin", "sbin", "lib", "lib32", "lib64",
                                        "libx32", "boot", "mnt", "media", "lost+found"};
    if (name[0] == '.' || strlen(name) > 64)
        return false;
    for (size_t i = 0; i < sizeof never / sizeof never[0]; i++)
        if (strcmp(name, never[i]) == 0)
            return false;
    return true;
}

typedef struct view_plan {
    int count;
    char directory[MAX_VIEW_DIRECTORIES][72]; /* top-level names, and "home/user" */
} view_plan;

static void plan_add(view_plan *plan, const char *name)
{
    for (int i = 0; i < plan->count; i++)
        if (strcmp(plan->directory[i], name) == 0)
            return;
    if (plan->count < MAX_VIEW_DIRECTORIES)
        snprintf(plan->directory[plan->count++], sizeof plan->directory[0], "%s", name);
}

static bool is_directory(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool is_imported_root(const char *key)
{
    return strncmp(key, "root-", 5) == 0;
}

/* usr, opt (where the runtime is bound), home/user, and every other top-level directory a layer
   has; etc only for an imported root filesystem. */
static void plan_view(const char *const *layers, int layer_count, const char *const *extra,
                      view_plan *plan)
{
    plan->count = 0;
    plan_add(plan, "usr");
    plan_add(plan, "opt");
    plan_add(plan, "home/user");
    for (int i = 0; i < layer_count; i++) {
        char path[PATH_MAX + 64];
        templates_layer_path(layers[i], path, sizeof path);
        DIR *dir = opendir(path);
        struct dirent *entry;
        while (dir && (entry = readdir(dir)) != NULL) {
            char child[PATH_MAX + 320];
            snprintf(child, sizeof child, "%.4000s/%s", path, entry->d_name);
            if ((is_view_directory(entry->d_name) &&
                 (strcmp(entry->d_name, "etc") != 0 || is_imported_root(layers[0]))) &&
                is_directory(child))
                plan_add(plan, entry->d_name);
        }
        if (dir)
            closedir(dir);
    }
    for (int i = 0; extra && extra[i]; i++) {
        char name[72];
        snprintf(name, sizeof name, "%s", extra[i] + strspn(extra[i], "/"));
        name[strcspn(name, "/")] = '\0';
        if (*name && is_view_directory(name) && strcmp(name, "etc") != 0)
            plan_add(plan, name);
    }
}

/* The lower directories of `directory` for overlayfs' lowerdir, top first: each layer's copy
   (top to bottom), then the base's (the host's /usr, or the skeleton's opt with its empty
   opt/cellbox; an imported root's are its bottom layer's). "" when there is none. */
static int lower_directories(const char *directory, const char *const *layers, int layer_count,
                             char *out, size_t out_size)
{
    size_t used = 0;
    out[0] = '\0';
    for (int i = layer_count - 1; i >= 0; i--) {
        char path[PATH_MAX + 160];
        templates_layer_path(layers[i], path, sizeof path);
        size_t base_length = strlen(path);
        snprintf(path + base_length, sizeof path - base_length, "/%s", directory);
        if (!is_directory(path))
            continue;
        if (strchr(path, ':') || strchr(path, ',')) { /* overlayfs' separators */
            errno = EINVAL;
            return -1;
        }
        int n = snprintf(out + used, out_size - used, "%s%s", used ? ":" : "", path);
        if (n < 0 || (size_t)n >= out_size - used) {
            errno = E2BIG;
            return -1;
        }
        used += (size_t)n;
    }
    char base[PATH_MAX + 64] = "";
    bool imported = layer_count > 0 && is_imported_root(layers[0]);
    if (strcmp(directory, "usr") == 0 && !imported)
        snprintf(base, sizeof base, "/usr");
    else if (strcmp(directory, "opt") == 0)
        under_root(base, sizeof base, "skeleton/opt", NULL);
    if (*base) {
        int n = snprintf(out + used, out_size - used, "%s%s", used ? ":" : "", base);
        if (n < 0 || (size_t)n >= out_size - used) {
            errno = E2BIG;
            return -1;
        }
    }
    return 0;
}

/* One directory of a view: a single lower is bound, several are an overlay; read-only. With
   `upper` (a build step), an overlay with that upper directory, writable. */
static int mount_view_directory(const char *target, const char *lower, const char *upper,
                                const char *work)
{
    if (fs_mkdir_p(target, 0755) < 0)
        return -1;
    if (!upper && !strchr(lower, ':')) {
        if (mount(lower, target, NULL, MS_BIND | MS_REC, NULL) < 0)
            return -1;
        return mount(NULL, target, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV,
                     NULL);
    }
    char options[OVERLAY_OPTIONS_MAX];
    int n = upper ? snprintf(options, sizeof options,
                             "lowerdir=%s,upperdir=%s,workdir=%s,redirect_dir=off,index=off,"
                             "metacopy=off",
                             lower, upper, work)
                  : snprintf(options, sizeof options, "lowerdir=%s", lower);
    if (n < 0 || (size_t)n >= sizeof options) {
        errno = E2BIG;
        return -1;
    }
    return mount("overlay", target, "overlay",
                 MS_NOSUID | MS_NODEV | (upper ? 0 : MS_RDONLY), options);
}

int template_views_mount(const char *name, const char *const *layers, int layer_count,
                         char *view, size_t view_size, char *why, size_t why_size)
{
    if (!templates_root[0]) {
        snprintf(why, why_size, "the template store is not set up (templates_init)");
        return -1;
    }
    snprintf(view, view_size, "%s/views/%s", templates_root, name);
    unmount_view_tree(view); /* what an earlier mount of the same name left */
    if (fs_mkdir_p(view, 0755) < 0) {
        snprintf(why, why_size, "cannot create %s: %s", view, strerror(errno));
        return -1;
    }
    view_plan plan;
    plan_view(layers, layer_count, NULL, &plan);
    for (int i = 0; i < plan.count; i++) {
        char lower[OVERLAY_OPTIONS_MAX], target[PATH_MAX + 80];
        if (lower_directories(plan.directory[i], layers, layer_count, lower, sizeof lower) < 0) {
            snprintf(why, why_size, "template %s: too many or oddly named layers for /%s: %s",
                     name, plan.directory[i], strerror(errno));
            unmount_view_tree(view);
            return -1;
        }
        if (!*lower)
            continue;
        snprintf(target, sizeof target, "%s/%s", view, plan.directory[i]);
        if (mount_view_directory(target, lower, NULL, NULL) < 0) {
            snprintf(why, why_size, "cannot mount template %s's /%s: %s", name,
                     plan.directory[i], strerror(errno));
            unmount_view_tree(view);
            return -1;
        }
    }
    return 0;
}

void template_views_unmount(const char *name)
{
    char view[PATH_MAX + 80];
    snprintf(view, sizeof view, "%s/views/%s", templates_root, name);
    unmount_view_tree(view);
}

/* ---- a build step's view ---- */

/* The directories a build step may write, made in its new layer for the build user: pip (as a
   user, with a writable dist-packages) and npm -g install under /usr/local; /opt, the home and
   the directories WORKDIR and COPY name are the step's too. Their parents are root's. */
static int make_writable_directories(const char *upper, const view_plan *plan, uid_t uid, gid_t gid)
{
    static const char *const usr_local[] = {
        "usr/local", "usr/local/bin", "usr/local/lib", "usr/local/lib/python3.11",
        "usr/local/lib/python3.11/dist-packages", "usr/local/lib/node_modules",
        "usr/local/share", "usr/local/include", "usr/local/etc", "usr/local/src", "usr/local/sbin"};
    char path[PATH_MAX + 128];
    for (size_t i = 0; i < sizeof usr_local / sizeof usr_local[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", upper, usr_local[i]);
        if (fs_mkdir_p(path, 0755) < 0 || (i > 0 && lchown(path, uid, gid) < 0))
            return -1;
    }
    for (int i = 0; i < plan->count; i++) {
        const char *directory = plan->directory[i];
        snprintf(path, sizeof path, "%s/%s", upper, directory);
        if (fs_mkdir_p(path, 0755) < 0)
            return -1;
        bool owned = strcmp(directory, "usr") != 0 && strcmp(directory, "etc") != 0;
        if (owned && lchown(path, uid, gid) < 0)
            return -1;
    }
    return 0;
}

int templates_mount_build_view(const char *from, const char *const *lower, int lower_count,
                               const char *upper_layer, const char *const *extra_dirs,
                               uid_t uid, gid_t gid, const char *mount_dir, char *why,
                               size_t why_size)
{
    (void)from; /* its layers are `lower`; an imported root is their bottom one */
    char upper[PATH_MAX + 64], work[PATH_MAX + 64];
    staging_path(upper_layer, "", upper, sizeof upper);
    staging_path(upper_layer, ".work", work, sizeof work);
    if (!template_views_is_layer_key(upper_layer) || !is_directory(upper) || !is_directory(work)) {
        snprintf(why, why_size, "the layer %.40s was not begun (templates_layer_begin)",
                 upper_layer);
        return -1;
    }
    view_plan plan;
    plan_view(lower, lower_count, extra_dirs, &plan);
    if (fs_mkdir_p(mount_dir, 0755) < 0 || make_writable_directories(upper, &plan, uid, gid) < 0) {
        snprintf(why, why_size, "cannot prepare the build view %s: %s", mount_dir,
                 strerror(errno));
        return -1;
    }
    for (int i = 0; i < plan.count; i++) {
        const char *directory = plan.directory[i];
        char lowers[OVERLAY_OPTIONS_MAX], target[PATH_MAX + 80], upper_dir[PATH_MAX + 160],
            work_dir[PATH_MAX + 160], flat[80];
        if (lower_directories(directory, lower, lower_count, lowers, sizeof lowers) < 0) {
            snprintf(why, why_size, "too many or oddly named layers for /%s: %s", directory,
                     strerror(errno));
            templates_unmount_build_view(mount_dir);
            return -1;
        }
        if (!*lowers) /* a directory no layer below has: over an empty one */
            under_root(lowers, sizeof lowers, "skeleton/empty", NULL);
        snprintf(flat, sizeof flat, "%s", directory);
        for (char *slash = strchr(flat, '/'); slash; slash = strchr(slash, '/'))
            *slash = '_'; /* home/user's work directory */
        snprintf(target, sizeof target, "%s/%s", mount_dir, directory);
        snprintf(upper_dir, sizeof upper_dir, "%s/%s", upper, directory);
        snprintf(work_dir, sizeof work_dir, "%s/%s", work, flat);
        if (fs_mkdir_p(work_dir, 0700) < 0 ||
            mount_view_directory(target, lowers, upper_dir, work_dir) < 0) {
            snprintf(why, why_size, "cannot mount the build view's /%s: %s", directory,
                     strerror(errno));
            templates_unmount_build_view(mount_dir);
            return -1;
        }
    }
    return 0;
}

void templates_unmount_build_view(const char *mount_dir)
{
    unmount_view_tree(mount_dir);
}

/* ---- the home seed ---- */

#define SEED_MAX_DEPTH 32

static int copy_file_contents(int from, int to)
{
    char buffer[65536];
    for (;;) {
        ssize_t n = read(from, buffer, sizeof buffer);
        if (n <= 0)
            return n < 0 ? -1 : 0;
        for (ssize_t done = 0; done < n;) {
            ssize_t written = write(to, buffer + done, (size_t)(n - done));
            if (written < 0)
                return -1;
            done += written;
        }
    }
}

/* Copies the directory `from` into `to`, entry by entry through descriptors: nothing is
   followed (a link is copied as a link), nothing that exists in `to` is replaced, and every
   copy is the sandbox user's. */
static int copy_tree(int from, int to, uid_t uid, int depth)
{
    if (depth > SEED_MAX_DEPTH) {
        errno = ELOOP;
        return -1;
    }
    int listing = dup(from);
    DIR *dir = listing >= 0 ? fdopendir(listing) : NULL;
    if (!dir) {
        if (listing >= 0)
            close(listing);
        return -1;
    }
    int rc = 0;
    struct dirent *entry;
    while (rc == 0 && (entry = readdir(dir)) != NULL) {
        const char *name = entry->d_name;
        struct stat st;
        if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0 ||
            fstatat(from, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        mode_t mode = st.st_mode & 0777;
        if (S_ISDIR(st.st_mode)) {
            if (mkdirat(to, name, mode | 0700) < 0 && errno != EEXIST)
                rc = -1;
            int child_from = openat(from, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            int child_to = openat(to, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (rc == 0 && (child_from < 0 || child_to < 0 || fchown(child_to, uid, uid) < 0 ||
                            copy_tree(child_from, child_to, uid, depth + 1) < 0))
                rc = -1;
            if (child_from >= 0)
                close(child_from);
            if (child_to >= 0)
                close(child_to);
        } else if (S_ISREG(st.st_mode)) {
            int source = openat(from, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
            int copy = openat(to, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
            if (source < 0 || (copy < 0 && errno != EEXIST) ||
                (copy >= 0 && (copy_file_contents(source, copy) < 0 || fchown(copy, uid, uid) < 0)))
                rc = -1;
            if (source >= 0)
                close(source);
            if (copy >= 0)
                close(copy);
        } else if (S_ISLNK(st.st_mode)) {
            char target[PATH_MAX];
            ssize_t n = readlinkat(from, name, target, sizeof target - 1);
            if (n >= 0) {
                target[n] = '\0';
                if ((symlinkat(target, to, name) < 0 && errno != EEXIST) ||
                    fchownat(to, name, uid, uid, AT_SYMLINK_NOFOLLOW) < 0)
                    rc = -1;
            }
        } /* nothing else is copied: a home holds files, directories and links */
    }
    closedir(dir);
    return rc;
}

int templates_seed_workspace(const char *view, const char *workspace, uid_t uid, char *why,
                             size_t why_size)
{
    char home[PATH_MAX + 32];
    snprintf(home, sizeof home, "%.4000s/home/user", view);
    int from = open(home, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (from < 0)
        return errno == ENOENT ? 0 : -1; /* a template whose build left nothing in the home */
    int to = open(workspace, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int rc = to < 0 ? -1 : copy_tree(from, to, uid, 0);
    if (rc < 0)
        snprintf(why, why_size, "cannot copy the template's home into the workspace %s: %s",
                 workspace, strerror(errno));
    close(from);
    if (to >= 0)
        close(to);
    return rc;
}
