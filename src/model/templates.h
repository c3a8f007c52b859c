/* templates — templates with files of their own: a root filesystem made of read-only layers over
 * a base, plus a preload list. /v1, E2B's control plane, MCP, the Kernel Gateway API and the CLI
 * share these verbs; template_build.h makes layers from a Dockerfile, templates_import from a
 * root filesystem tarball.
 *
 * On disk, under DATA_DIR/templates:
 *   layers/<key>/      one layer: a directory tree (an overlayfs upper directory: whiteouts and
 *                      opaque directories included) holding what one build step changed, at
 *                      root-relative paths (usr/local/..., opt/..., home/user/..., app/...).
 *                      <key> is 16 lowercase hex digits (the first 64 bits of the step's
 *                      SHA-256 cache key, template_build.h), or "root-" + 16 hex digits for an
 *                      imported root filesystem (a whole Debian tree: usr/, etc/, ...).
 *   <name>.json        a template's record: its base, its layers bottom to top, its settings
 *                      (env, workdir, user, preload, pool size), how it was made and when.
 *   views/<name>/      where the host mounts the template's read-only view (below), while the
 *                      daemon runs.
 *
 * A template's view is a directory whose subdirectories are what a sandbox of it sees instead of
 * (or beside) the base: views/<name>/usr is an overlay of its layers' usr/ over the base's /usr
 * (the host's, or an imported root's usr/), views/<name>/etc exists only for an imported root,
 * views/<name>/home/user holds the files the build left in the home (copied into each new
 * sandbox's workspace), and any other top-level directory a layer has (opt, app, srv, ...)
 * is an overlay of the layers' copies. rootfs.h's rootfs_template binds them. The templates of
 * --templates (NAME:MODULES[:POOL]) and python3 have no view: they are the base with a preload
 * list. */
#ifndef CELLBOX_MODEL_TEMPLATES_H
#define CELLBOX_MODEL_TEMPLATES_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "common/failure.h"

#define TEMPLATES_MAX_LAYERS 64
#define TEMPLATES_LAYER_KEY_MAX 32 /* "root-" + 16 hex digits, with room */
#define TEMPLATES_MAX_ENV 64

/* The names FROM accepts for cellbox's own base root (the host's Debian Python, numpy, pandas,
   matplotlib, IPython): "cellbox", "python3", and E2B's "e2bdev/code-interpreter" and
   "e2bdev/base" with any tag. */
bool templates_is_base_name(const char *from);

/* What a template is made of and how it behaves, as template_build and templates_import hand it
   to templates_register, and as its record keeps it. Strings are owned by the caller. */
typedef struct template_definition {
    const char *name;             /* letters, digits, '.', '_', '-'; at most 64 */
    const char *from;             /* the base as written (FROM), for the model */
    int layer_count;
    char layers[TEMPLATES_MAX_LAYERS][TEMPLATES_LAYER_KEY_MAX]; /* bottom to top; existing */
    int env_count;
    const char *env[TEMPLATES_MAX_ENV]; /* "NAME=value", in the order ENV set them */
    const char *workdir;          /* absolute; NULL: /home/user */
    const char *user;             /* "user" or "root" as written (kernels run as the user) */
    const char *preload;          /* modules its zygote imports, comma-separated; "" none */
    int pool_size;                /* its warm pool */
    const char *kind;             /* "dockerfile" or "rootfs" */
    const char *dockerfile;       /* the text it was built from, or NULL */
    double build_seconds;
} template_definition;

/* Called once at start, after the kernelspecs of the options exist and before sandboxes are
   adopted: reads the records, mounts each template's view and registers each as a kernelspec
   (warm pool as any template's; a zygote as for templates_register). A template whose layers are missing is logged and
   skipped, never half-mounted. */
void templates_init(const char *data_dir);
/* At shutdown, once every sandbox has ended: unmounts every view (the layers stay). */
void templates_unmount_all(void);

/* DATA_DIR/templates/layers/<key>: where a layer lives (it may not exist yet). */
void templates_layer_path(const char *key, char *out, size_t out_size);
bool templates_layer_exists(const char *key);
/* Makes the new, empty layer directory for `key` in a staging place and returns its path; the
   layer becomes visible to templates_layer_exists only through templates_layer_commit (a rename,
   after its files were made root's: nothing a build step left can be taken over later), or is
   removed by templates_layer_discard. */
int templates_layer_begin(const char *key, char *path, size_t path_size, char *why,
                          size_t why_size);
int templates_layer_commit(const char *key, char *why, size_t why_size);
void templates_layer_discard(const char *key);

/* A view made for one build step (template_build.h): the overlays of `lower` (bottom to top,
   over the base of template `from`, NULL: cellbox's base) with `upper_layer` (a layer begun
   with templates_layer_begin) as their writable upper directory, mounted under `mount_dir`
   (created) with the same layout as a template's view, plus `extra_dirs` (top-level directories
   a WORKDIR or COPY names: made in the upper layer). Directories the step may write (usr/local
   and its usual subdirectories, opt, home/user, and the extra ones) are made in the upper layer
   owned by `uid`:`gid`, the build sandbox's user, so `pip install` and `npm -g` install there
   and nothing of the base can be changed. -1 with `why`. */
int templates_mount_build_view(const char *from, const char *const *lower, int lower_count,
                               const char *upper_layer, const char *const *extra_dirs,
                               uid_t uid, gid_t gid, const char *mount_dir, char *why,
                               size_t why_size);
void templates_unmount_build_view(const char *mount_dir); /* and removes it */
/* The layers of template `name` (bottom to top), its env, workdir and user: what a Dockerfile's
   FROM <template> builds on. False when there is no such template with files (python3 and the
   templates of --templates have none: FROM them is FROM cellbox's base). `out`'s strings are
   the store's, valid until the template is replaced or deleted. */
bool templates_definition_of(const char *name, template_definition *out);

/* Registers a template whose layers exist: writes its record, mounts its view, adds its
   kernelspec and starts its zygote (only with the daemon's --template-zygotes: a zygote is a
   root process on the host, and the template's packages would run in it). With `replace`, an existing template of that name is
   replaced (refused while sandboxes use it); otherwise a name taken (by any template, built-in
   and --templates ones included) is a conflict. -1 with a kind and `why`. */
int templates_register(const template_definition *definition, bool replace,
                       failure_kind *failure, char *why, size_t why_size);
/* Whether `name` may be registered: invalid (a bad name), conflict (taken, and not `replace`
   or not replaceable). Checked before a build starts, so a clash costs nothing. */
int templates_check_name(const char *name, bool replace, failure_kind *failure, char *why,
                         size_t why_size);

/* Imports a root filesystem tarball (tar, optionally compressed; `tar_fd` is read to its end)
   as template `name`: extracted as one layer ("root-" + its hash) without device nodes, setuid
   bits or paths leaving the tree, then checked for what a kernel needs (python3.11 with
   libpython3.11 and IPython, the C library the kernel binary needs), and registered. -1 with a
   kind and `why` naming what is missing; nothing is left behind. */
int templates_import(const char *name, int tar_fd, const char *preload, int pool_size,
                     bool replace, failure_kind *failure, char *why, size_t why_size);

/* Copies what a template's build left in the home (`view`/home/user) into a new sandbox's
   workspace, owned by the sandbox's `uid`, before its kernel starts: the home is the sandbox's
   own, writable, so it gets copies, never the template's files. Nothing is followed and nothing
   already there is replaced. 0 (also when there is nothing to copy), or -1 with `why`. */
int templates_seed_workspace(const char *view, const char *workspace, uid_t uid, char *why,
                             size_t why_size);

/* Deletes a template with files: refused (conflict, `why` naming the sandboxes) while sandboxes
   use it; invalid for python3 and the templates of --templates (the daemon's options define
   them); not found. Its view is unmounted, its record removed, and its layers removed unless
   another template uses them. */
int templates_delete(const char *name, failure_kind *failure, char *why, size_t why_size);

/* A template's model for /v1 and the CLI: {"name", "display_name", "language", "default",
   "preload", "pool_size", "kind" ("built-in", "modules", "dockerfile", "rootfs"), "from",
   "size_bytes" (its layers' files), "layers", "build_seconds", "created_at", "env", "workdir",
   "user", "packages": ["name==version", ...] (the Python distributions its layers hold),
   "sandboxes": [ids]}. NULL: no such template. */
json_t *templates_model(const char *name);
json_t *templates_list_model(void); /* every template's, python3 first */

#endif
