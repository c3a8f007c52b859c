/* execution — one piece of code run in a context on behalf of the native API, reported as E2B's
 * code interpreter reports it: a sequence of events (JSON objects with a "type") ending with
 * {"type": "end_of_execution"}.
 *
 * The daemon sends the kernel an execute_request of its own and turns the kernel's replies to it
 * into events: stdout/stderr, result (from a MIME bundle), error, number_of_executions, keepalive
 * (after 5 s of quiet), accounting (wall and CPU time, peak memory, output bytes), then the end.
 * A per-execution timeout interrupts the kernel; a consumer that goes away interrupts it too.
 * Tracebacks come without IPython's terminal colours unless the request asks for them. */
#ifndef CELLBOX_MODEL_EXECUTION_H
#define CELLBOX_MODEL_EXECUTION_H

#include <jansson.h>
#include <stdbool.h>

#include "model/box.h"
#include "kernel/kernel.h"

typedef struct execution execution;

typedef struct execution_sink {
    void (*on_event)(void *arg, json_t *event); /* borrowed */
    void (*on_end)(void *arg);                  /* after end_of_execution; nothing follows */
} execution_sink;

typedef struct execution_request {
    const char *code;
    json_t *env_vars;   /* borrowed, may be NULL: set for this execution only */
    int timeout_s;      /* 0: the sandbox's per-cell limit applies */
    bool silent;        /* no execution count, no execute_result (scripts) */
    bool color;         /* keep IPython's ANSI colours in the error event's traceback */
} execution_request;

void execution_init(void);
/* Sends the code to `context` and returns its execution (never NULL). The sink is never called
   from inside execution_start: events and the end come on later turns of the loop, a kernel that
   cannot take the request included (an error event "KernelDied", then the end). */
execution *execution_start(box *b, kernel *context, const execution_request *request,
                           const execution_sink *sink, void *arg);
/* The consumer went away: no more events; the kernel is interrupted if it runs this code. */
void execution_abandon(execution *e);

#endif
