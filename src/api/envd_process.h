/* envd_process — E2B envd's process.Process Connect-RPC service (the SDKs' commands.* and pty.*):
 * Start and Connect (server streaming: a start event with the pid, data events of base64 bytes
 * — stdout, stderr or pty — then the end event), List, SendInput, SendSignal, CloseStdin, Update
 * (a terminal's size) and StreamInput (client streaming), over model/command.h, the one command
 * /v1 and MCP use.
 *
 * As envd does: a process outlives the Start call (a client that goes away leaves it running;
 * Connect re-attaches by pid or tag and gets its output from then on); Connect-Timeout-Ms on
 * Start is the process's own time limit (0 or none: no limit); an exited process is no longer
 * found (not_found). Processes run as the sandbox's user, in ENVD_HOME_DIR unless `cwd` says. */
#ifndef CELLBOX_API_ENVD_PROCESS_H
#define CELLBOX_API_ENVD_PROCESS_H

#include "api/connect.h"
#include "http/server.h"
#include "model/box.h"

#define ENVD_PROCESS_SERVICE "process.Process"

/* For connect_streams_body (StreamInput's envelopes arrive as the body does). */
extern const connect_service envd_process_service;

/* Answers /process.Process/{method} for sandbox `b`. */
void envd_process_serve(http_request *request, box *b, const char *method);

#endif
