/* kernelspec_languages — the kernelspecs of languages other than Python: cellbox's JavaScript,
 * TypeScript and Bash, and every Jupyter kernel installed on the host (a kernel.json under the
 * kernelspec path), and how clients name them (kernelspec_for_language).
 *
 * Each runs by exec as /opt/cellbox/bin/cellbox-kernel inside the sandbox (docs/languages.md),
 * so all it needs from the host is that its program is visible there: the sandbox's /usr is the
 * host's, nothing else of the host is. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "kernel/kernelspec.h"

#define KERNEL_BINARY "/opt/cellbox/bin/cellbox-kernel"
#define SHARE_DIR_ARG "--share-dir=/opt/cellbox/share/cellbox"
#define NODE_PROGRAM "/usr/bin/node"
#define BRIDGE_ARGS_MAX 8     /* cellbox-kernel's own arguments before "--" */
#define KERNEL_ARGV_MAX 64    /* a kernel.json's argv */
#define KERNEL_JSON_MAX 65536 /* a kernel.json is a few hundred bytes */

/* ---- cellbox's own ---- */

typedef struct built_in_language {
    const char *name, *display_name, *language, *needs_program;
    const char *argv[6];
} built_in_language;

static const built_in_language built_in_languages[] = {
    {"javascript",
     "JavaScript (Node.js)",
     "javascript",
     NODE_PROGRAM,
     {KERNEL_BINARY, "--channel-fd=3", "--language=javascript", SHARE_DIR_ARG, NULL}},
    {"typescript",
     "TypeScript (Node.js)",
     "typescript",
     NODE_PROGRAM,
     {KERNEL_BINARY, "--channel-fd=3", "--language=typescript", SHARE_DIR_ARG, NULL}},
    {"bash",
     "Bash",
     "bash",
     "/usr/bin/bash",
     {KERNEL_BINARY, "--channel-fd=3", "--language=bash", NULL}},
};

static void add_spec(const kernelspec *fields)
{
    char why[256];
    if (kernelspec_find(fields->name)) {
        log_info("kernelspec %s: a template has that name, so the %s kernel of that name is "
                 "not offered",
                 fields->name, fields->display_name);
        return;
    }
    if (!kernelspec_add(fields, why, sizeof why))
        log_warn("kernelspec %s is not offered: %s", fields->name, why);
}

static void add_built_in_languages(void)
{
    for (size_t i = 0; i < sizeof built_in_languages / sizeof *built_in_languages; i++) {
        const built_in_language *l = &built_in_languages[i];
        if (access(l->needs_program, X_OK) != 0) {
            log_info("kernelspec %s is not offered: %s is not installed", l->name,
                     l->needs_program);
            continue;
        }
        add_spec(&(kernelspec){.name = l->name,
                               .display_name = l->display_name,
                               .language = l->language,
                               .argv = (char **)l->argv});
    }
}

/* ---- Jupyter kernels installed on the host ---- */

/* The absolute path of a kernel.json's program as the sandbox sees it: a bare name is looked up
   where the sandbox's PATH looks; only what lies under /usr (symlinks followed) is visible
   there. NULL with `why` otherwise. */
static char *program_in_sandbox(const char *program, char *why, size_t why_size)
{
    static const char *const path_dirs[] = {"/usr/local/bin", "/usr/bin", NULL};
    char candidate[PATH_MAX], resolved[PATH_MAX];
    if (strchr(program, '/') && strncmp(program, "/usr/", 5) != 0) {
        snprintf(why, why_size,
                 "its program %s is outside /usr, which is all of the host a "
                 "sandbox sees: install it under /usr",
                 program);
        return NULL;
    }
    for (size_t i = 0; strchr(program, '/') ? i == 0 : path_dirs[i] != NULL; i++) {
        if (strchr(program, '/'))
            snprintf(candidate, sizeof candidate, "%s", program);
        else
            snprintf(candidate, sizeof candidate, "%s/%s", path_dirs[i], program);
        if (access(candidate, X_OK) != 0 || !realpath(candidate, resolved))
            continue;
        if (strncmp(candidate, "/usr/", 5) != 0 || strncmp(resolved, "/usr/", 5) != 0) {
            snprintf(why, why_size,
                     "its program %s is outside /usr, which is all of the host a "
                     "sandbox sees: install it under /usr",
                     candidate);
            return NULL;
        }
        return strdup(candidate);
    }
    snprintf(why, why_size, "its program %s is not installed (looked in /usr/local/bin, /usr/bin)",
             program);
    return NULL;
}

/* "NAME=value" entries from a kernel.json's env object, NULL-terminated; NULL when empty. */
static char **environment_of(json_t *env)
{
    size_t count = json_is_object(env) ? json_object_size(env) : 0, at = 0;
    if (count == 0)
        return NULL;
    char **entries = calloc(count + 1, sizeof *entries);
    if (!entries)
        die("out of memory");
    const char *key;
    json_t *value;
    json_object_foreach(env, key, value)
    {
        if (json_is_string(value) &&
            asprintf(&entries[at], "%s=%s", key, json_string_value(value)) >= 0)
            at++;
    }
    return entries;
}

static void free_list(char **list)
{
    for (size_t i = 0; list && list[i]; i++)
        free(list[i]);
    free(list);
}

/* The argv cellbox-kernel runs for it: the bridge's own arguments, "--", then kernel.json's. */
static char **bridge_argv(json_t *kernel_argv, const char *program, bool by_message)
{
    size_t count = json_array_size(kernel_argv);
    char **argv = calloc(BRIDGE_ARGS_MAX + count + 1, sizeof *argv);
    if (!argv)
        die("out of memory");
    size_t at = 0;
    argv[at++] = strdup(KERNEL_BINARY);
    argv[at++] = strdup("--channel-fd=3");
    argv[at++] = strdup("--jupyter");
    if (by_message)
        argv[at++] = strdup("--interrupt-mode=message");
    argv[at++] = strdup("--");
    argv[at++] = strdup(program);
    for (size_t i = 1; i < count; i++)
        argv[at++] = strdup(json_string_value(json_array_get(kernel_argv, i)));
    for (size_t i = 0; i < at; i++)
        if (!argv[i])
            die("out of memory");
    return argv;
}

static bool is_string_list(json_t *list)
{
    size_t i;
    json_t *item;
    if (!json_is_array(list) || json_array_size(list) == 0 ||
        json_array_size(list) > KERNEL_ARGV_MAX)
        return false;
    json_array_foreach(list, i, item)
    {
        if (!json_is_string(item))
            return false;
    }
    return true;
}

/* DIR/NAME/kernel.json into a kernelspec; a kernel that cannot run sandboxed is skipped with a
   log line saying why (a host's kernels are the operator's, not a reason to stop). */
static void add_host_kernel(const char *dir, const char *name)
{
    char kernel_dir[PATH_MAX], file[PATH_MAX + 16], why[PATH_MAX + 128] = "";
    snprintf(kernel_dir, sizeof kernel_dir, "%s/%s", dir, name);
    snprintf(file, sizeof file, "%s/kernel.json", kernel_dir);
    if (access(file, R_OK) != 0)
        return;
    if (strcmp(name, KERNELSPEC_BUILT_IN) == 0 || kernelspec_find(name)) {
        log_info("kernelspec %s: %s is not offered, cellbox's own %s is", name, file, name);
        return;
    }
    if (!kernelspec_is_name(name)) {
        log_warn("kernelspec in %s is not offered: '%s' is not a kernelspec name (letters, "
                 "digits, '.', '_', '-')",
                 kernel_dir, name);
        return;
    }
    json_error_t error;
    json_t *json = json_load_file(file, JSON_REJECT_DUPLICATES, &error);
    json_t *argv = json_object_get(json, "argv");
    const char *display_name = json_string_value(json_object_get(json, "display_name"));
    const char *language = json_string_value(json_object_get(json, "language"));
    const char *interrupt_mode = json_string_value(json_object_get(json, "interrupt_mode"));
    char *program = NULL;
    struct stat st;
    if (!json)
        snprintf(why, sizeof why, "it is not JSON (line %d: %s)", error.line, error.text);
    else if (stat(file, &st) != 0 || st.st_size > KERNEL_JSON_MAX)
        snprintf(why, sizeof why, "it is larger than %d bytes", KERNEL_JSON_MAX);
    else if (!is_string_list(argv))
        snprintf(why, sizeof why, "its argv is not a list of 1 to %d strings", KERNEL_ARGV_MAX);
    else if (!display_name || !language)
        snprintf(why, sizeof why, "it has no display_name or no language");
    else
        program = program_in_sandbox(json_string_value(json_array_get(argv, 0)), why, sizeof why);
    if (program) {
        char **bridge =
            bridge_argv(argv, program, interrupt_mode && strcmp(interrupt_mode, "message") == 0);
        char **env = environment_of(json_object_get(json, "env"));
        add_spec(&(kernelspec){.name = name,
                               .display_name = display_name,
                               .language = language,
                               .argv = bridge,
                               .env = env,
                               .resource_dir = kernel_dir});
        free_list(bridge);
        free_list(env);
        free(program);
    } else {
        log_warn("kernelspec %s (%s) is not offered: %s", name, file, why);
    }
    json_decref(json);
}

/* Every DIR/NAME/kernel.json of the ':'-separated `search_path`, each directory's in name order
   (the first directory that has a name wins, as Jupyter's own search does). */
static void add_host_kernels(const char *search_path)
{
    char *copy = strdup(search_path ? search_path : ""), *save = NULL;
    for (char *dir = strtok_r(copy, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
        struct dirent **names = NULL;
        int count = scandir(dir, &names, NULL, alphasort);
        for (int i = 0; i < count; i++) {
            if (names[i]->d_name[0] != '.')
                add_host_kernel(dir, names[i]->d_name);
            free(names[i]);
        }
        free(names);
    }
    free(copy);
}

/* ---- warm pools ---- */

#define LANGUAGE_POOL_MAX 1000

/* "NAME:SIZE,..." onto the kernelspecs it names; -1 with `why` (nothing is set then). */
static int set_pools(const char *pools, char *why, size_t why_size)
{
    char *copy = strdup(pools ? pools : ""), *save = NULL;
    kernelspec *specs[KERNELSPEC_MAX];
    long sizes[KERNELSPEC_MAX];
    size_t count = 0;
    int rc = 0;
    for (char *entry = strtok_r(copy, ",", &save); entry && rc == 0;
         entry = strtok_r(NULL, ",", &save)) {
        char *colon = strchr(entry, ':'), *end = NULL;
        if (colon)
            *colon = '\0';
        const kernelspec *spec = kernelspec_find(entry);
        errno = 0;
        long size = colon ? strtol(colon + 1, &end, 10) : -1;
        if (!colon || !spec || !spec->argv || count == KERNELSPEC_MAX) {
            snprintf(why, why_size,
                     "'%.64s' is not NAME:SIZE with NAME a kernelspec of another language "
                     "than Python (python3's pool is --pool-size, a template's is in "
                     "--templates)",
                     entry);
            rc = -1;
        } else if (!colon[1] || *end || errno || size < 0 || size > LANGUAGE_POOL_MAX) {
            snprintf(why, why_size, "%s: the pool size '%.32s' is not a number from 0 to %d", entry,
                     colon + 1, LANGUAGE_POOL_MAX);
            rc = -1;
        } else {
            specs[count] = (kernelspec *)spec;
            sizes[count++] = size;
        }
    }
    free(copy);
    for (size_t i = 0; rc == 0 && i < count; i++)
        specs[i]->pool_size = (int)sizes[i];
    return rc;
}

int kernelspec_add_languages(const char *search_path, const char *pools, char *why, size_t why_size)
{
    add_built_in_languages();
    add_host_kernels(search_path);
    return set_pools(pools, why, why_size);
}

/* ---- names ---- */

/* E2B's names and their usual spellings, each to the kernelspec name that runs it. */
static const struct {
    const char *alias, *name;
} language_aliases[] = {
    {"js", "javascript"},
    {"javascript", "javascript"},
    {"node", "javascript"},
    {"ts", "typescript"},
    {"typescript", "typescript"},
    {"bash", "bash"},
    {"sh", "bash"},
    {"shell", "bash"},
};

const kernelspec *kernelspec_for_language(const char *language, const kernelspec *python_spec)
{
    if (!language)
        return NULL;
    if (strcasecmp(language, "python") == 0 || strcasecmp(language, "python3") == 0)
        return python_spec ? python_spec : kernelspec_find(KERNELSPEC_BUILT_IN);
    for (size_t i = 0; i < sizeof language_aliases / sizeof *language_aliases; i++)
        if (strcasecmp(language, language_aliases[i].alias) == 0)
            return kernelspec_find(language_aliases[i].name);
    for (size_t i = 0; i < kernelspec_count(); i++) { /* "r" is IRkernel's language "R" */
        const kernelspec *spec = kernelspec_at(i);
        if (spec->argv &&
            (strcasecmp(spec->language, language) == 0 || strcasecmp(spec->name, language) == 0))
            return spec;
    }
    return NULL;
}

const char *kernelspec_language_list(void)
{
    static char list[1024];
    size_t used = (size_t)snprintf(list, sizeof list, "python");
    for (size_t i = 0; i < kernelspec_count() && used < sizeof list; i++) {
        const kernelspec *spec = kernelspec_at(i);
        if (!spec->argv)
            continue;
        char name[KERNELSPEC_NAME_MAX + 1];
        snprintf(name, sizeof name, "%s", spec->language);
        for (char *c = name; *c; c++)
            *c = (char)tolower((unsigned char)*c);
        /* two kernels of one language (or one of Python's): the other answers to it by name */
        const char *named = kernelspec_for_language(name, NULL) == spec ? name : spec->name;
        used += (size_t)snprintf(list + used, sizeof list - used, ", %s", named);
    }
    return list;
}
