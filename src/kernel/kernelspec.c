#include "kernel/kernelspec.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "kernel/runtime_files.h"
#include "kernel/zygote.h"

static kernelspec *specs[KERNELSPEC_MAX];
static size_t spec_count;

/* How zygotes start (kernelspec_start_zygotes); until then a new template waits for main's call. */
static struct {
    bool started, enabled, huge_code_pages, for_templates_with_files;
    char *data_dir;
} zygotes;

static kernelspec *new_spec(void)
{
    kernelspec *spec = calloc(1, sizeof *spec);
    if (!spec)
        die("out of memory");
    return spec;
}

static void free_spec(kernelspec *spec)
{
    free((char *)spec->name);
    free((char *)spec->display_name);
    free((char *)spec->language);
    free((char *)spec->preload);
    free((char *)spec->template.view);
    free((char *)spec->workdir);
    for (size_t i = 0; spec->env && spec->env[i]; i++)
        free(spec->env[i]);
    free(spec->env);
    for (size_t i = 0; spec->argv && spec->argv[i]; i++)
        free(spec->argv[i]);
    free(spec->argv);
    free((char *)spec->resource_dir);
    free(spec);
}

void kernelspec_init(const char *preload, int pool_size)
{
    runtime_files_find();
    specs[0] = new_spec();
    *specs[0] = (kernelspec){.name = strdup(KERNELSPEC_BUILT_IN),
                             .display_name = strdup("Python 3 (cellbox)"),
                             .language = strdup("python"),
                             .preload = strdup(preload),
                             .pool_size = pool_size};
    spec_count = 1;
}

size_t kernelspec_pool_total(void)
{
    size_t total = 0;
    for (size_t i = 0; i < spec_count; i++)
        total += (size_t)specs[i]->pool_size;
    return total;
}

const kernelspec *kernelspec_find(const char *name)
{
    for (size_t i = 0; i < spec_count; i++)
        if (strcmp(specs[i]->name, name) == 0)
            return specs[i];
    return NULL;
}

size_t kernelspec_count(void)
{
    return spec_count;
}
kernelspec *kernelspec_at(size_t index)
{
    return index < spec_count ? specs[index] : NULL;
}

static char *copy_or_null(const char *text)
{
    char *copy = text ? strdup(text) : NULL;
    if (text && !copy)
        die("out of memory");
    return copy;
}

/* A NULL-terminated copy of `list` (NULL for NULL). */
static char **copy_list(char *const *list)
{
    if (!list)
        return NULL;
    size_t count = 0;
    while (list[count])
        count++;
    char **copy = calloc(count + 1, sizeof *copy);
    if (!copy)
        die("out of memory");
    for (size_t i = 0; i < count; i++)
        copy[i] = copy_or_null(list[i]);
    return copy;
}

/* One zygote per template, each with its own cache of preloaded pages in the data directory. */
static void start_zygote(kernelspec *spec)
{
    if (!zygotes.started || !zygotes.enabled || spec->zygote || spec->argv)
        return; /* a kernel of another language starts by exec: there is no Python to preload */
    if (spec->template.view && !zygotes.for_templates_with_files) {
        log_info("template %s: its kernels start by exec, in their sandbox (no zygote of its "
                 "own: --template-zygotes is off, so none of its code runs outside a sandbox)",
                 spec->name);
        return;
    }
    char cache[4200];
    if (strcmp(spec->name, KERNELSPEC_BUILT_IN) == 0)
        snprintf(cache, sizeof cache, "%.4000s/zygote", zygotes.data_dir);
    else
        snprintf(cache, sizeof cache, "%.4000s/zygote-%s", zygotes.data_dir, spec->name);
    spec->zygote = zygote_start(spec, cache, zygotes.huge_code_pages);
}

void kernelspec_start_zygotes(const kernelspec_zygotes *settings)
{
    zygotes.started = true;
    zygotes.enabled = settings->enabled;
    zygotes.huge_code_pages = settings->huge_code_pages;
    zygotes.for_templates_with_files = settings->for_templates_with_files;
    zygotes.data_dir = copy_or_null(settings->data_dir);
    for (size_t i = 0; i < spec_count; i++)
        start_zygote(specs[i]);
}

void kernelspec_stop_zygotes(void)
{
    for (size_t i = 0; i < spec_count; i++) {
        zygote_stop(specs[i]->zygote);
        specs[i]->zygote = NULL;
    }
}

kernelspec *kernelspec_add(const kernelspec *fields, char *why, size_t why_size)
{
    if (spec_count == KERNELSPEC_MAX) {
        snprintf(why, why_size, "at most %d templates, python3 included: delete one first",
                 KERNELSPEC_MAX);
        return NULL;
    }
    kernelspec *spec = new_spec();
    *spec = (kernelspec){.name = copy_or_null(fields->name),
                         .display_name = copy_or_null(fields->display_name),
                         .language = copy_or_null(fields->language ? fields->language : "python"),
                         .preload = copy_or_null(fields->preload ? fields->preload : ""),
                         .pool_size = fields->pool_size,
                         .template = {.view = copy_or_null(fields->template.view)},
                         .workdir = copy_or_null(fields->workdir),
                         .argv = copy_list(fields->argv),
                         .resource_dir = copy_or_null(fields->resource_dir)};
    if (fields->env && fields->env[0])
        spec->env = copy_list(fields->env);
    specs[spec_count++] = spec;
    start_zygote(spec);
    return spec;
}

void kernelspec_remove(kernelspec *spec)
{
    for (size_t i = 0; i < spec_count; i++) {
        if (specs[i] != spec)
            continue;
        memmove(&specs[i], &specs[i + 1], (spec_count - i - 1) * sizeof *specs);
        spec_count--;
        zygote_stop(spec->zygote);
        free_spec(spec);
        return;
    }
}

/* ---- templates from --templates ---- */

#define TEMPLATE_PRELOAD_MAX 1000 /* what the zygote's --preload argument holds */
#define TEMPLATE_POOL_MAX 1000

bool kernelspec_is_name(const char *name)
{
    size_t length = strlen(name);
    if (length == 0 || length > KERNELSPEC_NAME_MAX || !isalnum((unsigned char)name[0]))
        return false;
    for (const char *c = name; *c; c++)
        if (!isalnum((unsigned char)*c) && !strchr("._-", *c))
            return false;
    return true;
}

static bool is_module_name(const char *name, size_t length)
{
    if (length == 0 || !(isalpha((unsigned char)name[0]) || name[0] == '_') ||
        name[length - 1] == '.')
        return false;
    for (size_t i = 1; i < length; i++)
        if (!(isalnum((unsigned char)name[i]) || name[i] == '_' || name[i] == '.'))
            return false;
    return true;
}

/* Module names separated by commas ("" is none: the zygote still has IPython and the kernel). */
static bool is_module_list(const char *modules)
{
    if (strlen(modules) > TEMPLATE_PRELOAD_MAX)
        return false;
    if (!*modules)
        return true;
    for (const char *name = modules;;) {
        size_t length = strcspn(name, ",");
        if (!is_module_name(name, length))
            return false;
        if (!name[length])
            return true;
        name += length + 1;
    }
}

/* One entry, "NAME:MODULES[:POOL]", into `spec`; -1 with `why`. */
static int parse_template(char *entry, kernelspec **made, char *why, size_t why_size)
{
    char *name = entry, *modules = strchr(entry, ':'), *pool = NULL;
    if (!modules) {
        snprintf(why, why_size, "'%.100s' has no ':' (NAME:MODULES[:POOL])", entry);
        return -1;
    }
    *modules++ = '\0';
    if ((pool = strchr(modules, ':')) != NULL)
        *pool++ = '\0';
    if (!kernelspec_is_name(name)) {
        snprintf(why, why_size,
                 "'%.100s' is not a template name (up to %d letters, digits, '.', "
                 "'_' or '-', starting with a letter or digit)",
                 name, KERNELSPEC_NAME_MAX);
        return -1;
    }
    if (kernelspec_find(name)) {
        snprintf(why, why_size, "template '%s' is defined twice (python3 is built in)", name);
        return -1;
    }
    if (!is_module_list(modules)) {
        snprintf(why, why_size,
                 "template '%s': '%.100s' is not a list of module names separated by "
                 "commas (at most %d characters)",
                 name, modules, TEMPLATE_PRELOAD_MAX);
        return -1;
    }
    long pool_size = 0;
    if (pool) {
        char *end;
        errno = 0;
        pool_size = strtol(pool, &end, 10);
        if (!*pool || *end || errno || pool_size < 0 || pool_size > TEMPLATE_POOL_MAX) {
            snprintf(why, why_size,
                     "template '%s': the pool size '%.32s' is not a number from 0 to %d", name,
                     pool, TEMPLATE_POOL_MAX);
            return -1;
        }
    }
    char *display_name;
    if (asprintf(&display_name, "Python 3 (cellbox, %s)", name) < 0)
        die("out of memory");
    kernelspec *spec = new_spec();
    *spec = (kernelspec){.name = strdup(name),
                         .display_name = display_name,
                         .language = strdup("python"),
                         .preload = strdup(modules),
                         .pool_size = (int)pool_size};
    *made = spec;
    return 0;
}

int kernelspec_add_templates(const char *text, char *why, size_t why_size)
{
    char *copy = strdup(text ? text : ""), *save = NULL;
    size_t before = spec_count;
    int rc = 0;
    for (char *entry = strtok_r(copy, ";", &save); entry && rc == 0;
         entry = strtok_r(NULL, ";", &save)) {
        if (spec_count == KERNELSPEC_MAX) {
            snprintf(why, why_size, "at most %d templates, python3 included", KERNELSPEC_MAX);
            rc = -1;
        } else if ((rc = parse_template(entry, &specs[spec_count], why, why_size)) == 0) {
            spec_count++;
        }
    }
    free(copy);
    while (rc < 0 && spec_count > before) { /* all or nothing */
        free_spec(specs[--spec_count]);
    }
    return rc;
}

static bool is_plain_file_name(const char *file)
{
    return *file && file[0] != '.' && !strchr(file, '/') && strlen(file) < 128;
}

/* Where a kernelspec's resources (its logos) are: a host Jupyter kernel's own directory;
   cellbox's Python templates all show python3's; JavaScript, TypeScript and Bash theirs where
   the runtime ships one (share/cellbox/kernelspecs/NAME). */
static void resource_dir_of(const kernelspec *spec, char *dir, size_t dir_size)
{
    if (spec->resource_dir)
        snprintf(dir, dir_size, "%s", spec->resource_dir);
    else
        snprintf(dir, dir_size, "%s/%s", runtime_files_kernelspecs_dir(),
                 spec->argv ? spec->name : KERNELSPEC_BUILT_IN);
}

/* A file a client may fetch: a plain name, and from a host kernel's directory only its logos
   (that directory is the host's, with whatever else its package put there). */
static bool is_resource_file(const kernelspec *spec, const char *file)
{
    if (!is_plain_file_name(file) || strcmp(file, "kernel.json") == 0)
        return false;
    return !spec->resource_dir || strncmp(file, "logo-", 5) == 0;
}

char *kernelspec_resource_path(const char *name, const char *file)
{
    const kernelspec *spec = kernelspec_find(name);
    if (!spec || !is_resource_file(spec, file))
        return NULL;
    char dir[PATH_MAX], *path;
    resource_dir_of(spec, dir, sizeof dir);
    if (asprintf(&path, "%s/%s", dir, file) < 0)
        die("out of memory");
    if (access(path, R_OK) != 0) {
        free(path);
        return NULL;
    }
    return path;
}

/* resources maps each file's stem to its URL, as jupyter_server does for logos. */
static json_t *resources_model(const kernelspec *spec, const char *base_url)
{
    json_t *resources = json_object();
    char dir_path[PATH_MAX];
    resource_dir_of(spec, dir_path, sizeof dir_path);
    DIR *dir = opendir(dir_path);
    if (!dir)
        return resources;
    struct dirent *entry;
    while ((entry = readdir(dir)) != NULL) {
        if (!is_resource_file(spec, entry->d_name))
            continue;
        char key[128], url[512];
        snprintf(key, sizeof key, "%.100s", entry->d_name);
        char *dot = strrchr(key, '.');
        if (dot)
            *dot = '\0';
        snprintf(url, sizeof url, "%.200skernelspecs/%s/%.100s", base_url, spec->name,
                 entry->d_name);
        json_object_set_new(resources, key, json_string(url));
    }
    closedir(dir);
    return resources;
}

/* A kernel of another language: the argv it runs in the sandbox, and its variables. */
static json_t *language_spec_model(const kernelspec *spec)
{
    json_t *argv = json_array(), *env = json_object();
    for (size_t i = 0; spec->argv[i]; i++)
        json_array_append_new(argv, json_string(spec->argv[i]));
    for (size_t i = 0; spec->env && spec->env[i]; i++) {
        const char *equals = strchr(spec->env[i], '=');
        char *key = equals ? strndup(spec->env[i], (size_t)(equals - spec->env[i])) : NULL;
        if (key)
            json_object_set_new(env, key, json_string(equals + 1));
        free(key);
    }
    bool by_message = false;
    for (size_t i = 0; spec->argv[i] && strcmp(spec->argv[i], "--") != 0; i++)
        by_message |= strcmp(spec->argv[i], "--interrupt-mode=message") == 0;
    return json_pack("{s:o, s:o, s:s, s:s, s:s, s:{s:s, s:i}}", "argv", argv, "env", env,
                     "display_name", spec->display_name, "language", spec->language,
                     "interrupt_mode", by_message ? "message" : "signal", "metadata",
                     "cellbox_runtime", spec->resource_dir ? "jupyter-bridge" : "language-host",
                     "cellbox_pool_size", spec->pool_size);
}

json_t *kernelspec_model(const kernelspec *spec, const char *base_url)
{
    if (spec->argv)
        return json_pack("{s:s, s:o, s:o}", "name", spec->name, "spec", language_spec_model(spec),
                         "resources", resources_model(spec, base_url));
    char channel_arg[] = "--channel-fd=3";
    char python_arg[PATH_MAX + 16];
    snprintf(python_arg, sizeof python_arg, "--python-dir=%s", runtime_files_python_dir());
    json_t *inner =
        json_pack("{s:[s,s,s], s:{}, s:s, s:s, s:s, s:{s:s, s:s, s:i}}", "argv",
                  runtime_files_kernel_binary(), channel_arg, python_arg, "env", "display_name",
                  spec->display_name, "language", spec->language, "interrupt_mode", "signal",
                  "metadata", "cellbox_runtime", "python-embedded", "cellbox_preload",
                  spec->preload, "cellbox_pool_size", spec->pool_size);
    return json_pack("{s:s, s:o, s:o}", "name", spec->name, "spec", inner, "resources",
                     resources_model(spec, base_url));
}
