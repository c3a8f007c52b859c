/* e2b_volume_content — E2B's volume content API, /volumecontent/{volumeID}/{dir,path,file}, so
 * that the SDK's Volume methods reach a volume's files without a sandbox: list, makeDir,
 * getInfo/exists, updateMetadata (mode only), readFile, writeFile, remove. Every path is a path
 * in the volume ("/" its root; a relative one is taken from the root) and is resolved by the
 * confined calls a sandbox's files use (sandbox/confined.h), beneath the volume's root, as the id
 * the volume's files belong to (volume_shared.h): a link planted by a sandbox never leads out. */
#ifndef CELLBOX_API_E2B_VOLUME_CONTENT_H
#define CELLBOX_API_E2B_VOLUME_CONTENT_H

#include "http/server.h"

/* `volume` is the {volumeID} segment, `what` the last one ("dir", "path" or "file"). */
void e2b_volume_content_route(http_request *request, const char *volume, const char *what);

#endif
