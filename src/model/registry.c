#include "model/registry.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fs.h"
#include "common/ids.h"
#include "common/log.h"

static char *folder; /* DATA_DIR/sandboxes */

int registry_init(const char *data_dir)
{
    if (asprintf(&folder, "%s/sandboxes", data_dir) < 0)
        die("out of memory");
    return fs_mkdir_p(folder, 0700);
}

void registry_write(const char *id, json_t *record)
{
    char path[4200], partial[4300];
    snprintf(path, sizeof path, "%.4000s/%.64s.json", folder, id);
    snprintf(partial, sizeof partial, "%s.partial", path);
    if (json_dump_file(record, partial, JSON_COMPACT) < 0 || rename(partial, path) < 0) {
        log_warn("cannot write the record of sandbox %s in %s: %s (a daemon started after a "
                 "crash may not clean it up)", id, folder, strerror(errno));
        unlink(partial);
    }
}

void registry_remove(const char *id)
{
    char path[4200];
    snprintf(path, sizeof path, "%.4000s/%.64s.json", folder, id);
    if (unlink(path) < 0 && errno != ENOENT)
        log_warn("cannot remove %s: %s", path, strerror(errno));
}

void registry_each(void (*visit)(const char *id, json_t *record, void *arg), void *arg)
{
    DIR *dir = opendir(folder);
    if (!dir)
        return;
    for (struct dirent *entry; (entry = readdir(dir));) {
        const char *name = entry->d_name;
        size_t length = strlen(name);
        char path[4400], id[UUID_STRING_LENGTH + 1];
        snprintf(path, sizeof path, "%.4000s/%.255s", folder, name);
        if (length > 8 && strcmp(name + length - 8, ".partial") == 0) {
            unlink(path); /* a write the dead daemon did not finish: the record before it stands */
            continue;
        }
        if (length != UUID_STRING_LENGTH + 5 || strcmp(name + UUID_STRING_LENGTH, ".json") != 0)
            continue;
        snprintf(id, sizeof id, "%.36s", name);
        if (!id_is_uuid(id))
            continue;
        json_t *record = json_load_file(path, 0, NULL);
        visit(id, record, arg);
        json_decref(record);
    }
    closedir(dir);
}
