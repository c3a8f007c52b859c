/* stateless_run — code blocks run once in a fresh sandbox, which is then destroyed (/v1/run, the
 * MCP `run` tool): the RL-reward path.
 *
 * The sandbox comes from the warm pool when the limits are the defaults. Its preloaded kernel runs
 * one silent execution of cellbox_kernel.script.run(), which runs each block with AutoGen's
 * command-line semantics (stop at the first non-zero exit; 124 and "Timeout" on time out) and
 * reports exit codes and fetched files; this module collects the output (capped) and builds the
 * answer documented for POST /v1/run. */
#ifndef CELLBOX_MODEL_STATELESS_RUN_H
#define CELLBOX_MODEL_STATELESS_RUN_H

#include <jansson.h>

#include "common/failure.h"

typedef struct stateless_run stateless_run;

typedef struct stateless_run_plan {
    json_t *blocks;         /* [{"language": python|bash|sh, "code"}], checked */
    json_t *files;          /* {path: base64} or NULL */
    json_t *fetch_files;    /* [path] or NULL */
    const char *stdin_text; /* or NULL */
    int timeout_s;
    long long max_output;   /* bytes of output kept */
    int memory_mb;          /* 0: the default limit */
} stateless_run_plan;

/* Called once with the answer (borrowed), never from inside stateless_run_start; the run is freed
   afterwards. */
typedef void (*stateless_run_done)(void *arg, json_t *answer);

/* NULL with what went wrong (manager_create's kinds) and `why` when no sandbox could be made. */
stateless_run *stateless_run_start(const stateless_run_plan *plan, stateless_run_done done,
                                   void *arg, failure_kind *failure, char *why, size_t why_size);
/* The caller went away: no answer; the sandbox is destroyed. */
void stateless_run_abandon(stateless_run *run);

#endif
