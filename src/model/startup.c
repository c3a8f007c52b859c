#include "model/startup.h"

#include <errno.h>
#include <string.h>

#include "common/log.h"
#include "kernel/keeper.h"
#include "model/adoption.h"
#include "model/box.h"
#include "model/command.h"
#include "model/pool.h"
#include "model/prepared.h"
#include "model/reconcile.h"
#include "model/templates.h"
#include "model/volumes.h"
#include "model/sandbox_pieces.h"
#include "model/snapshots.h"
#include "sandbox/volume_worker.h"

/* What a restart keeps of a handed-out kernel's box (metadata, env, TTL, pause) and of its
   commands goes into its record. Written from here, above both: box.c and command.c call down
   into the manager (manager_record when that state changes), which writes the records. */
static void add_box_and_commands(kernel *k, json_t *record)
{
    box *b = kernel_box(k);
    if (!b)
        return;
    json_object_set_new(record, "box", box_persisted(b));
    json_object_set_new(record, "commands", command_persisted(b));
}

void startup_run(const manager_options *options)
{
    manager_init(options);
    volumes_init(options->data_dir);
    templates_init(options->data_dir);
    sandbox_pieces_set_record_extras(add_box_and_commands);
    if (keeper_start(options->data_dir) < 0)
        log_warn("no keeper: sandboxes end with this daemon, whatever the way it stops");
    adoption_adopt_all();
    reconcile_data_dir(options->data_dir, options->keep_workspaces, adoption_took);
    if (options->workspace_kind == VOLUME_EXT4 && volume_worker_start() < 0)
        log_warn("cannot start the volume helper (%s): workspace volumes are made in the daemon",
                 strerror(errno));
    pool_init(&(pool_options){.default_limits = options->default_limits,
                              .keep_workspaces = options->keep_workspaces,
                              .room_for_another = manager_has_room});
    prepared_init(&options->default_limits, options->workspace_kind, options->keep_workspaces);
    /* after the sweep of what a dead daemon left: a hibernated sandbox is made again from its
       snapshot, under its own id */
    char why[512];
    if (snapshots_init(options->data_dir, why, sizeof why) < 0)
        die("snapshots: %s", why);
    snapshots_set_hibernate_idle(options->hibernate_idle);
}
