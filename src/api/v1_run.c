/* POST /v1/run — a stateless run: a fresh sandbox (from the warm pool) runs code blocks in order
 * with AutoGen's command-line semantics, then is destroyed. The blocks run inside the sandbox's
 * preloaded kernel through cellbox_kernel/script.py; this module collects its output. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/v1.h"
#include "common/buffer.h"
#include "common/log.h"
#include "common/loop.h"
#include "kernel/execution.h"
#include "kernel/manager.h"

#define DEFAULT_TIMEOUT_S 30
#define DEFAULT_MAX_OUTPUT (1 << 20)
#define GIVE_UP_AFTER_INTERRUPT_MS 3000
#define TIMEOUT_EXIT_CODE 124
#define RUN_MIME "application/vnd.cellbox.run+json"

typedef struct run_call {
    http_stream *stream;
    kernel *k;
    execution *execution;
    loop_timer *timer;
    int timeout_s;
    long long max_output;
    buffer output, out, err;
    long long output_bytes;
    bool truncated, timed_out, gave_up;
    json_t *outcome;        /* from the script runner */
    json_t *error;          /* an error event: the runner itself failed (kernel died...) */
    json_t *accounting;
} run_call;

static void append_capped(run_call *call, buffer *to, const char *text, size_t length)
{
    size_t room = buffer_size(to) < (size_t)call->max_output ? (size_t)call->max_output - buffer_size(to) : 0;
    if (length > room) {
        call->truncated = true;
        length = room;
    }
    buffer_append(to, text, length);
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
    json_t *response = json_pack(
        "{s:s, s:i, s:o, s:o, s:o, s:b, s:b, s:o, s:o, s:o}", "status", status, "exit_code", exit_code,
        "output", text_of(&call->output), "stdout", text_of(&call->out), "stderr", text_of(&call->err),
        "timed_out", call->timed_out, "truncated", call->truncated, "blocks", blocks, "files", files,
        "accounting", call->accounting ? json_incref(call->accounting) : json_object());
    char *text = json_dumps(response, JSON_COMPACT);
    json_decref(response);
    if (text) {
        http_stream_write(call->stream, text, strlen(text));
        free(text);
    }
    http_stream_end(call->stream);
}

/* The sandbox goes whatever happened: a stateless run leaves nothing behind. */
static void discard_sandbox(run_call *call)
{
    if (call->timer)
        loop_timer_cancel(call->timer);
    call->timer = NULL;
    if (call->k) {
        kernel *k = call->k;
        call->k = NULL;
        manager_delete(k);
    }
}

static void run_on_end(void *arg)
{
    run_call *call = arg;
    call->execution = NULL;
    if (call->stream)
        respond(call);
    discard_sandbox(call);
}

static const execution_sink run_sink = {run_on_event, run_on_end};

static void on_give_up(void *arg)
{
    run_call *call = arg;
    call->timer = NULL;
    execution *e = call->execution;
    call->execution = NULL;
    execution_abandon(e);
    respond(call);
    discard_sandbox(call);
}

static void on_run_timeout(void *arg)
{
    run_call *call = arg;
    call->timer = NULL;
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

static void run_on_closed(void *arg, bool completed)
{
    run_call *call = arg;
    call->stream = NULL;
    if (call->execution) {
        execution_abandon(call->execution);
        call->execution = NULL;
    }
    discard_sandbox(call);
    free_run(call);
}

/* ---- the request ---- */

static bool is_language(const char *language)
{
    return strcmp(language, "python") == 0 || strcmp(language, "bash") == 0 ||
           strcmp(language, "sh") == 0 || strcmp(language, "shell") == 0;
}

/* Builds [{"language", "code"}] from `code`+`language` or `code_blocks`; NULL after a 400. */
static json_t *blocks_from(http_request *request, json_t *body)
{
    const char *language = "python", *code = NULL;
    json_t *listed = json_object_get(body, "code_blocks");
    if (!v1_optional_string(request, body, "language", &language) ||
        !v1_optional_string(request, body, "code", &code))
        return NULL;
    if ((code != NULL) == (listed != NULL && !json_is_null(listed))) {
        http_respond_error(request, 400, "give either 'code' (with 'language') or 'code_blocks'");
        return NULL;
    }
    json_t *blocks = json_array();
    if (code) {
        listed = NULL;
        if (!is_language(language)) {
            http_respond_error(request, 400, "language '%s' is not available: use python, bash or sh", language);
            json_decref(blocks);
            return NULL;
        }
        json_array_append_new(blocks, json_pack("{s:s, s:s}", "language", language, "code", code));
        return blocks;
    }
    if (!json_is_array(listed) || json_array_size(listed) == 0) {
        http_respond_error(request, 400, "'code_blocks' must be a non-empty array of {\"language\", \"code\"}");
        json_decref(blocks);
        return NULL;
    }
    size_t i;
    json_t *block;
    json_array_foreach(listed, i, block)
    {
        json_t *lang = json_object_get(block, "language"), *text = json_object_get(block, "code");
        const char *name = lang ? json_string_value(lang) : language;
        if (!json_is_object(block) || !json_is_string(text) || !name || !is_language(name)) {
            http_respond_error(request, 400, "'code_blocks[%zu]' must be {\"language\": python|bash|sh, "
                               "\"code\": string}", i);
            json_decref(blocks);
            return NULL;
        }
        json_array_append_new(blocks, json_pack("{s:s, s:O}", "language",
                                                strcmp(name, "shell") == 0 ? "bash" : name, "code", text));
    }
    return blocks;
}

static bool valid_paths(http_request *request, json_t *files, json_t *fetch)
{
    const char *path;
    json_t *value;
    if (files && !json_is_null(files)) {
        if (!json_is_object(files)) {
            http_respond_error(request, 400, "'files' must be an object of path → base64 content");
            return false;
        }
        json_object_foreach(files, path, value)
        {
            if (!json_is_string(value)) {
                http_respond_error(request, 400, "'files.%s' must be a base64 string", path);
                return false;
            }
        }
    }
    if (fetch && !json_is_null(fetch)) {
        size_t i;
        if (!json_is_array(fetch)) {
            http_respond_error(request, 400, "'fetch_files' must be an array of paths");
            return false;
        }
        json_array_foreach(fetch, i, value)
        {
            if (!json_is_string(value)) {
                http_respond_error(request, 400, "'fetch_files[%zu]' must be a string", i);
                return false;
            }
        }
    }
    return true;
}

/* The runner's call, its argument a JSON text inside a Python string literal: a JSON string
   (ASCII-only) is also a valid Python literal. */
static char *runner_code(json_t *blocks, json_t *files, json_t *fetch, const char *stdin_text)
{
    json_t *plan = json_pack("{s:O, s:O, s:O, s:s}", "blocks", blocks, "files",
                             files && json_is_object(files) ? files : json_object(), "fetch_files",
                             fetch && json_is_array(fetch) ? fetch : json_array(), "stdin",
                             stdin_text ? stdin_text : "");
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

void v1_run(http_request *request)
{
    static const char *const fields[] = {"language", "code", "code_blocks", "files", "fetch_files",
                                         "timeout_s", "max_output", "memory_mb", "stdin", NULL};
    json_t *body = v1_parse_body(request, fields);
    if (!body)
        return;
    int timeout_s = DEFAULT_TIMEOUT_S, max_output = DEFAULT_MAX_OUTPUT, memory_mb = 0;
    const char *stdin_text = NULL;
    json_t *blocks = NULL;
    json_t *files = json_object_get(body, "files"), *fetch = json_object_get(body, "fetch_files");
    if (!v1_optional_int(request, body, "timeout_s", 1, &timeout_s) ||
        !v1_optional_int(request, body, "max_output", 0, &max_output) ||
        !v1_optional_int(request, body, "memory_mb", 16, &memory_mb) ||
        !v1_optional_string(request, body, "stdin", &stdin_text) ||
        !valid_paths(request, files, fetch) || !(blocks = blocks_from(request, body))) {
        json_decref(body);
        return;
    }
    json_t *limits = json_object();
    if (memory_mb > 0)
        json_object_set_new(limits, "memory", json_sprintf("%dM", memory_mb));
    int status;
    char why[512];
    kernel *k = manager_create(manager_default_kernel(), NULL, limits, NULL, &status, why, sizeof why);
    json_decref(limits);
    if (!k) {
        http_respond_error(request, status, "%s", why);
        json_decref(blocks);
        json_decref(body);
        return;
    }
    run_call *call = calloc(1, sizeof *call);
    if (!call)
        die("out of memory");
    call->k = k;
    call->timeout_s = timeout_s;
    call->max_output = max_output;
    call->stream = http_respond_stream(request, 200, "application/json", run_on_closed, call);
    char *code = runner_code(blocks, files, fetch, stdin_text);
    json_decref(blocks);
    json_decref(body);
    call->timer = loop_timer_add((int64_t)timeout_s * 1000, on_run_timeout, call);
    call->execution = (execution *)1; /* until it may have ended inside execution_start */
    execution_request run = {.code = code, .silent = true};
    execution *e = execution_start(box_of(k), k, &run, &run_sink, call);
    if (call->execution)
        call->execution = e;
    free(code);
}
