#include "api/e2b.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/envd.h"
#include "api/envd_access.h"
#include "api/envd_files.h"
#include "api/request.h"
#include "api/v1_contexts.h"
#include "api/v1_execute.h"
#include "api/errors.h"
#include "api/v1_files.h"
#include "api/v1_ready.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/text.h"
#include "http/url.h"
#include "model/box.h"
#include "kernel/kernelspec.h"
#include "model/manager.h"
#include "model/pause.h"
#include "model/ttl.h"

/* The SDK gates features on the envd version a sandbox reports; 0.6.4 is its last gate, and
   each file feature up to it is served: 0.4.0 and later take no default user (so no
   "Authorization: Basic user:" on every call), 0.5.7 uploads as application/octet-stream (and
   gzip-compressed), 0.6.2 file metadata (X-Metadata-* headers), 0.6.3 watchDir's includeEntry,
   0.6.4 watchDir's allowNetworkMounts (taken: a sandbox has no network mounts). The process
   gates (0.3.0 stdin: false, 0.5.2 closeStdin) were open before; docs/api.md lists them all. */
#define ENVD_VERSION "0.6.4"
#define CLIENT_ID "cellbox"
#define INTERPRETER_PORT "49999"
#define DEFAULT_TIMEOUT_S 300 /* E2B's default sandbox lifetime */
#define MAX_SEGMENTS 6

/* ---- helpers ---- */

/* Percent-decoding in place (url.h).
   False when the result holds a NUL or control byte: it would name another key or file. */
static bool url_decode(char *text)
{
    return !text_has_control_bytes(text, url_percent_decode(text));
}

/* ---- the control plane: sandboxes ---- */

/* E2B names its sandboxes' states running and paused; a dead cellbox sandbox is neither. */
static const char *e2b_state(box *b)
{
    box_state state = box_get_state(b);
    return state == BOX_RUNNING ? "running" : state == BOX_PAUSED ? "paused" : NULL;
}

/* What the SDK needs to reach a sandbox. envdAccessToken is the sandbox's own access token
   (api/envd_access.h): the SDK sends it as X-Access-Token on every call into the sandbox and
   signs file URLs with it. trafficAccessToken is the key the request came with (it was
   admitted, so it is the daemon's token): the SDK sends it to the interpreter's contexts, which
   carry no other credential. */
static json_t *connection_model(http_request *request, box *b)
{
    const char *key = http_header(request, "X-API-Key");
    char token[ENVD_ACCESS_TOKEN_SIZE];
    envd_access_token(b, token);
    json_t *model = json_pack("{s:s, s:s, s:s, s:s, s:n}", "sandboxID", box_id(b), "templateID",
                              kernel_spec(box_default_kernel(b))->name, "clientID", CLIENT_ID,
                              "envdVersion", ENVD_VERSION, "domain");
    json_object_set_new(model, "envdAccessToken", json_string(token));
    json_object_set_new(model, "trafficAccessToken", key ? json_string(key) : json_null());
    return model;
}

/* ListedSandbox (and, with the tokens, SandboxDetail) from cellbox's own model. */
static json_t *listed_model(box *b)
{
    json_t *native = box_model(b);
    const sandbox_limits *limits = box_limits(b);
    json_t *model = json_pack(
        "{s:s, s:s, s:s, s:s, s:O, s:O, s:i, s:I, s:I, s:O, s:s, s:s}", "sandboxID", box_id(b),
        "templateID", json_string_value(json_object_get(native, "template")), "alias",
        json_string_value(json_object_get(native, "template")), "clientID", CLIENT_ID, "startedAt",
        json_object_get(native, "started_at"), "endAt", json_object_get(native, "ends_at"),
        "cpuCount", limits->cpus > 0 ? (int)ceil(limits->cpus) : 1, "memoryMB",
        (json_int_t)(limits->memory_bytes >> 20), "diskSizeMB",
        (json_int_t)(limits->disk_bytes >> 20), "metadata", json_object_get(native, "metadata"),
        "state", e2b_state(b) ? e2b_state(b) : "dead", "envdVersion", ENVD_VERSION);
    json_decref(native);
    return model;
}

/* E2B's default templates name what cellbox's default kernelspec is. */
static const char *kernelspec_for_template(const char *template_id)
{
    if (!template_id || strcmp(template_id, "base") == 0 ||
        strcmp(template_id, "code-interpreter-v1") == 0 ||
        strcmp(template_id, "code-interpreter") == 0)
        return manager_default_kernel();
    return kernelspec_find(template_id) ? template_id : NULL;
}

/* POST /sandboxes {templateID, timeout, metadata, envVars, allow_internet_access, ...}: fields
   cellbox has no use for (mcp, network rules, autoPause, volumes) are ignored. */
static void create_sandbox(http_request *request)
{
    json_t *body = request_parse_body(request, REQUEST_ANY_FIELD); /* unlike /v1 */
    if (!body)
        return;
    const char *template_id = NULL;
    int timeout_s = DEFAULT_TIMEOUT_S;
    json_t *env = NULL, *metadata = NULL;
    bool internet = false;
    json_t *network = NULL;
    if (!request_optional_string(request, body, "templateID", &template_id) ||
        !request_optional_int(request, body, "timeout", 0, &timeout_s) ||
        !request_optional_string_map(request, body, "envVars", &env) ||
        !request_optional_string_map(request, body, "metadata", &metadata) ||
        !request_optional_bool(request, body, "allow_internet_access", &internet)) {
        json_decref(body);
        return;
    }
    if (json_is_boolean(json_object_get(body, "allow_internet_access")))
        network = json_boolean(internet);
    const char *spec = kernelspec_for_template(template_id);
    failure_kind failure;
    char why[512];
    kernel *k = spec ? manager_create(spec, env, NULL, network, &failure, why, sizeof why) : NULL;
    json_decref(network);
    if (!spec)
        errors_respond_e2b(request, 404,
                      "template '%.*s' does not exist: use one of cellbox's "
                      "kernelspecs (GET /v1/templates), or 'base' for the default",
                      text_utf8_prefix(template_id, 200), template_id);
    else if (!k)
        errors_respond_e2b(request, errors_status_of_failure(failure), "%s", why);
    if (!k) {
        json_decref(body);
        return;
    }
    box *b = box_of(k);
    box_configure(b, metadata, env, timeout_s);
    json_decref(body);
    /* answered once it can run code and take files: the SDK calls into it at once */
    v1_respond_when_ready(request, k, connection_model(request, b));
}

/* ?metadata=k1%3Dv1%26k2%3Dv2 (one value, itself URL-encoded pairs) → {k1: v1, k2: v2}. */
static json_t *metadata_filter(http_request *request)
{
    json_t *filter = json_object();
    const char *query = http_query(request, "metadata");
    if (!query)
        return filter;
    char *copy = strdup(query);
    if (!copy)
        die("out of memory");
    for (char *save = NULL, *pair = strtok_r(copy, "&", &save); pair;
         pair = strtok_r(NULL, "&", &save)) {
        char *equals = strchr(pair, '=');
        if (!equals)
            continue;
        *equals = '\0';
        if (!url_decode(pair) || !url_decode(equals + 1))
            continue; /* no sandbox's metadata holds a control byte: nothing would match */
        json_t *key = text_json_string(pair);
        json_object_set_new(filter, json_string_value(key), text_json_string(equals + 1));
        json_decref(key);
    }
    free(copy);
    return filter;
}

/* Is `state` among ?state=running,paused (all of them when not given)? */
static bool state_wanted(http_request *request, const char *state)
{
    const char *wanted = http_query(request, "state");
    if (!wanted || !*wanted)
        return true;
    size_t n = strlen(state);
    for (const char *at = wanted; *at; at += strcspn(at, ","), at += *at == ',') {
        if (strncmp(at, state, n) == 0 && (at[n] == ',' || at[n] == '\0'))
            return true;
    }
    return false;
}

static void list_sandboxes(http_request *request)
{
    json_t *filter = metadata_filter(request);
    json_t *list = json_array();
    for (size_t i = 0; i < manager_count(); i++) {
        box *b = box_of(manager_at(i));
        if (e2b_state(b) && state_wanted(request, e2b_state(b)) && box_matches(b, NULL, filter))
            json_array_append_new(list, listed_model(b));
    }
    json_decref(filter);
    http_respond_json(request, 200, list);
}

static void get_sandbox(http_request *request, box *b)
{
    json_t *model = listed_model(b);
    json_t *connection = connection_model(request, b);
    json_object_set(model, "envdAccessToken", json_object_get(connection, "envdAccessToken"));
    json_object_set(model, "domain", json_null());
    json_decref(connection);
    http_respond_json(request, 200, model);
}

/* A body's timeout in seconds: -1 when absent, -2 after answering 400. */
static int body_timeout(http_request *request, json_t *body)
{
    int timeout_s = -1;
    if (!request_optional_int(request, body, "timeout", 0, &timeout_s))
        return -2;
    return timeout_s;
}

/* POST /sandboxes/{id}/connect (and the older /resume): resumes a paused sandbox; 201 when it
   was resumed, 200 when it was running. */
static void connect_sandbox(http_request *request, box *b)
{
    json_t *body = request_parse_body(request, REQUEST_ANY_FIELD);
    int timeout_s = body ? body_timeout(request, body) : -2;
    json_decref(body);
    if (timeout_s == -2)
        return;
    char why[256];
    int status = 200;
    if (box_get_state(b) == BOX_DEAD) {
        errors_respond_e2b(request, 409, "sandbox %s is dead: %s", box_id(b),
                      kernel_death_reason(box_default_kernel(b)));
        return;
    }
    if (box_get_state(b) == BOX_PAUSED) {
        if (box_resume(b, why, sizeof why) < 0) {
            errors_respond_e2b(request, 500, "%s", why);
            return;
        }
        status = 201;
    }
    if (timeout_s >= 0)
        box_set_timeout(b, timeout_s);
    http_respond_json(request, status, connection_model(request, b));
}

static void pause_sandbox(http_request *request, box *b)
{
    char why[256];
    if (box_get_state(b) != BOX_RUNNING)
        errors_respond_e2b(request, 409, "sandbox %s is %s, not running", box_id(b),
                      box_state_name(box_get_state(b)));
    else if (box_pause(b, why, sizeof why) < 0)
        errors_respond_e2b(request, 500, "%s", why);
    else
        http_respond(request, 204, NULL, "", 0);
}

static void set_timeout(http_request *request, box *b)
{
    json_t *body = request_parse_body(request, REQUEST_ANY_FIELD);
    int timeout_s = body ? body_timeout(request, body) : -2;
    json_decref(body);
    if (timeout_s == -1)
        errors_respond_e2b(request, 400, "'timeout' is required: seconds from now");
    else if (timeout_s >= 0) {
        box_set_timeout(b, timeout_s);
        http_respond(request, 204, NULL, "", 0);
    }
}

/* One sample of what E2B's metrics report, from cellbox's usage counters. */
static void get_metrics(http_request *request, box *b)
{
    json_t *native = box_model(b);
    json_t *usage = json_object_get(native, "usage");
    const sandbox_limits *limits = box_limits(b);
    char now[ISO_TIME_BUFFER];
    clock_format_iso(clock_wall_us(), now);
    json_t *sample = json_pack("{s:s, s:i, s:f, s:O, s:I, s:O, s:I}", "timestamp", now, "cpuCount",
                               limits->cpus > 0 ? (int)ceil(limits->cpus) : 1, "cpuUsedPct", 0.0,
                               "memUsed", json_object_get(usage, "memory_bytes"), "memTotal",
                               (json_int_t)limits->memory_bytes, "diskUsed",
                               json_object_get(usage, "disk_bytes"), "diskTotal",
                               (json_int_t)limits->disk_bytes);
    json_decref(native);
    http_respond_json(request, 200, json_pack("[o]", sample));
}

static void route_sandbox(http_request *request, box *b, const char *action)
{
    if (!action) {
        if (http_method_is(request, "GET"))
            get_sandbox(request, b);
        else if (http_method_is(request, "DELETE")) {
            manager_delete(box_default_kernel(b));
            http_respond(request, 204, NULL, "", 0);
        } else
            errors_respond_e2b_method_not_allowed(request, "GET, DELETE");
    } else if (strcmp(action, "metrics") == 0) {
        if (http_method_is(request, "GET"))
            get_metrics(request, b);
        else
            errors_respond_e2b_method_not_allowed(request, "GET");
    } else if (!http_method_is(request, "POST")) {
        errors_respond_e2b_method_not_allowed(request, "POST");
    } else if (strcmp(action, "timeout") == 0) {
        set_timeout(request, b);
    } else if (strcmp(action, "pause") == 0) {
        pause_sandbox(request, b);
    } else if (strcmp(action, "connect") == 0 || strcmp(action, "resume") == 0) {
        connect_sandbox(request, b);
    } else {
        errors_respond_e2b(request, 404,
                      "no such sandbox endpoint: %s (cellbox serves timeout, pause, "
                      "connect, resume and metrics)",
                      action);
    }
}

static void route_control_plane(http_request *request)
{
    char copy[2048];
    char *s[MAX_SEGMENTS];
    int n = url_split_path(http_path(request), copy, sizeof copy, s, MAX_SEGMENTS);
    char **rest = s;
    if (n > 0 && strcmp(s[0], "v2") == 0) { /* /v2/sandboxes... is the same resource */
        rest++;
        n--;
    }
    if (n == 1) {
        if (http_method_is(request, "GET"))
            list_sandboxes(request);
        else if (http_method_is(request, "POST"))
            create_sandbox(request);
        else
            errors_respond_e2b_method_not_allowed(request, "GET, POST");
        return;
    }
    box *b = n <= 3 ? box_find(rest[1]) : NULL;
    if (n > 3)
        errors_respond_e2b(request, 404, "no such endpoint: %s", http_path(request));
    else if (!b)
        errors_respond_e2b(request, 404, "sandbox %s does not exist", rest[1]);
    else
        route_sandbox(request, b, n == 3 ? rest[2] : NULL);
}

/* ---- port 49999: the code interpreter ---- */

static void route_interpreter(http_request *request, box *b, char **s, int n)
{
    if (n == 1 && strcmp(s[0], "health") == 0) {
        http_respond(request, 200, "text/plain", "OK", 2);
    } else if (n == 1 && strcmp(s[0], "execute") == 0) {
        if (!http_method_is(request, "POST"))
            errors_respond_e2b_method_not_allowed(request, "POST");
        else if (v1_require_running(request, b))
            v1_execute(request, b, true); /* E2B's body and stream already, colours too */
    } else if (n == 1 && strcmp(s[0], "contexts") == 0) {
        if (http_method_is(request, "GET"))
            http_respond_json(request, 200, box_contexts_model(b));
        else if (!http_method_is(request, "POST"))
            errors_respond_e2b_method_not_allowed(request, "GET, POST");
        else if (v1_require_running(request, b))
            v1_create_context(request, b);
    } else if (n <= 3 && strcmp(s[0], "contexts") == 0) {
        v1_route_context(request, b, s[1], n == 3 ? s[2] : NULL);
    } else {
        errors_respond_e2b(request, 404,
                      "no such code interpreter endpoint: %s (cellbox serves "
                      "/execute, /contexts and /health)",
                      http_path(request));
    }
}

/* ---- dispatch ---- */

static bool is_control_plane_path(const char *path)
{
    if (strncmp(path, "/v2/", 4) == 0)
        path += 3;
    return strncmp(path, "/sandboxes", 10) == 0 && (path[10] == '\0' || path[10] == '/');
}

/* A signed file URL (uploadUrl, downloadUrl) reaches the daemon with no E2B header: envd's
   /files with ?signature=, whose signature names the sandbox. */
static bool is_signed_file_url(const http_request *request)
{
    return !http_header(request, "E2b-Sandbox-Id") && strcmp(http_path(request), "/files") == 0 &&
           envd_access_is_signed(request);
}

bool e2b_owns(http_request *request)
{
    return http_header(request, "E2b-Sandbox-Id") || is_control_plane_path(http_path(request)) ||
           is_signed_file_url(request);
}

bool e2b_streams_body(const http_request *request)
{
    const char *port = http_header(request, "E2b-Sandbox-Port");
    bool to_envd = is_signed_file_url(request) || (http_header(request, "E2b-Sandbox-Id") && port &&
                                                    strcmp(port, ENVD_PORT) == 0);
    return to_envd && envd_streams_body(request);
}

/* A call into a sandbox, as E2B's proxy routes it: an unknown sandbox is 502, which the SDK
   reads as "not running" (Sandbox.isRunning). */
static void route_into_sandbox(http_request *request)
{
    const char *id = http_header(request, "E2b-Sandbox-Id");
    const char *port = http_header(request, "E2b-Sandbox-Port");
    box *b = box_find(id);
    char copy[2048];
    char *s[MAX_SEGMENTS];
    int n = url_split_path(http_path(request), copy, sizeof copy, s, MAX_SEGMENTS);
    bool interpreter = port && strcmp(port, INTERPRETER_PORT) == 0;
    if (!b) {
        errors_respond_e2b(request, 502, "sandbox %s was not found (it was killed, or timed out)", id);
    } else if (!interpreter && !(port && strcmp(port, ENVD_PORT) == 0)) {
        errors_respond_e2b(request, 502,
                      "port %s of sandbox %s is not served: cellbox answers "
                      "E2b-Sandbox-Port " INTERPRETER_PORT " (code interpreter) and " ENVD_PORT
                      " (envd)",
                      port ? port : "(none)", id);
    } else if (n < 1 || n > 3) {
        errors_respond_e2b(request, 404, "no such endpoint: %s", http_path(request));
    } else {
        interpreter ? route_interpreter(request, b, s, n) : envd_route(request, b, s, n);
    }
}

void e2b_dispatch(http_request *request)
{
    if (http_header(request, "E2b-Sandbox-Id"))
        route_into_sandbox(request);
    else if (is_signed_file_url(request))
        envd_files_route(request, NULL);
    else
        route_control_plane(request);
}
