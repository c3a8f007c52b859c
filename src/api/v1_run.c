/* POST /v1/run — checks the request and answers with what model/stateless_run.c reports. */
#include "api/v1_run.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/errors.h"
#include "api/request.h"
#include "common/log.h"
#include "model/stateless_run.h"

#define DEFAULT_TIMEOUT_S 30
#define DEFAULT_MAX_OUTPUT (1 << 20)

/* ---- the request ---- */

/* A block's language as the runner (cellbox_kernel/script.py) names it, or NULL when this
   daemon cannot run it: python, bash and sh always; javascript and typescript where Node is
   installed (their kernelspecs exist), r where R is. */
static const char *runner_language(const char *language)
{
    static const struct {
        const char *alias, *language, *needs_program;
    } names[] = {
        {"python", "python", NULL},         {"python3", "python", NULL},
        {"bash", "bash", NULL},             {"shell", "bash", NULL},
        {"sh", "sh", NULL},                 {"javascript", "javascript", "/usr/bin/node"},
        {"js", "javascript", "/usr/bin/node"}, {"typescript", "typescript", "/usr/bin/node"},
        {"ts", "typescript", "/usr/bin/node"}, {"r", "r", "/usr/bin/Rscript"},
        {"R", "r", "/usr/bin/Rscript"},
    };
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (strcmp(language, names[i].alias) == 0)
            return !names[i].needs_program || access(names[i].needs_program, X_OK) == 0
                       ? names[i].language
                       : NULL;
    return NULL;
}

#define RUN_LANGUAGES "python, bash, sh, javascript (js), typescript (ts) or r"

/* Builds [{"language", "code"}] from `code`+`language` or `code_blocks`; NULL after a 400. */
static json_t *blocks_from(http_request *request, json_t *body)
{
    const char *language = "python", *code = NULL;
    json_t *listed = json_object_get(body, "code_blocks");
    if (!request_optional_string(request, body, "language", &language) ||
        !request_optional_string(request, body, "code", &code))
        return NULL;
    if ((code != NULL) == (listed != NULL && !json_is_null(listed))) {
        http_respond_error(request, 400, "give either 'code' (with 'language') or 'code_blocks'");
        return NULL;
    }
    json_t *blocks = json_array();
    if (code) {
        listed = NULL;
        if (!runner_language(language)) {
            http_respond_error(request, 400, "language '%s' is not available: use " RUN_LANGUAGES,
                               language);
            json_decref(blocks);
            return NULL;
        }
        json_array_append_new(blocks, json_pack("{s:s, s:s}", "language",
                                                runner_language(language), "code", code));
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
        const char *key;
        json_t *value;
        json_object_foreach(json_is_object(block) ? block : NULL, key, value)
        {
            if (strcmp(key, "language") != 0 && strcmp(key, "code") != 0) {
                http_respond_error(request, 400, "unknown field 'code_blocks[%zu].%s' (known: "
                                   "language, code)", i, key);
                json_decref(blocks);
                return NULL;
            }
        }
        const char *name = lang ? json_string_value(lang) : language;
        if (!json_is_object(block) || !json_is_string(text) || !name || !runner_language(name)) {
            http_respond_error(request, 400, "'code_blocks[%zu]' must be {\"language\": " RUN_LANGUAGES
                               ", \"code\": string}", i);
            json_decref(blocks);
            return NULL;
        }
        json_array_append_new(blocks, json_pack("{s:s, s:O}", "language", runner_language(name),
                                                "code", text));
    }
    return blocks;
}

static bool has_dotdot(const char *path)
{
    for (const char *p = path; (p = strstr(p, "..")); p += 2)
        if ((p == path || p[-1] == '/') && (p[2] == '\0' || p[2] == '/'))
            return true;
    return false;
}

static bool is_base64(const char *text)
{
    size_t n = strlen(text);
    unsigned char *out = malloc(n + 4);
    EVP_ENCODE_CTX *ctx = EVP_ENCODE_CTX_new();
    int length = 0, tail = 0;
    EVP_DecodeInit(ctx);
    bool ok = out && EVP_DecodeUpdate(ctx, out, &length, (const unsigned char *)text, (int)n) >= 0 &&
              EVP_DecodeFinal(ctx, out + length, &tail) >= 0;
    EVP_ENCODE_CTX_free(ctx);
    free(out);
    return ok;
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
            if (!json_is_string(value) || !is_base64(json_string_value(value))) {
                http_respond_error(request, 400, "'files.%s' must be a base64 string", path);
                return false;
            }
            if (!*path || has_dotdot(path)) {
                http_respond_error(request, 400, "'files' path '%s' must not be empty or contain "
                                   "'..'", path);
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

/* The HTTP side of one run: the answer goes out as one JSON document on a held-open response. */
typedef struct run_request {
    http_stream *stream;
    stateless_run *run; /* NULL once answered */
} run_request;

static void on_run_done(void *arg, json_t *answer)
{
    run_request *rr = arg;
    rr->run = NULL;
    http_stream_finish_json(rr->stream, json_incref(answer));
}

static void on_run_closed(void *arg, bool completed)
{
    run_request *rr = arg;
    if (rr->run)
        stateless_run_abandon(rr->run); /* the client went away: the sandbox goes now */
    free(rr);
}

void v1_run(http_request *request)
{
    static const char *const fields[] = {"language", "code", "code_blocks", "files", "fetch_files",
                                         "timeout_s", "max_output", "memory_mb", "stdin", NULL};
    json_t *body = request_parse_body(request, fields);
    if (!body)
        return;
    int timeout_s = DEFAULT_TIMEOUT_S, max_output = DEFAULT_MAX_OUTPUT, memory_mb = 0;
    const char *stdin_text = NULL;
    json_t *blocks = NULL;
    json_t *files = json_object_get(body, "files"), *fetch = json_object_get(body, "fetch_files");
    if (!request_optional_int(request, body, "timeout_s", 1, &timeout_s) ||
        !request_optional_int(request, body, "max_output", 0, &max_output) ||
        !request_optional_int(request, body, "memory_mb", 16, &memory_mb) ||
        !request_optional_string(request, body, "stdin", &stdin_text) ||
        !valid_paths(request, files, fetch) || !(blocks = blocks_from(request, body))) {
        json_decref(body);
        return;
    }
    stateless_run_plan plan = {
        .blocks = blocks,
        .files = files && json_is_object(files) ? files : NULL,
        .fetch_files = fetch && json_is_array(fetch) ? fetch : NULL,
        .stdin_text = stdin_text,
        .timeout_s = timeout_s,
        .max_output = max_output,
        .memory_mb = memory_mb,
    };
    run_request *rr = calloc(1, sizeof *rr);
    if (!rr)
        die("out of memory");
    failure_kind failure;
    char why[512];
    rr->run = stateless_run_start(&plan, on_run_done, rr, &failure, why, sizeof why);
    json_decref(blocks);
    json_decref(body);
    if (!rr->run) {
        http_respond_error(request, errors_status_of_failure(failure), "%s", why);
        free(rr);
        return;
    }
    rr->stream = http_respond_stream(request, 200, "application/json", on_run_closed, rr);
}
