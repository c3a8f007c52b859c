/* kernelspec — the kernels cellbox can start (its templates, and the kernels of other languages:
 * kernelspec_languages.c), and where their files live.
 *
 * python3 and the templates of --templates are made at start; templates with files of their own
 * (model/templates.h) are added and removed while the daemon runs. Each is a heap entry whose
 * address stays the same while it exists: kernels hold it, so it is removed only once no kernel
 * of it is left (templates_delete sees to that). */
#ifndef CELLBOX_KERNEL_KERNELSPEC_H
#define CELLBOX_KERNEL_KERNELSPEC_H

#include <jansson.h>
#include <stdbool.h>

#include "sandbox/rootfs.h"

typedef struct zygote zygote;

/* The template every daemon has; --templates adds more, all of them Python with the same
   packages, each with its own preload list and warm pool. */
#define KERNELSPEC_BUILT_IN "python3"
#define KERNELSPEC_MAX 64
/* A template's name: up to 64 letters, digits, '.', '_' or '-', starting with a letter or digit
   (it names files under the data directory and is part of URLs). */
#define KERNELSPEC_NAME_MAX 64
bool kernelspec_is_name(const char *name);

typedef struct kernelspec {
    const char *name; /* "python3" */
    const char *display_name;
    const char *language;
    const char *preload; /* modules its zygote imports once for every kernel */
    int pool_size;       /* its kernels kept started ahead of time */
    zygote *zygote;      /* NULL: its kernels start by exec (--zygote=false) */
    /* A template with files: its view (template.view: the host directory model/templates.h
       mounts), the variables its ENV set ("NAME=value", NULL-terminated) and where its kernels
       start. All NULL for python3 and --templates: the base root, no variables, /home/user. */
    rootfs_template template;
    char **env;
    const char *workdir;
    /* What its kernels run inside the sandbox, NULL-terminated (/opt/cellbox is cellbox's
       prefix there); they start by exec, never from a zygote. NULL: cellbox's Python kernel
       (cellbox-kernel --channel-fd=3 --python-dir=...). JavaScript, TypeScript and Bash run
       `cellbox-kernel --channel-fd=3 --language=...`; a Jupyter kernel installed on the host
       runs `cellbox-kernel --channel-fd=3 --jupyter -- <its kernel.json argv>`. */
    char **argv;
    /* For a Jupyter kernel from the host: the directory of its kernel.json (its logos are
       resources), NULL for cellbox's own. */
    const char *resource_dir;
} kernelspec;

/* The kernelspec that runs `language` as E2B, /v1, MCP and the CLI name languages:
   "python"/"python3" is `python_spec` (a sandbox's own Python template); "js", "javascript",
   "node"; "ts", "typescript"; "bash", "sh", "shell"; "r"; else any kernelspec whose language or
   name is `language` (case-insensitively). NULL when this daemon runs no such language. */
const kernelspec *kernelspec_for_language(const char *language, const kernelspec *python_spec);
/* "python, javascript, typescript, bash, r, ...": what a client may ask for, for error messages
   ("language 'cobol' is not available: use python, javascript, ..."). */
const char *kernelspec_language_list(void);

/* Finds the kernel runtime (runtime_files.h) and makes the built-in template with these
   settings. Exits with a clear message if the runtime is missing. */
void kernelspec_init(const char *preload, int pool_size);
/* Adds the templates of --templates, "NAME:MODULES[:POOL]" separated by ';'. 0, or -1 with
   `why` naming the entry at fault (nothing is added then). */
int kernelspec_add_templates(const char *text, char *why, size_t why_size);
/* Called once at start, after the templates: cellbox's JavaScript and TypeScript (where
   /usr/bin/node is installed) and Bash, then every DIR/NAME/kernel.json of `search_path`
   (directories separated by ':'; python3 and names already taken are skipped, so are kernels
   whose program is not under /usr, each with a log line), then `pools` ("NAME:SIZE,...": the
   warm pool of each language's kernelspec). -1 with `why` when `pools` names no such kernelspec
   or a bad size. */
int kernelspec_add_languages(const char *search_path, const char *pools, char *why,
                             size_t why_size);
/* Adds a template made while the daemon runs (model/templates.h), copying `fields`' strings and
   env; its zygote starts as python3's did (kernelspec_start_zygotes). NULL with `why` when
   KERNELSPEC_MAX are there. */
kernelspec *kernelspec_add(const kernelspec *fields, char *why, size_t why_size);
/* Removes one kernelspec_add made: its zygote stops and the entry is freed. The caller has made
   sure no kernel of it is left. */
void kernelspec_remove(kernelspec *spec);
/* How templates get zygotes (the daemon's --zygote, --huge-code-pages, --template-zygotes). */
typedef struct kernelspec_zygotes {
    const char *data_dir; /* their caches: DATA_DIR/zygote, DATA_DIR/zygote-NAME */
    bool enabled;
    bool huge_code_pages;
    /* A template with files (template.view) gets one only with this: its zygote is a root
       process on the host that loads the template's libraries and imports its packages (their
       .pth files run at its start), all of which a build step or a tarball wrote. Without it,
       such a template's kernels start by exec, where that code runs only inside the sandbox. */
    bool for_templates_with_files;
} kernelspec_zygotes;

/* Called once at start, after adoption: every template's zygote starts (as `settings` allow);
   later ones (kernelspec_add) start theirs the same way. */
void kernelspec_start_zygotes(const kernelspec_zygotes *settings);
/* At exit: every zygote stops. */
void kernelspec_stop_zygotes(void);
size_t kernelspec_count(void);
kernelspec *kernelspec_at(size_t index); /* in the order they were made: the built-in first */
/* Kernels every template's warm pool holds when full: the sum of their pool_size. */
size_t kernelspec_pool_total(void);
const kernelspec *kernelspec_find(const char *name);
/* {name, spec: {...}, resources: {...}}: each resource's URL under `base_url` (the server's,
   ending in '/'). */
json_t *kernelspec_model(const kernelspec *spec, const char *base_url);
/* Path of a resource file (e.g. logo-64x64.png) or NULL; `file` must be a plain name. */
char *kernelspec_resource_path(const char *name, const char *file);

#endif
