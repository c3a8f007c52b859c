/* v1_template_build — POST /v1/templates: builds a template from a Dockerfile
 * (model/template_build.h) and streams its progress.
 *
 * The body is JSON {"name", "dockerfile", "preload"?, "pool_size"?, "replace"?, "no_cache"?,
 * "network"? (false, true, or {"allowOut": [...], "denyOut": [...]}: the steps' egress; the
 * default is the daemon's: network when it allows it), "build_args"? ({"NAME": "value"}),
 * "step_timeout_s"?}, or multipart/form-data with those fields as parts (JSON values as their
 * text) plus a `context` part: a tar (optionally gzip-compressed) of the build context, streamed
 * to a temporary file and extracted with every check (no absolute names, "..", devices or hard
 * links) into a temporary directory that goes when the build ends.
 *
 * What is wrong before a step runs is answered with the usual JSON error (400, 403, 409, 503).
 * Otherwise 200 application/x-ndjson: one event a line, as template_build.h lists them, the last
 * "done" or "error". A client that goes away stops the build, which leaves nothing behind. */
#ifndef CELLBOX_API_V1_TEMPLATE_BUILD_H
#define CELLBOX_API_V1_TEMPLATE_BUILD_H

#include <stdbool.h>

#include "http/server.h"

/* POST /v1/templates takes its body as a stream (a context tar can be large). */
bool v1_template_build_streams_body(const char *method, const char *path);
void v1_template_build(http_request *request);

#endif
