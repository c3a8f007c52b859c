#include "model/reconcile.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ids.h"
#include "common/log.h"
#include "model/registry.h"
#include "sandbox/cgroup.h"
#include "sandbox/volume.h"
#include "sandbox/volume_shared.h"

#define MAX_LEFTOVERS 65536 /* a block of uids: no daemon had more sandboxes */

typedef struct leftover {
    char id[UUID_STRING_LENGTH + 1];
    json_t *record; /* NULL: known from its workspace directory only */
} leftover;

typedef struct leftovers {
    leftover *items;
    size_t count;
} leftovers;

static leftover *find(leftovers *all, const char *id)
{
    for (size_t i = 0; i < all->count; i++)
        if (strcmp(all->items[i].id, id) == 0)
            return &all->items[i];
    return NULL;
}

static void add(leftovers *all, const char *id, json_t *record)
{
    leftover *known = find(all, id);
    if (known) {
        if (record && !known->record)
            known->record = json_incref(record);
        return;
    }
    if (all->count == MAX_LEFTOVERS)
        return;
    all->items = realloc(all->items, (all->count + 1) * sizeof *all->items);
    if (!all->items)
        die("out of memory");
    leftover *item = &all->items[all->count++];
    snprintf(item->id, sizeof item->id, "%s", id);
    item->record = record ? json_incref(record) : NULL;
}

static void add_recorded(const char *id, json_t *record, void *arg) { add(arg, id, record); }

/* Workspace directories: a daemon older than the registry, or a record lost. */
static void add_workspaces(leftovers *all, const char *data_dir)
{
    char path[4200];
    snprintf(path, sizeof path, "%.4000s/workspaces", data_dir);
    DIR *dir = opendir(path);
    if (!dir)
        return;
    for (struct dirent *entry; (entry = readdir(dir));)
        if (id_is_uuid(entry->d_name))
            add(all, entry->d_name, NULL);
    closedir(dir);
}

typedef struct kill_tally {
    int processes;   /* in all sandboxes */
    int in_sandbox;  /* in this one: the most any hierarchy listed (v1 lists each in every one) */
} kill_tally;

static void kill_group(const char *path, void *arg)
{
    kill_tally *tally = arg;
    int signalled = cgroup_kill_leftover(path);
    if (signalled > tally->in_sandbox)
        tally->in_sandbox = signalled;
}

static void remove_group(const char *path, void *arg) { cgroup_remove_leftover(path); }

/* The recorded cgroup directories, or where cgroup_create would have put them. */
static void each_cgroup(const leftover *item, void (*visit)(const char *path, void *arg), void *arg)
{
    json_t *paths = item->record ? json_object_get(item->record, "cgroups") : NULL;
    if (json_is_array(paths) && json_array_size(paths) > 0) {
        size_t i;
        json_t *path;
        json_array_foreach(paths, i, path)
            if (json_is_string(path))
                visit(json_string_value(path), arg);
        return;
    }
    char name[64];
    snprintf(name, sizeof name, "kernel-%s", item->id);
    cgroup_each_path(name, visit, arg);
}

/* The image lives in DATA_DIR/volumes whatever the record says: a record is never trusted to
   name a file elsewhere. */
static void remove_volume(const leftover *item, const char *data_dir, bool keep_workspaces)
{
    char image[4200], workspace[4200];
    snprintf(image, sizeof image, "%.4000s/volumes/%s.img", data_dir, item->id);
    snprintf(workspace, sizeof workspace, "%.4000s/workspaces/%s", data_dir, item->id);
    char views[4200]; /* its named volumes' views (volume_shared.h) */
    snprintf(views, sizeof views, "%.4000s/volume-views/%s", data_dir, item->id);
    volume_shared_close_views(views);
    /* Warm-pool kernels and prepared pieces were never anyone's: never kept. Without a record
       (a daemon older than the registry) the files may be someone's: kept if asked. */
    json_t *in_use = item->record ? json_object_get(item->record, "in_use") : NULL;
    bool someones = !item->record || json_is_true(in_use);
    volume_remove_leftover(image, workspace, keep_workspaces && someones);
}

void reconcile_data_dir(const char *data_dir, bool keep_workspaces, bool (*adopted)(const char *id))
{
    leftovers all = {0};
    registry_each(add_recorded, &all);
    add_workspaces(&all, data_dir);
    for (size_t i = 0; i < all.count;) {
        if (!adopted(all.items[i].id)) {
            i++;
            continue;
        }
        json_decref(all.items[i].record);
        all.items[i] = all.items[--all.count];
    }
    /* Every process first, in every hierarchy, then the directories (see cgroup.h). */
    kill_tally tally = {0};
    for (size_t i = 0; i < all.count; i++) {
        tally.in_sandbox = 0;
        each_cgroup(&all.items[i], kill_group, &tally);
        tally.processes += tally.in_sandbox;
    }
    for (size_t i = 0; i < all.count; i++) {
        each_cgroup(&all.items[i], remove_group, NULL);
        remove_volume(&all.items[i], data_dir, keep_workspaces);
        registry_remove(all.items[i].id);
        json_decref(all.items[i].record);
    }
    char volumes[4200];
    snprintf(volumes, sizeof volumes, "%.4000s/volumes", data_dir);
    volume_remove_leftover_templates(volumes);
    if (all.count > 0)
        log_info("removed %zu sandbox(es) a previous daemon left in %s (%d process(es) killed%s)",
                 all.count, data_dir, tally.processes,
                 keep_workspaces ? "; their volume images kept in DATA_DIR/volumes" : "");
    free(all.items);
}
