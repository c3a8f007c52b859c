#include "model/execution.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buffer.h"
#include "common/clock.h"
#include "common/ids.h"
#include "common/log.h"
#include "common/loop.h"
#include "common/text.h"
#include "kernel/message.h"
#include "model/ttl.h"
#include "sandbox/cgroup.h"

#define KEEPALIVE_MS 5000
/* After this execution's own timeout (timeout_s) interrupts it, how long the events wait for the
   cell to stop before they end with "still busy" (the kernel is left running; the client may
   restart it). Not the kernel's KERNEL_CELL_LIMIT_KILL_GRACE_MS, which kills the kernel after
   the sandbox's per-cell limit: this waits for a reply, that enforces a limit, and it is the
   longer of the two so that a kill the kernel is about to make is what the client hears. */
#define GIVE_UP_AFTER_INTERRUPT_MS (KERNEL_CELL_LIMIT_KILL_GRACE_MS + 2000)

struct execution {
    box *box;
    kernel *k;
    char msg_id[UUID_STRING_LENGTH + 1];
    const execution_sink *sink; /* NULL once abandoned */
    void *arg;
    bool started;               /* the kernel said busy for our request */
    bool replied, errored, timed_out, finished;
    bool color;                 /* tracebacks keep their ANSI colours */
    int timeout_s;
    loop_timer_id keepalive, timeout;
    int64_t started_ms, submitted_ms;
    char send_failure[192];     /* why the kernel could not take it (kernel_death_reason's size) */
    bool refused;               /* ... and then: finish reports the counters read at the time */
    cgroup_counters counters_when_refused;
    long long cpu_at_start_us;
    long long output_bytes;
    struct execution *next;
};

static execution *running; /* every unfinished execution, of every kernel */
static char session[UUID_STRING_LENGTH + 1];

static void on_kernel_message(kernel *k, const char *channel, json_t *message);
static void on_kernel_gone(kernel *k);

void execution_init(void)
{
    id_uuid4(session);
    kernel_add_message_handler(on_kernel_message);
    box_add_kernel_gone_hook(on_kernel_gone);
}

static sandbox_cgroup *cgroup_of(const execution *e) { return kernel_get_sandbox(e->k)->cgroup; }

static void cancel(loop_timer_id *timer)
{
    if (*timer) {
        loop_timer_cancel(*timer);
        *timer = 0;
    }
}

static void on_keepalive(void *arg);

static void emit(execution *e, json_t *event)
{
    if (e->sink && !e->finished)
        e->sink->on_event(e->arg, event);
    json_decref(event);
    if (e->sink && !e->finished) {
        cancel(&e->keepalive);
        e->keepalive = loop_timer_add(KEEPALIVE_MS, on_keepalive, e);
    }
}

static void on_keepalive(void *arg)
{
    execution *e = arg;
    e->keepalive = 0;
    emit(e, json_pack("{s:s}", "type", "keepalive"));
}

static void free_execution(void *arg) { free(arg); }

static void unlink_execution(execution *e)
{
    for (execution **at = &running; *at; at = &(*at)->next) {
        if (*at == e) {
            *at = e->next;
            return;
        }
    }
}

static void emit_error(execution *e, const char *name, const char *value, const char *traceback)
{
    e->errored = true;
    emit(e, json_pack("{s:s, s:s, s:o, s:o}", "type", "error", "name", name, "value",
                      text_json_string(value), "traceback",
                      text_json_string(traceback ? traceback : value)));
}

/* Accounting, the end, and goodbye. Called once. */
static void finish(execution *e)
{
    if (e->finished)
        return;
    cgroup_counters counters = {0};
    if (e->refused) /* its kernel may be gone by the turn that reports it */
        counters = e->counters_when_refused;
    else if (cgroup_of(e))
        cgroup_read_counters(cgroup_of(e), &counters);
    int64_t now = clock_monotonic_ms();
    emit(e, json_pack("{s:s, s:I, s:I, s:I, s:I, s:b, s:b}", "type", "accounting", "wall_ms",
                      (json_int_t)(now - (e->started ? e->started_ms : e->submitted_ms)), "cpu_ms",
                      (json_int_t)(e->started ? (counters.cpu_usage_us - e->cpu_at_start_us) / 1000 : 0),
                      "memory_peak_bytes", (json_int_t)counters.memory_peak, "output_bytes",
                      (json_int_t)e->output_bytes, "truncated", e->started && kernel_last_dropped_bytes(e->k) > 0,
                      "timed_out", e->timed_out));
    emit(e, json_pack("{s:s}", "type", "end_of_execution"));
    e->finished = true;
    cancel(&e->keepalive);
    cancel(&e->timeout);
    const execution_sink *sink = e->sink;
    e->sink = NULL;
    unlink_execution(e);
    if (sink && sink->on_end)
        sink->on_end(e->arg);
    loop_defer(free_execution, e);
}

/* ---- what the kernel says ---- */

/* E2B's result: the MIME bundle's known types under short names, the rest under "extra". The
   kernel's structured chart of a figure (runtime/python/cellbox_kernel/charts.py) is E2B's
   `chart`, which its SDKs read as result.chart. */
static json_t *result_event(json_t *data, bool is_main)
{
    static const struct { const char *mime, *field; } known[] = {
        {"text/plain", "text"}, {"text/html", "html"}, {"text/markdown", "markdown"},
        {"image/svg+xml", "svg"}, {"image/png", "png"}, {"image/jpeg", "jpeg"},
        {"application/pdf", "pdf"}, {"text/latex", "latex"}, {"application/json", "json"},
        {"application/javascript", "javascript"}, {"application/vnd.cellbox.chart+json", "chart"},
    };
    json_t *event = json_pack("{s:s}", "type", "result");
    json_t *extra = json_object();
    const char *mime;
    json_t *value;
    json_object_foreach(data, mime, value)
    {
        const char *field = NULL;
        for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
            if (strcmp(mime, known[i].mime) == 0)
                field = known[i].field;
        if (json_is_null(value))
            continue;
        if (field)
            json_object_set(event, field, value);
        else
            json_object_set(extra, mime, value);
    }
    if (json_object_size(extra) > 0)
        json_object_set(event, "extra", extra);
    json_decref(extra);
    json_object_set_new(event, "is_main_result", json_boolean(is_main));
    return event;
}

/* The kernel's traceback lines as one string; without their colours unless asked for: a
   program, a log or a model reads escape codes as noise. */
static json_t *joined_traceback(json_t *lines, bool color)
{
    buffer joined = {0};
    size_t i;
    json_t *line;
    json_array_foreach(lines, i, line)
    {
        if (!json_is_string(line))
            continue;
        if (i > 0)
            buffer_append(&joined, "\n", 1);
        if (color)
            buffer_append(&joined, json_string_value(line), json_string_length(line));
        else
            text_append_without_ansi(&joined, json_string_value(line));
    }
    json_t *text = json_stringn(buffer_size(&joined) ? buffer_head(&joined) : "", buffer_size(&joined));
    buffer_free(&joined);
    return text;
}

static void on_started(execution *e)
{
    e->started = true;
    e->started_ms = clock_monotonic_ms();
    cgroup_counters counters = {0};
    if (cgroup_of(e)) {
        cgroup_reset_memory_peak(cgroup_of(e));
        cgroup_read_counters(cgroup_of(e), &counters);
    }
    e->cpu_at_start_us = counters.cpu_usage_us;
    if (!e->sink || e->timed_out) /* abandoned, or its time ran out while it waited in line */
        kernel_interrupt(e->k);
}

static void handle_iopub(execution *e, const char *type, json_t *content)
{
    if (strcmp(type, "status") == 0) {
        const char *state = json_string_value(json_object_get(content, "execution_state"));
        if (state && strcmp(state, "busy") == 0 && !e->started)
            on_started(e);
        else if (state && strcmp(state, "idle") == 0 && e->started)
            finish(e);
    } else if (strcmp(type, "stream") == 0) {
        const char *name = json_string_value(json_object_get(content, "name"));
        json_t *text = json_object_get(content, "text");
        if (!json_is_string(text))
            return;
        char at[ISO_TIME_BUFFER];
        clock_format_iso(clock_wall_us(), at);
        e->output_bytes += (long long)json_string_length(text);
        emit(e, json_pack("{s:s, s:O, s:s}", "type",
                          name && strcmp(name, "stderr") == 0 ? "stderr" : "stdout", "text", text,
                          "timestamp", at));
    } else if (strcmp(type, "execute_result") == 0 || strcmp(type, "display_data") == 0) {
        json_t *data = json_object_get(content, "data");
        if (json_is_object(data))
            emit(e, result_event(data, strcmp(type, "execute_result") == 0));
    } else if (strcmp(type, "execute_input") == 0) {
        json_t *count = json_object_get(content, "execution_count");
        if (json_is_integer(count))
            emit(e, json_pack("{s:s, s:O}", "type", "number_of_executions", "execution_count", count));
    } else if (strcmp(type, "error") == 0) {
        const char *name = json_string_value(json_object_get(content, "ename"));
        if (e->timed_out && name && (!strcmp(name, "KeyboardInterrupt") || !strcmp(name, "Interrupted")))
            return; /* the timeout already said why */
        json_t *traceback = joined_traceback(json_object_get(content, "traceback"), e->color);
        const char *value = json_string_value(json_object_get(content, "evalue"));
        emit_error(e, name ? name : "Error", value ? value : "", json_string_value(traceback));
        json_decref(traceback);
    }
}

static void on_kernel_message(kernel *k, const char *channel, json_t *message)
{
    const char *type = message_type(message);
    json_t *parent = json_object_get(message, "parent_header");
    const char *parent_id = json_string_value(json_object_get(parent, "msg_id"));
    if (!type)
        return;
    const char *state = strcmp(type, "status") == 0
                            ? json_string_value(json_object_get(json_object_get(message, "content"),
                                                                "execution_state"))
                            : NULL;
    bool dead = state && strcmp(state, "dead") == 0;
    for (execution *e = running, *next; e; e = next) {
        next = e->next;
        if (e->k != k)
            continue;
        if (parent_id && strcmp(parent_id, e->msg_id) == 0) {
            if (strcmp(channel, "iopub") == 0)
                handle_iopub(e, type, json_object_get(message, "content"));
            else if (strcmp(type, "execute_reply") == 0)
                e->replied = true;
        }
        if (dead && !e->finished) { /* queued or running: either way it will not run now */
            if (!e->errored)
                emit_error(e, "KernelDied", kernel_death_reason(k), NULL);
            finish(e);
        }
    }
}

static void on_kernel_gone(kernel *k)
{
    for (execution *e = running, *next; e; e = next) {
        next = e->next;
        if (e->k != k)
            continue;
        char why[512];
        if (!e->errored && box_describe_end(e->box, "cell", why, sizeof why))
            emit_error(e, "SandboxExpired", why, NULL);
        else if (!e->errored)
            emit_error(e, "SandboxDeleted", "the sandbox or context was deleted", NULL);
        e->started = false; /* its counters are gone with it */
        finish(e);
    }
}

/* ---- time ---- */

static void on_interrupt_ignored(void *arg)
{
    execution *e = arg;
    e->timeout = 0;
    emit_error(e, "TimeoutError",
               "the kernel did not stop when interrupted; it is still busy (restart the context "
               "to stop it)", NULL);
    finish(e);
}

static void on_timeout(void *arg)
{
    execution *e = arg;
    e->timeout = 0;
    e->timed_out = true;
    char value[160];
    snprintf(value, sizeof value, "execution timed out after %d s: the kernel was interrupted",
             e->timeout_s);
    emit_error(e, "TimeoutError", value, NULL);
    if (!e->started) { /* still waiting behind another execution: it will be stopped on start */
        finish(e);
        return;
    }
    kernel_interrupt(e->k);
    e->timeout = loop_timer_add(GIVE_UP_AFTER_INTERRUPT_MS, on_interrupt_ignored, e);
}

/* ---- life cycle ---- */

/* The kernel could not take the request. The sink hears so on the loop's next turn, never from
   inside execution_start: a caller holds the execution it was given before any event or end can
   reach it (no caller needs a placeholder for "it ended before it started"). */
static void report_send_failure(void *arg)
{
    execution *e = arg;
    emit_error(e, "KernelDied", e->send_failure, NULL);
    finish(e);
}

execution *execution_start(box *b, kernel *context, const execution_request *request,
                           const execution_sink *sink, void *arg)
{
    execution *e = calloc(1, sizeof *e);
    if (!e)
        die("out of memory");
    e->box = b;
    e->k = context;
    e->sink = sink;
    e->arg = arg;
    e->submitted_ms = clock_monotonic_ms();
    e->timeout_s = request->timeout_s;
    e->color = request->color;
    /* Each execution stands alone (as in E2B): an error or an interrupt in one must not abort
       the ones queued behind it, hence stop_on_error false. */
    json_t *content = json_pack("{s:s, s:b, s:b, s:{}, s:b, s:b}", "code", request->code, "silent",
                                request->silent, "store_history", !request->silent,
                                "user_expressions", "allow_stdin", 0, "stop_on_error", 0);
    json_t *message = message_new("execute_request", session, NULL, content);
    snprintf(e->msg_id, sizeof e->msg_id, "%s", message_id(message));
    json_object_set_new(message, "channel", json_string("shell"));
    if (request->env_vars && json_object_size(request->env_vars) > 0)
        json_object_set_new(json_object_get(message, "metadata"), "cellbox",
                            json_pack("{s:O}", "env", request->env_vars));
    int sent = kernel_send(context, message);
    json_decref(message);
    kernel_touch(context);
    if (sent < 0) {
        snprintf(e->send_failure, sizeof e->send_failure, "%s",
                 kernel_death_reason(context)[0] ? kernel_death_reason(context)
                                                 : "the context is not running");
        e->refused = true;
        if (cgroup_of(e))
            cgroup_read_counters(cgroup_of(e), &e->counters_when_refused);
        loop_defer(report_send_failure, e);
        return e;
    }
    e->next = running;
    running = e;
    e->keepalive = loop_timer_add(KEEPALIVE_MS, on_keepalive, e);
    if (request->timeout_s > 0)
        e->timeout = loop_timer_add((int64_t)request->timeout_s * 1000, on_timeout, e);
    return e;
}

void execution_abandon(execution *e)
{
    if (!e || e->finished)
        return;
    e->sink = NULL;
    cancel(&e->keepalive);
    if (e->started)
        kernel_interrupt(e->k); /* stops it; its idle then ends the record */
}
