#include "api/v1_template_build.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "api/errors.h"
#include "api/request.h"
#include "common/buffer.h"
#include "common/fs.h"
#include "common/log.h"
#include "http/form.h"
#include "model/dockerfile.h"
#include "model/template_build.h"
#include "model/template_files.h"
#include "sandbox/network.h"

#define MAX_JSON_BODY (DOCKERFILE_MAX_BYTES + (64 << 10))
#define MAX_FIELD_BYTES (DOCKERFILE_MAX_BYTES + 1024)
#define MAX_CONTEXT_BYTES (4LL << 30)
#define MAX_STEP_TIMEOUT_S 3600
#define MAX_POOL_SIZE 64

/* One POST /v1/templates, from its first byte to the build's last event. */
typedef struct build_request {
    http_request *request;
    bool form_body;
    http_form *form;
    buffer json_text; /* a JSON body */
    json_t *fields;   /* the form's fields as a JSON object (strings) */
    char part[64];    /* the form part being read */
    buffer part_text;
    char context_tar[64]; /* /var/tmp/cellbox-context-XXXXXX.tar while it arrives */
    int context_fd;
    long long context_bytes;
    char context_dir[64]; /* where it is extracted */
    int failure_status;   /* noted while the body arrives, answered at its end */
    char failure[1024];
    template_build *build;
    http_stream *stream;
} build_request;

static void note_failure(build_request *r, int status, const char *message)
{
    if (r->failure_status)
        return;
    r->failure_status = status;
    snprintf(r->failure, sizeof r->failure, "%s", message);
}

static void remove_context(build_request *r)
{
    if (r->context_fd >= 0)
        close(r->context_fd);
    r->context_fd = -1;
    if (r->context_tar[0])
        unlink(r->context_tar);
    r->context_tar[0] = '\0';
    if (r->context_dir[0])
        fs_remove_tree(r->context_dir);
    r->context_dir[0] = '\0';
}

static void free_build_request(build_request *r)
{
    remove_context(r);
    if (r->form)
        http_form_close(r->form);
    buffer_free(&r->json_text);
    buffer_free(&r->part_text);
    json_decref(r->fields);
    free(r);
}

/* ---- the body ---- */

static void finish_part(build_request *r)
{
    if (!r->part[0] || strcmp(r->part, "context") == 0) {
        r->part[0] = '\0';
        return;
    }
    json_object_set_new(r->fields, r->part,
                        json_stringn(buffer_head(&r->part_text) ? buffer_head(&r->part_text) : "",
                                     buffer_size(&r->part_text)));
    buffer_truncate(&r->part_text, 0);
    r->part[0] = '\0';
}

static int on_part(void *arg, const char *name, const char *filename)
{
    build_request *r = arg;
    (void)filename;
    finish_part(r);
    snprintf(r->part, sizeof r->part, "%s", name);
    if (strcmp(name, "context") != 0)
        return 0;
    if (r->context_fd >= 0) {
        note_failure(r, 400, "the form has two `context` parts: send one tar of the context");
        return -1;
    }
    snprintf(r->context_tar, sizeof r->context_tar, "/var/tmp/cellbox-context-XXXXXX");
    r->context_fd = mkstemp(r->context_tar);
    if (r->context_fd < 0) {
        r->context_tar[0] = '\0';
        note_failure(r, 500, "cannot store the build context on the daemon's disk");
        return -1;
    }
    return 0;
}

static int on_part_data(void *arg, const char *data, size_t length)
{
    build_request *r = arg;
    if (strcmp(r->part, "context") == 0) {
        r->context_bytes += (long long)length;
        if (r->context_bytes > MAX_CONTEXT_BYTES) {
            note_failure(r, 413,
                         "the build context is larger than 4 GiB: leave out what the "
                         "Dockerfile does not COPY");
            return -1;
        }
        if (write(r->context_fd, data, length) != (ssize_t)length) {
            note_failure(r, 507, "cannot store the build context: the daemon's disk is full");
            return -1;
        }
        return 0;
    }
    if (buffer_size(&r->part_text) + length > MAX_FIELD_BYTES) {
        note_failure(r, 413, "a form field is larger than 1 MiB");
        return -1;
    }
    buffer_append(&r->part_text, data, length);
    return 0;
}

static const http_form_callbacks form_callbacks = {on_part, on_part_data};

static int receive_data(void *arg, const char *data, size_t length)
{
    build_request *r = arg;
    if (r->failure_status)
        return 0; /* the rest is discarded; the failure is answered at the end */
    if (r->form_body) {
        if (http_form_feed(r->form, data, length) < 0)
            note_failure(r, 400, "the multipart form is malformed");
        return 0;
    }
    if (buffer_size(&r->json_text) + length > MAX_JSON_BODY) {
        note_failure(r, 413,
                     "the JSON body is larger than 1 MiB: send the context as a tar in a "
                     "multipart form");
        return 0;
    }
    buffer_append(&r->json_text, data, length);
    return 0;
}

/* ---- the fields ---- */

/* A form field holds text: JSON values (numbers, booleans, objects) are read from it. */
static json_t *form_value(json_t *text, bool json_valued)
{
    const char *value = json_string_value(text);
    if (!json_valued || !value)
        return json_incref(text);
    json_t *parsed = json_loads(value, JSON_DECODE_ANY, NULL);
    return parsed ? parsed : json_incref(text);
}

static json_t *body_object(build_request *r)
{
    static const char *const json_fields[] = {"pool_size",  "replace",        "no_cache", "network",
                                              "build_args", "step_timeout_s", NULL};
    if (r->form_body) {
        json_t *object = json_object();
        const char *key;
        json_t *value;
        json_object_foreach(r->fields, key, value)
        {
            bool json_valued = false;
            for (int i = 0; json_fields[i]; i++)
                json_valued |= strcmp(key, json_fields[i]) == 0;
            json_object_set_new(object, key, form_value(value, json_valued));
        }
        return object;
    }
    json_t *object =
        json_loadb(buffer_head(&r->json_text) ? buffer_head(&r->json_text) : "{}",
                   buffer_size(&r->json_text) ? buffer_size(&r->json_text) : 2, 0, NULL);
    if (!json_is_object(object)) {
        json_decref(object);
        http_respond_error(r->request, 400,
                           "the body must be a JSON object {\"name\", \"dockerfile\", ...} or a "
                           "multipart form with those fields and a `context` tar");
        return NULL;
    }
    return object;
}

static bool check_fields(http_request *request, json_t *body)
{
    static const char *const allowed[] = {"name",           "dockerfile", "preload", "pool_size",
                                          "replace",        "no_cache",   "network", "build_args",
                                          "step_timeout_s", NULL};
    const char *key;
    json_t *value;
    json_object_foreach(body, key, value)
    {
        bool known = false;
        for (int i = 0; allowed[i]; i++)
            known |= strcmp(key, allowed[i]) == 0;
        if (!known) {
            http_respond_error(request, 400,
                               "unknown field \"%s\": a build takes name, dockerfile, preload, "
                               "pool_size, replace, no_cache, network, build_args, "
                               "step_timeout_s (and a `context` part in a form)",
                               key);
            return false;
        }
    }
    if (!json_is_string(json_object_get(body, "name")) ||
        !json_is_string(json_object_get(body, "dockerfile"))) {
        http_respond_error(request, 400,
                           "\"name\" (the template's) and \"dockerfile\" (its text) are required "
                           "strings");
        return false;
    }
    return true;
}

static bool string_array(json_t *value)
{
    if (!value || json_is_null(value))
        return true;
    if (!json_is_array(value))
        return false;
    size_t i;
    json_t *entry;
    json_array_foreach(value, i, entry) if (!json_is_string(entry)) return false;
    return true;
}

/* "network": false, true, or {"allowOut": [...], "denyOut": [...]}. */
static bool read_network(http_request *request, json_t *body, template_build_request *out)
{
    json_t *network = json_object_get(body, "network");
    if (!network || json_is_null(network))
        return true;
    if (json_is_boolean(network)) {
        out->network = json_is_true(network);
        return true;
    }
    json_t *allow = json_object_get(network, "allowOut"),
           *deny = json_object_get(network, "denyOut");
    if (!json_is_object(network) || !string_array(allow) || !string_array(deny)) {
        http_respond_error(request, 400,
                           "\"network\" is false, true, or {\"allowOut\": [...], \"denyOut\": "
                           "[...]} with IP addresses, CIDRs or domain names");
        return false;
    }
    out->network = true;
    out->allow_out = json_is_array(allow) ? allow : NULL;
    out->deny_out = json_is_array(deny) ? deny : NULL;
    return true;
}

static bool read_request(http_request *request, json_t *body, template_build_request *out)
{
    *out = (template_build_request){.pool_size = -1};
    out->name = json_string_value(json_object_get(body, "name"));
    out->dockerfile = json_string_value(json_object_get(body, "dockerfile"));
    out->network =
        network_ready(); /* a build installs packages: network when the daemon gives it */
    json_t *build_args = NULL;
    int pool_size = -1, step_timeout_s = 0;
    if (!request_optional_string(request, body, "preload", &out->preload) ||
        !request_optional_int(request, body, "pool_size", 0, &pool_size) ||
        !request_optional_int(request, body, "step_timeout_s", 1, &step_timeout_s) ||
        !request_optional_bool(request, body, "replace", &out->replace) ||
        !request_optional_bool(request, body, "no_cache", &out->no_cache) ||
        !request_optional_string_map(request, body, "build_args", &build_args) ||
        !read_network(request, body, out))
        return false;
    if (pool_size > MAX_POOL_SIZE || step_timeout_s > MAX_STEP_TIMEOUT_S) {
        http_respond_error(request, 400, "pool_size is at most %d and step_timeout_s at most %d",
                           MAX_POOL_SIZE, MAX_STEP_TIMEOUT_S);
        return false;
    }
    out->pool_size = pool_size;
    out->step_timeout_seconds = step_timeout_s;
    out->build_args = build_args;
    return true;
}

/* ---- the stream ---- */

static void on_build_event(void *arg, json_t *event, bool last)
{
    build_request *r = arg;
    http_stream_write_line(r->stream, event);
    if (!last)
        return;
    r->build = NULL;
    remove_context(r);
    http_stream_end(r->stream);
}

static void on_stream_closed(void *arg, bool completed)
{
    build_request *r = arg;
    (void)completed;
    if (r->build)
        template_build_abandon(r->build); /* the client went away: nothing is left behind */
    r->build = NULL;
    free_build_request(r);
}

static bool extract_context(build_request *r)
{
    if (r->context_fd < 0)
        return true;
    char why[1024];
    snprintf(r->context_dir, sizeof r->context_dir, "/var/tmp/cellbox-context-XXXXXX");
    if (!mkdtemp(r->context_dir)) {
        r->context_dir[0] = '\0';
        http_respond_error(r->request, 500, "cannot make a directory for the build context: %s",
                           strerror(errno));
        return false;
    }
    if (lseek(r->context_fd, 0, SEEK_SET) < 0 ||
        template_files_extract_context(r->context_fd, r->context_dir, why, sizeof why) < 0) {
        http_respond_error(r->request, 400,
                           "the build context: %s (send it as a tar, optionally gzip-compressed)",
                           why);
        return false;
    }
    close(r->context_fd);
    r->context_fd = -1;
    unlink(r->context_tar);
    r->context_tar[0] = '\0';
    return true;
}

static void start_build(build_request *r)
{
    http_request *request = r->request;
    json_t *body = body_object(r);
    template_build_request build;
    if (!body || !check_fields(request, body) || !read_request(request, body, &build) ||
        !extract_context(r)) {
        json_decref(body);
        free_build_request(r);
        return;
    }
    build.context_dir = r->context_dir[0] ? r->context_dir : NULL;
    failure_kind failure;
    char why[2048];
    r->build = template_build_start(&build, on_build_event, r, &failure, why, sizeof why);
    json_decref(body); /* the build copied what it keeps */
    if (!r->build) {
        http_respond_error(request, errors_status_of_failure(failure), "%s", why);
        free_build_request(r);
        return;
    }
    r->stream = http_respond_stream(request, 200, "application/x-ndjson", on_stream_closed, r);
}

static void receive_end(http_request *request, void *arg)
{
    build_request *r = arg;
    if (r->form_body) {
        finish_part(r);
        int complete = http_form_close(r->form);
        r->form = NULL;
        if (complete < 0)
            note_failure(r, 400,
                         "the multipart form is cut short: it must end with its closing "
                         "boundary");
    }
    if (r->failure_status) {
        http_respond_error(request, r->failure_status, "%s", r->failure);
        free_build_request(r);
        return;
    }
    start_build(r);
}

static void receive_abort(void *arg)
{
    free_build_request(arg);
}

static const http_body_receiver build_receiver = {receive_data, receive_end, receive_abort};

bool v1_template_build_streams_body(const char *method, const char *path)
{
    return strcmp(method, "POST") == 0 &&
           (strcmp(path, "/v1/templates") == 0 || strcmp(path, "/v1/templates/") == 0);
}

void v1_template_build(http_request *request)
{
    build_request *r = calloc(1, sizeof *r);
    if (!r)
        die("out of memory");
    r->request = request;
    r->context_fd = -1;
    r->fields = json_object();
    const char *type = http_header(request, "Content-Type");
    r->form_body = type && strncasecmp(type, "multipart/form-data", 19) == 0;
    if (r->form_body && !(r->form = http_form_open(request, &form_callbacks, r))) {
        http_respond_error(request, 400,
                           "the multipart form names no boundary in its "
                           "Content-Type");
        free_build_request(r);
        return;
    }
    http_receive_body(request, &build_receiver, r);
}
