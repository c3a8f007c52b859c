#include "model/stateless_run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buffer.h"
#include "common/log.h"
#include "common/loop.h"
#include "model/box.h"
#include "model/execution.h"
#include "model/manager.h"

#define DEFAULT_TIMEOUT_S 30
#define DEFAULT_MAX_OUTPUT (1 << 20)
/* After a run's timeout interrupts the runner, how long it has to report (exit code 124) before
   the answer goes without its report and the sandbox is deleted: a third wait, for the runner,
   beside the kernel's kill grace and an execution's give-up (kernel.h, execution.c). */
#define GIVE_UP_AFTER_INTERRUPT_MS 3000
#define TIMEOUT_EXIT_CODE 124
#define RUN_MIME "application/vnd.cellbox.run+json"
#define BLOCK_MIME "application/vnd.cellbox.block+json"
#define MAX_BLOCKS 256

struct stateless_run {
    stateless_run_done done;    /* NULL once answered or abandoned */
    void *arg;
    kernel *k;
    execution *execution;
    loop_timer_id timer;
    int timeout_s;
    long long max_output;
    buffer output, out, err;
    long long output_bytes;
    bool truncated, timed_out, gave_up;
    json_t *outcome;        /* from the script runner */
    json_t *error;          /* an error event: the runner itself failed (kernel died...) */
    json_t *accounting;
    size_t block_starts[MAX_BLOCKS]; /* where each block's output begins in `output` */
    size_t block_count;
};

typedef struct stateless_run run_call;

static void append_capped(run_call *call, buffer *to, const char *text, size_t length)
{
    if (!buffer_append_capped(to, text, length, (size_t)call->max_output))
        call->truncated = true;
}

static void run_on_event(void *arg, json_t *event)
{
    run_call *call = arg;
    const char *type = json_string_value(json_object_get(event, "type"));
    if (!type)
        return;
    if (strcmp(type, "stdout") == 0 || strcmp(type, "stderr") == 0) {
        json_t *text = json_object_get(event, "text");
        size_t n = json_string_length(text);
        call->output_bytes += (long long)n;
        append_capped(call, &call->output, json_string_value(text), n);
        append_capped(call, strcmp(type, "stdout") == 0 ? &call->out : &call->err,
                      json_string_value(text), n);
    } else if (strcmp(type, "result") == 0) {
        if (json_object_get(json_object_get(event, "extra"), BLOCK_MIME)) {
            if (call->block_count < MAX_BLOCKS)
                call->block_starts[call->block_count++] = buffer_size(&call->output);
            return;
        }
        json_t *outcome = json_object_get(json_object_get(event, "extra"), RUN_MIME);
        if (json_is_object(outcome)) {
            json_decref(call->outcome);
            call->outcome = json_incref(outcome);
        }
    } else if (strcmp(type, "error") == 0) {
        json_decref(call->error);
        call->error = json_incref(event);
    } else if (strcmp(type, "accounting") == 0) {
        json_decref(call->accounting);
        call->accounting = json_pack("{s:O, s:O, s:O, s:I}", "wall_ms", json_object_get(event, "wall_ms"),
                                     "cpu_ms", json_object_get(event, "cpu_ms"), "memory_peak_bytes",
                                     json_object_get(event, "memory_peak_bytes"), "output_bytes",
                                     (json_int_t)call->output_bytes);
    }
}

static json_t *text_of(const buffer *b)
{
    return json_stringn(buffer_size(b) ? buffer_head(b) : "", buffer_size(b));
}

static void respond(run_call *call)
{
    int exit_code = 1;
    json_t *blocks = json_array(), *files = json_object();
    if (call->outcome) {
        json_t *code = json_object_get(call->outcome, "exit_code");
        exit_code = json_is_integer(code) ? (int)json_integer_value(code) : 1;
        if (json_is_array(json_object_get(call->outcome, "blocks")))
            json_array_extend(blocks, json_object_get(call->outcome, "blocks"));
        /* Each block's share of the output, cut where the runner said the block began. */
        size_t i;
        json_t *block;
        json_array_foreach(blocks, i, block)
        {
            size_t from = i < call->block_count ? call->block_starts[i] : buffer_size(&call->output);
            size_t to = i + 1 < call->block_count ? call->block_starts[i + 1] : buffer_size(&call->output);
            if (to < from)
                to = from;
            json_object_set_new(block, "output", json_stringn(buffer_size(&call->output)
                                                                  ? buffer_head(&call->output) + from : "",
                                                              to - from));
        }
        if (json_is_object(json_object_get(call->outcome, "files")))
            json_object_update(files, json_object_get(call->outcome, "files"));
        if (json_is_true(json_object_get(call->outcome, "timed_out")))
            call->timed_out = true;
    } else if (call->error) { /* the sandbox failed, not the code: say why in the output */
        const char *name = json_string_value(json_object_get(call->error, "name"));
        const char *value = json_string_value(json_object_get(call->error, "value"));
        char line[600];
        int n = snprintf(line, sizeof line, "%s%s: %s\n", buffer_size(&call->output) ? "\n" : "",
                         name ? name : "Error", value ? value : "");
        buffer_append(&call->output, line, n < (int)sizeof line ? (size_t)n : sizeof line - 1);
    }
    if (call->timed_out) {
        exit_code = TIMEOUT_EXIT_CODE;
        /* AutoGen appends "Timeout" to the output of a block that ran out of time. */
        buffer_append(&call->output, "\nTimeout", 8);
    }
    const char *status = call->timed_out ? "timeout" : exit_code == 0 ? "ok" : "error";
    json_t *answer = json_pack(
        "{s:s, s:i, s:o, s:o, s:o, s:b, s:b, s:o, s:o, s:o}", "status", status, "exit_code", exit_code,
        "output", text_of(&call->output), "stdout", text_of(&call->out), "stderr", text_of(&call->err),
        "timed_out", call->timed_out, "truncated", call->truncated, "blocks", blocks, "files", files,
        "accounting", call->accounting ? json_incref(call->accounting) : json_object());
    stateless_run_done done = call->done;
    call->done = NULL;
    if (done)
        done(call->arg, answer);
    json_decref(answer);
}

/* The sandbox goes whatever happened: a stateless run leaves nothing behind. */
static void discard_sandbox(run_call *call)
{
    if (call->timer)
        loop_timer_cancel(call->timer);
    call->timer = 0;
    if (call->k) {
        kernel *k = call->k;
        call->k = NULL;
        manager_delete(k);
    }
}

static void free_run(run_call *call);

static void run_on_end(void *arg)
{
    run_call *call = arg;
    call->execution = NULL;
    respond(call);
    discard_sandbox(call);
    free_run(call);
}

static const execution_sink run_sink = {run_on_event, run_on_end};

static void on_give_up(void *arg)
{
    run_call *call = arg;
    call->timer = 0;
    execution *e = call->execution;
    call->execution = NULL;
    execution_abandon(e);
    respond(call);
    discard_sandbox(call);
    free_run(call);
}

static void on_run_timeout(void *arg)
{
    run_call *call = arg;
    call->timer = 0;
    call->timed_out = true;
    kernel_interrupt(call->k); /* the runner stops with 124 and reports */
    call->timer = loop_timer_add(GIVE_UP_AFTER_INTERRUPT_MS, on_give_up, call);
}

static void free_run(run_call *call)
{
    buffer_free(&call->output);
    buffer_free(&call->out);
    buffer_free(&call->err);
    json_decref(call->outcome);
    json_decref(call->error);
    json_decref(call->accounting);
    free(call);
}

void stateless_run_abandon(stateless_run *call)
{
    call->done = NULL;
    if (call->execution) {
        execution *e = call->execution;
        call->execution = NULL;
        execution_abandon(e);
    }
    discard_sandbox(call);
    free_run(call);
}

/* The runner's call, its argument a JSON text inside a Python string literal: a JSON string
   (ASCII-only) is also a valid Python literal. */
static char *runner_code(json_t *blocks, json_t *files, json_t *fetch, const char *stdin_text)
{
    json_t *plan = json_pack("{s:O, s:o, s:o, s:s}", "blocks", blocks, "files",
                             files && json_is_object(files) ? json_incref(files) : json_object(),
                             "fetch_files",
                             fetch && json_is_array(fetch) ? json_incref(fetch) : json_array(),
                             "stdin", stdin_text ? stdin_text : "");
    char *plan_text = json_dumps(plan, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(plan);
    json_t *literal = json_string(plan_text);
    char *literal_text = json_dumps(literal, JSON_ENCODE_ANY | JSON_ENSURE_ASCII);
    json_decref(literal);
    free(plan_text);
    char *code = NULL;
    if (asprintf(&code, "import cellbox_kernel.script\ncellbox_kernel.script.run(%s)\n", literal_text) < 0)
        die("out of memory");
    free(literal_text);
    return code;
}

stateless_run *stateless_run_start(const stateless_run_plan *plan, stateless_run_done done,
                                   void *arg, failure_kind *failure, char *why, size_t why_size)
{
    json_t *limits = json_object();
    if (plan->memory_mb > 0)
        json_object_set_new(limits, "memory", json_sprintf("%dM", plan->memory_mb));
    kernel *k = manager_create(manager_default_kernel(), NULL, limits, NULL, NULL, failure, why, why_size);
    json_decref(limits);
    if (!k)
        return NULL;
    run_call *call = calloc(1, sizeof *call);
    if (!call)
        die("out of memory");
    call->k = k;
    call->done = done;
    call->arg = arg;
    call->timeout_s = plan->timeout_s;
    call->max_output = plan->max_output;
    char *code = runner_code(plan->blocks, plan->files, plan->fetch_files, plan->stdin_text);
    call->timer = loop_timer_add((int64_t)plan->timeout_s * 1000, on_run_timeout, call);
    execution_request run = {.code = code, .silent = true};
    call->execution = execution_start(box_of(k), k, &run, &run_sink, call);
    free(code);
    return call;
}
