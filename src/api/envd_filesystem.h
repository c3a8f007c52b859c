/* envd_filesystem — E2B envd's filesystem.Filesystem Connect-RPC service (the SDKs'
 * files.list, exists, getInfo, makeDir, rename, remove and watchDir): Stat, MakeDir, Move,
 * ListDir and Remove on a sandbox's files, through box_open_files and sandbox/confined.h like
 * /v1's files, and WatchDir (server streaming) and the polling watchers CreateWatcher,
 * GetWatcherEvents and RemoveWatcher, on model/watch.h. The connect_serve context is the box.
 * Relative paths are relative to the sandbox's working directory (/workspace; E2B's is
 * /home/user). */
#ifndef CELLBOX_API_ENVD_FILESYSTEM_H
#define CELLBOX_API_ENVD_FILESYSTEM_H

#include "api/connect.h"

extern const connect_service envd_filesystem_service;

#endif
