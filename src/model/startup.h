/* startup — the model's start, once, before the daemon serves anything (daemon/main.c calls it
 * with the data directory locked and the cgroups set up). One sequence, read top to bottom, so
 * that the order a restart depends on is written in one place rather than spread over calls
 * between the modules (each of them is called by it and calls none of it back):
 *
 *   1. manager_init        the data directory's folders, the sandbox pieces, the registry;
 *      volumes_init        the named volumes, mounted again before any sandbox is adopted;
 *      templates_init      the templates with files: their views mounted again and their
 *                          kernelspecs added, so that their sandboxes can be adopted;
 *   2. the records' extras what a record keeps of a box and its commands (box.h, command.h);
 *   3. keeper_start        the process holding handed-out kernels' channels across restarts;
 *   4. adoption_adopt_all  the sandboxes a previous daemon left, taken over when they qualify;
 *   5. reconcile_data_dir  whatever else of that daemon's, removed;
 *   6. volume_worker_start the helper that makes workspace volumes off the loop (ext4 only);
 *   7. pool_init, prepared_init  the warm pools and the prepared pieces start filling.
 *
 * Steps 3-5 come before the volume helper, the zygotes and the first request, so that nothing a
 * previous daemon left competes with this one. */
#ifndef CELLBOX_MODEL_STARTUP_H
#define CELLBOX_MODEL_STARTUP_H

#include "model/manager.h"

void startup_run(const manager_options *options);

#endif
