#include "model/templates.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "kernel/kernel.h"
#include "kernel/kernelspec.h"
#include "model/manager.h"
#include "model/pool.h"
#include "model/template_views.h"

#define MAX_TEMPLATES KERNELSPEC_MAX

/* A template with files: its record (as DATA_DIR/templates/<name>.json keeps it), its view and
   its kernelspec. */
typedef struct template_entry {
    json_t *record;   /* {"name", "from", "layers", "env", "workdir", "user", "preload",
                         "pool_size", "kind", "dockerfile", "build_seconds", "created_at",
                         "size_bytes"} */
    kernelspec *spec; /* NULL while its view is not mounted */
    char view[PATH_MAX];
} template_entry;

static template_entry *entries[MAX_TEMPLATES];
static size_t entry_count;

static const char *record_string(const template_entry *t, const char *field)
{
    return json_string_value(json_object_get(t->record, field));
}

static const char *entry_name(const template_entry *t)
{
    return record_string(t, "name");
}

static template_entry *find_entry(const char *name)
{
    for (size_t i = 0; i < entry_count; i++)
        if (strcmp(entry_name(entries[i]), name) == 0)
            return entries[i];
    return NULL;
}

bool templates_is_base_name(const char *from)
{
    static const char *const bases[] = {"cellbox",
                                        "python3",
                                        "e2bdev/code-interpreter",
                                        "e2bdev/base",
                                        "docker.io/e2bdev/code-interpreter",
                                        "docker.io/e2bdev/base"};
    for (size_t i = 0; i < sizeof bases / sizeof bases[0]; i++) {
        size_t length = strlen(bases[i]);
        if (strncmp(from, bases[i], length) == 0 &&
            (!from[length] || from[length] == ':' || from[length] == '@'))
            return true;
    }
    return false;
}

/* ---- the sandboxes of a template ---- */

static json_t *sandboxes_of(const kernelspec *spec)
{
    json_t *ids = json_array();
    for (size_t i = 0; spec && i < manager_count(); i++) {
        kernel *k = manager_at(i);
        if (kernel_spec(k) == spec)
            json_array_append_new(ids, json_string(kernel_id(k)));
    }
    return ids;
}

/* `why` names the sandboxes using the template; false when none does. */
static bool in_use(const template_entry *t, char *why, size_t why_size)
{
    json_t *ids = sandboxes_of(t->spec);
    size_t count = json_array_size(ids);
    if (count > 0) {
        char *list = json_dumps(ids, JSON_COMPACT);
        snprintf(why, why_size,
                 "template '%s' is used by %zu sandbox%s: %.300s; delete %s first (DELETE "
                 "/v1/sandboxes/{id})",
                 entry_name(t), count, count == 1 ? "" : "es", list ? list : "",
                 count == 1 ? "it" : "them");
        free(list);
    }
    json_decref(ids);
    return count > 0;
}

int templates_check_name(const char *name, bool replace, failure_kind *failure, char *why,
                         size_t why_size)
{
    if (!name || !kernelspec_is_name(name)) {
        *failure = FAILURE_INVALID;
        snprintf(why, why_size,
                 "'%.100s' is not a template name: up to %d letters, digits, '.', '_' or '-', "
                 "starting with a letter or digit",
                 name ? name : "", KERNELSPEC_NAME_MAX);
        return -1;
    }
    template_entry *t = find_entry(name);
    if (!t && kernelspec_find(name)) {
        *failure = FAILURE_CONFLICT;
        snprintf(why, why_size, "template '%s' is %s and cannot be replaced: choose another name",
                 name,
                 strcmp(name, KERNELSPEC_BUILT_IN) == 0 ? "built in"
                                                        : "defined by the daemon's --templates");
        return -1;
    }
    if (t && !replace) {
        *failure = FAILURE_CONFLICT;
        snprintf(why, why_size,
                 "template '%s' exists: choose another name, delete it first, or replace it "
                 "(\"replace\": true)",
                 name);
        return -1;
    }
    if (t && in_use(t, why, why_size)) {
        *failure = FAILURE_CONFLICT;
        return -1;
    }
    return 0;
}

/* ---- records ---- */

static void record_path(const char *name, char *out, size_t out_size)
{
    snprintf(out, out_size, "%s/%s.json", template_views_root(), name);
}

static int write_record(json_t *record, char *why, size_t why_size)
{
    char path[PATH_MAX + 128], temporary[PATH_MAX + 160];
    record_path(json_string_value(json_object_get(record, "name")), path, sizeof path);
    snprintf(temporary, sizeof temporary, "%s.new", path);
    if (json_dump_file(record, temporary, JSON_INDENT(1)) < 0 || rename(temporary, path) < 0) {
        snprintf(why, why_size, "cannot write the template's record %s: %s", path, strerror(errno));
        unlink(temporary);
        return -1;
    }
    return 0;
}

static json_t *string_or_null(const char *text)
{
    return text ? json_string(text) : json_null();
}

static json_t *record_of(const template_definition *d)
{
    json_t *layers = json_array(), *env = json_array();
    for (int i = 0; i < d->layer_count; i++)
        json_array_append_new(layers, json_string(d->layers[i]));
    for (int i = 0; i < d->env_count && i < TEMPLATES_MAX_ENV; i++)
        if (d->env[i] && strchr(d->env[i], '='))
            json_array_append_new(env, json_string(d->env[i]));
    char created[32];
    time_t now = time(NULL);
    strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    return json_pack("{s:s, s:s, s:o, s:o, s:o, s:s, s:s, s:i, s:s, s:o, s:f, s:s, s:I}", "name",
                     d->name, "from", d->from ? d->from : "cellbox", "layers", layers, "env", env,
                     "workdir", json_string(d->workdir ? d->workdir : ROOTFS_HOME), "user",
                     d->user ? d->user : "user", "preload", d->preload ? d->preload : "",
                     "pool_size", d->pool_size, "kind", d->kind ? d->kind : "dockerfile",
                     "dockerfile", string_or_null(d->dockerfile), "build_seconds", d->build_seconds,
                     "created_at", created, "size_bytes", (json_int_t)0);
}

/* The bytes of the files of a record's layers. */
static json_int_t record_bytes(const json_t *record)
{
    json_int_t bytes = 0;
    json_t *layers = json_object_get(record, "layers");
    for (size_t i = 0; i < json_array_size(layers); i++)
        bytes += template_views_layer_bytes(json_string_value(json_array_get(layers, i)));
    return bytes;
}

/* A record read back: the fields registration relies on, of the right types, with layers that
   are layer keys. */
static bool is_valid_record(json_t *record, const char *file_name)
{
    const char *name = json_string_value(json_object_get(record, "name"));
    json_t *layers = json_object_get(record, "layers");
    char expected[KERNELSPEC_NAME_MAX + 8];
    if (!name || !kernelspec_is_name(name) || !json_is_array(layers) ||
        json_array_size(layers) > TEMPLATES_MAX_LAYERS)
        return false;
    snprintf(expected, sizeof expected, "%s.json", name);
    if (strcmp(expected, file_name) != 0)
        return false;
    size_t i;
    json_t *layer;
    json_array_foreach(layers, i, layer)
    {
        const char *key = json_string_value(layer);
        if (!key || !template_views_is_layer_key(key))
            return false;
    }
    return true;
}

/* ---- registering: view, kernelspec ---- */

/* The record's layers, as the array template_views_mount takes. */
static int record_layers(const json_t *record, const char **layers)
{
    json_t *list = json_object_get(record, "layers");
    int count = 0;
    for (size_t i = 0; i < json_array_size(list) && i < TEMPLATES_MAX_LAYERS; i++)
        layers[count++] = json_string_value(json_array_get(list, i));
    return count;
}

static bool layers_exist(const json_t *record, char *why, size_t why_size)
{
    const char *layers[TEMPLATES_MAX_LAYERS];
    int count = record_layers(record, layers);
    for (int i = 0; i < count; i++) {
        if (!templates_layer_exists(layers[i])) {
            snprintf(why, why_size, "its layer %s is missing", layers[i]);
            return false;
        }
    }
    return true;
}

/* Mounts the entry's view and adds its kernelspec (whose zygote starts as every template's). */
static int activate(template_entry *t, char *why, size_t why_size)
{
    const char *layers[TEMPLATES_MAX_LAYERS];
    int count = record_layers(t->record, layers);
    if (template_views_mount(entry_name(t), layers, count, t->view, sizeof t->view, why, why_size) <
        0)
        return -1;
    json_t *env_list = json_object_get(t->record, "env");
    char *env[TEMPLATES_MAX_ENV + 1] = {0};
    for (size_t i = 0; i < json_array_size(env_list) && i < TEMPLATES_MAX_ENV; i++)
        env[i] = (char *)json_string_value(json_array_get(env_list, i));
    char display_name[KERNELSPEC_NAME_MAX + 32];
    snprintf(display_name, sizeof display_name, "Python 3 (cellbox, %s)", entry_name(t));
    kernelspec fields = {.name = entry_name(t),
                         .display_name = display_name,
                         .language = "python",
                         .preload = record_string(t, "preload"),
                         .pool_size =
                             (int)json_integer_value(json_object_get(t->record, "pool_size")),
                         .template = {.view = t->view},
                         .env = env,
                         .workdir = record_string(t, "workdir")};
    if (!(t->spec = kernelspec_add(&fields, why, why_size))) {
        template_views_unmount(entry_name(t));
        return -1;
    }
    return 0;
}

static void deactivate(template_entry *t)
{
    if (t->spec) {
        pool_discard_template(t->spec);
        kernelspec_remove(t->spec);
        t->spec = NULL;
    }
    template_views_unmount(entry_name(t));
}

static bool layer_in_use(const char *key, const template_entry *except)
{
    for (size_t i = 0; i < entry_count; i++) {
        if (entries[i] == except)
            continue;
        json_t *layers = json_object_get(entries[i]->record, "layers");
        for (size_t j = 0; j < json_array_size(layers); j++)
            if (strcmp(json_string_value(json_array_get(layers, j)), key) == 0)
                return true;
    }
    return false;
}

void templates_remove_layer_if_unused(const char *key)
{
    if (!layer_in_use(key, NULL))
        template_views_remove_layer(key);
}

/* Removes the entry from the list, its record and the layers no other template uses; keeps
   `keep` (the layers of a replacement) too. */
static void forget(template_entry *t, const json_t *keep)
{
    for (size_t i = 0; i < entry_count; i++) {
        if (entries[i] == t) {
            memmove(&entries[i], &entries[i + 1], (entry_count - i - 1) * sizeof *entries);
            entry_count--;
            break;
        }
    }
    json_t *layers = json_object_get(t->record, "layers");
    for (size_t i = 0; i < json_array_size(layers); i++) {
        const char *key = json_string_value(json_array_get(layers, i));
        bool kept = false;
        for (size_t j = 0; keep && j < json_array_size(json_object_get(keep, "layers")); j++)
            kept |= strcmp(json_string_value(json_array_get(json_object_get(keep, "layers"), j)),
                           key) == 0;
        if (!kept && !layer_in_use(key, t))
            template_views_remove_layer(key);
    }
    json_decref(t->record);
    free(t);
}

static void remove_record_file(const char *name)
{
    char path[PATH_MAX + 128];
    record_path(name, path, sizeof path);
    if (unlink(path) < 0 && errno != ENOENT)
        log_warn("templates: cannot remove %s: %s", path, strerror(errno));
}

int templates_register(const template_definition *definition, bool replace, failure_kind *failure,
                       char *why, size_t why_size)
{
    if (templates_check_name(definition->name, replace, failure, why, why_size) < 0)
        return -1;
    if (definition->layer_count < 0 || definition->layer_count > TEMPLATES_MAX_LAYERS) {
        *failure = FAILURE_INVALID;
        snprintf(why, why_size, "a template has at most %d layers", TEMPLATES_MAX_LAYERS);
        return -1;
    }
    if (!find_entry(definition->name) && entry_count == MAX_TEMPLATES) {
        *failure = FAILURE_FORBIDDEN;
        snprintf(why, why_size, "at most %d templates with files: delete one first", MAX_TEMPLATES);
        return -1;
    }
    template_entry *t = calloc(1, sizeof *t);
    if (!t)
        die("out of memory");
    t->record = record_of(definition);
    if (!layers_exist(t->record, why, why_size)) {
        *failure = FAILURE_INVALID;
        json_decref(t->record);
        free(t);
        return -1;
    }
    json_object_set_new(t->record, "size_bytes", json_integer(record_bytes(t->record)));
    /* The one it replaces goes first: the view's place and the kernelspec's name are its. Its
       layers that the new one shares stay. */
    template_entry *old = find_entry(definition->name);
    if (old) {
        deactivate(old);
        forget(old, t->record);
    }
    if (write_record(t->record, why, why_size) < 0 || activate(t, why, why_size) < 0) {
        *failure = FAILURE_INTERNAL;
        remove_record_file(definition->name);
        json_decref(t->record);
        free(t);
        return -1;
    }
    entries[entry_count++] = t;
    pool_refill_soon();
    log_info("template %s registered (%d layer%s, preloads '%s', warm pool of %d)",
             definition->name, definition->layer_count, definition->layer_count == 1 ? "" : "s",
             record_string(t, "preload"), t->spec->pool_size);
    return 0;
}

int templates_delete(const char *name, failure_kind *failure, char *why, size_t why_size)
{
    template_entry *t = find_entry(name);
    if (!t) {
        bool defined = kernelspec_find(name) != NULL;
        *failure = defined ? FAILURE_INVALID : FAILURE_NOT_FOUND;
        if (defined)
            snprintf(why, why_size,
                     "template '%s' is %s: it has no files to delete (the daemon's options "
                     "define it)",
                     name,
                     strcmp(name, KERNELSPEC_BUILT_IN) == 0 ? "built in" : "one of --templates");
        else
            snprintf(why, why_size, "no template '%.100s' (GET /v1/templates lists them)", name);
        return -1;
    }
    if (strcmp(name, manager_default_kernel()) == 0) {
        *failure = FAILURE_CONFLICT;
        snprintf(why, why_size,
                 "template '%s' is the daemon's --default-kernel: restart the daemon with another "
                 "default first",
                 name);
        return -1;
    }
    if (in_use(t, why, why_size)) {
        *failure = FAILURE_CONFLICT;
        return -1;
    }
    deactivate(t);
    remove_record_file(name);
    forget(t, NULL);
    log_info("template %s deleted", name);
    return 0;
}

bool templates_definition_of(const char *name, template_definition *out)
{
    template_entry *t = find_entry(name);
    if (!t)
        return false;
    memset(out, 0, sizeof *out);
    out->name = entry_name(t);
    out->from = record_string(t, "from");
    const char *layers[TEMPLATES_MAX_LAYERS];
    out->layer_count = record_layers(t->record, layers);
    for (int i = 0; i < out->layer_count; i++)
        snprintf(out->layers[i], sizeof out->layers[i], "%s", layers[i]);
    json_t *env = json_object_get(t->record, "env");
    for (size_t i = 0; i < json_array_size(env) && i < TEMPLATES_MAX_ENV; i++)
        out->env[out->env_count++] = json_string_value(json_array_get(env, i));
    out->workdir = record_string(t, "workdir");
    out->user = record_string(t, "user");
    out->preload = record_string(t, "preload");
    out->pool_size = (int)json_integer_value(json_object_get(t->record, "pool_size"));
    out->kind = record_string(t, "kind");
    out->dockerfile = record_string(t, "dockerfile");
    out->build_seconds = json_number_value(json_object_get(t->record, "build_seconds"));
    return true;
}

/* ---- start and stop ---- */

static void load_record(const char *dir, const char *file_name)
{
    char path[PATH_MAX + 300], why[512];
    snprintf(path, sizeof path, "%s/%s", dir, file_name);
    json_t *record = json_load_file(path, 0, NULL);
    if (!record || !is_valid_record(record, file_name)) {
        log_warn("templates: %s is not a template's record; skipped", path);
        json_decref(record);
        return;
    }
    const char *name = json_string_value(json_object_get(record, "name"));
    if (kernelspec_find(name) || entry_count == MAX_TEMPLATES) {
        log_warn("templates: template %s is skipped: %s", name,
                 kernelspec_find(name) ? "a template of --templates has its name"
                                       : "too many templates");
        json_decref(record);
        return;
    }
    template_entry *t = calloc(1, sizeof *t);
    if (!t)
        die("out of memory");
    t->record = record;
    if (!json_is_integer(json_object_get(record, "size_bytes")) ||
        json_integer_value(json_object_get(record, "size_bytes")) <= 0) /* written elsewhere */
        json_object_set_new(record, "size_bytes", json_integer(record_bytes(record)));
    if (!layers_exist(record, why, sizeof why) || activate(t, why, sizeof why) < 0) {
        log_warn("templates: template %s is skipped: %s", name, why);
        json_decref(record);
        free(t);
        return;
    }
    entries[entry_count++] = t;
    log_info("template %s: %zu layer%s, preloads '%s', warm pool of %d", name,
             json_array_size(json_object_get(record, "layers")),
             json_array_size(json_object_get(record, "layers")) == 1 ? "" : "s",
             record_string(t, "preload"), t->spec->pool_size);
}

void templates_init(const char *data_dir)
{
    if (template_views_init(data_dir) < 0)
        die("cannot prepare %s/templates: %s (choose another --data-dir)", data_dir,
            strerror(errno));
    DIR *dir = opendir(template_views_root());
    struct dirent *entry;
    while (dir && (entry = readdir(dir)) != NULL) {
        size_t length = strlen(entry->d_name);
        if (length > 5 && strcmp(entry->d_name + length - 5, ".json") == 0)
            load_record(template_views_root(), entry->d_name);
    }
    if (dir)
        closedir(dir);
}

void templates_unmount_all(void)
{
    for (size_t i = 0; i < entry_count; i++)
        template_views_unmount(entry_name(entries[i]));
}

/* ---- models ---- */

static json_t *entry_model(const template_entry *t, const kernelspec *spec)
{
    json_t *packages = json_array();
    const char *layers[TEMPLATES_MAX_LAYERS];
    int count = record_layers(t->record, layers);
    for (int i = 0; i < count; i++)
        template_views_layer_packages(layers[i], packages);
    json_t *model = json_pack(
        "{s:s, s:s, s:s, s:b, s:s, s:i, s:O*, s:O*, s:O*, s:O*, s:O*, s:O*, s:O*, s:O*, s:O*, s:o, "
        "s:o}",
        "name", spec->name, "display_name", spec->display_name, "language", spec->language,
        "default", strcmp(spec->name, manager_default_kernel()) == 0, "preload", spec->preload,
        "pool_size", spec->pool_size, "kind", json_object_get(t->record, "kind"), "from",
        json_object_get(t->record, "from"), "size_bytes", json_object_get(t->record, "size_bytes"),
        "layers", json_object_get(t->record, "layers"), "build_seconds",
        json_object_get(t->record, "build_seconds"), "created_at",
        json_object_get(t->record, "created_at"), "env", json_object_get(t->record, "env"),
        "workdir", json_object_get(t->record, "workdir"), "user",
        json_object_get(t->record, "user"), "packages", packages, "sandboxes", sandboxes_of(spec));
    return model;
}

/* python3 and the templates of --templates: the base with a preload list. */
static json_t *options_model(const kernelspec *spec)
{
    bool built_in = strcmp(spec->name, KERNELSPEC_BUILT_IN) == 0;
    return json_pack("{s:s, s:s, s:s, s:b, s:s, s:i, s:s, s:s, s:i, s:[], s:n, s:n, s:[], s:n, "
                     "s:s, s:[], s:o}",
                     "name", spec->name, "display_name", spec->display_name, "language",
                     spec->language, "default", strcmp(spec->name, manager_default_kernel()) == 0,
                     "preload", spec->preload, "pool_size", spec->pool_size, "kind",
                     built_in ? "built-in" : "modules", "from", "cellbox", "size_bytes", 0,
                     "layers", "build_seconds", "created_at", "env", "workdir", "user", "user",
                     "packages", "sandboxes", sandboxes_of(spec));
}

json_t *templates_model(const char *name)
{
    const kernelspec *spec = kernelspec_find(name);
    if (!spec || spec->argv) /* another language's kernelspec is not a template */
        return NULL;
    const template_entry *t = find_entry(name);
    return t && t->spec == spec ? entry_model(t, spec) : options_model(spec);
}

json_t *templates_list_model(void)
{
    json_t *list = json_array();
    for (size_t i = 0; i < kernelspec_count(); i++)
        if (!kernelspec_at(i)->argv)
            json_array_append_new(list, templates_model(kernelspec_at(i)->name));
    return list;
}
