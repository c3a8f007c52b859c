#include "api/e2b.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/e2b_connection.h"
#include "api/e2b_network.h"
#include "api/e2b_snapshots.h"
#include "api/e2b_volumes.h"
#include "api/envd.h"
#include "api/envd_access.h"
#include "api/envd_files.h"
#include "api/request.h"
#include "api/v1_contexts.h"
#include "api/v1_execute.h"
#include "api/errors.h"
#include "api/ports.h"
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
#include "model/snapshots.h"
#include "model/ttl.h"

/* The SDK gates features on the envd version a sandbox reports; 0.6.4 is its last gate, and
   each file feature up to it is served: 0.4.0 and later take no default user (so no
   "Authorization: Basic user:" on every call), 0.5.7 uploads as application/octet-stream (and
   gzip-compressed), 0.6.2 file metadata (X-Metadata-* headers), 0.6.3 watchDir's includeEntry,
   0.6.4 watchDir's allowNetworkMounts (taken: a sandbox has no network mounts). The process
   gates (0.3.0 stdin: false, 0.5.2 closeStdin) were open before; docs/api.md lists them all. */
#define INTERPRETER_PORT "49999"
#define DEFAULT_TIMEOUT_S 300 /* E2B's default sandbox lifetime */
#define MAX_SEGMENTS 6
#define LIST_LIMIT_MAX 100 /* E2B's most (and default) sandboxes on one page of Sandbox.list */

/* ---- helpers ---- */

/* Percent-decoding in place (url.h).
   False when the result holds a NUL or control byte: it would name another key or file. */
static bool url_decode(char *text)
{
    return !text_has_control_bytes(text, url_percent_decode(text));
}

/* ---- the control plane: sandboxes ---- */

/* E2B names its sandboxes' states running and paused; a dead cellbox sandbox is neither. A
   hibernated one is E2B's paused (its state saved, resumed by connect or a call). */
static const char *e2b_state(box *b)
{
    box_state state = box_get_state(b);
    return state == BOX_RUNNING                                ? "running"
           : state == BOX_PAUSED || state == BOX_HIBERNATED ? "paused"
                                                            : NULL;
}

/* The CPUs a sandbox may use, whole: its limit, or the host's when it has none. */
static int cpu_count(const sandbox_limits *limits)
{
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    return limits->cpus > 0 ? (int)ceil(limits->cpus) : online > 0 ? (int)online : 1;
}

/* ListedSandbox (and, with the tokens, SandboxDetail) from cellbox's own model. */
static json_t *listed_model(box *b)
{
    json_t *native = box_model(b);
    const sandbox_limits *limits = box_limits(b);
    json_t *model = json_pack(
        "{s:s, s:s, s:s, s:s, s:O, s:O, s:i, s:I, s:I, s:O, s:s, s:s}", "sandboxID", box_id(b),
        "templateID", json_string_value(json_object_get(native, "template")), "alias",
        json_string_value(json_object_get(native, "template")), "clientID", E2B_CLIENT_ID, "startedAt",
        json_object_get(native, "started_at"), "endAt", json_object_get(native, "ends_at"),
        "cpuCount", cpu_count(limits), "memoryMB", (json_int_t)(limits->memory_bytes >> 20),
        "diskSizeMB", (json_int_t)(limits->disk_bytes >> 20), "metadata",
        json_object_get(native, "metadata"), "state", e2b_state(b) ? e2b_state(b) : "dead",
        "envdVersion", E2B_ENVD_VERSION);
    json_object_set_new(model, "volumeMounts",
                        e2b_volumes_mounts_model(json_object_get(native, "volumes")));
    json_decref(native);
    json_object_set_new(model, "lifecycle",
                        json_pack("{s:s, s:b}", "onTimeout",
                                  box_pauses_at_timeout(b) ? "pause" : "kill", "autoResume",
                                  box_resumes_on_call(b)));
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

/* E2B's lifecycle fields of POST /sandboxes: autoPause (onTimeout 'pause') and autoResume
   {enabled}. False after answering 400. autoPauseMemory is read as always true: a sandbox paused
   at its timeout is hibernated, its memory kept on disk (model/snapshots.h), so it can always be
   resumed by a call. */
static bool read_lifecycle(http_request *request, json_t *body, bool *pause, bool *resume)
{
    json_t *auto_resume = json_object_get(body, "autoResume");
    *pause = *resume = false;
    if (!request_optional_bool(request, body, "autoPause", pause))
        return false;
    if (auto_resume && !json_is_null(auto_resume) &&
        !request_optional_bool(request, auto_resume, "enabled", resume))
        return false;
    if (*resume && !*pause) {
        errors_respond_e2b(request, 400,
                           "autoResume needs autoPause: a sandbox resumes by a call only if it "
                           "pauses at its timeout (lifecycle {onTimeout: 'pause', autoResume: "
                           "true})");
        return false;
    }
    return true;
}

/* What E2B's cloud runs for a sandbox and cellbox does not: answered 501 before anything is
   made. True after answering. Identity tokens are resolved by E2B's egress proxy; the network
   options of that proxy are e2b_network's to refuse. */
static bool refuse_cloud_only_create(http_request *request, json_t *body, const char *template_id)
{
    json_t *iam = json_object_get(body, "iam");
    if (json_is_object(iam) && json_object_size(json_object_get(iam, "tokens")) > 0) {
        errors_respond_e2b(request, 501,
                           "not supported by cellbox: Sandbox.create's iam option (workload "
                           "identity tokens, which E2B's egress proxy resolves); leave it out");
        return true;
    }
    json_t *mcp = json_object_get(body, "mcp");
    if ((mcp && !json_is_null(mcp)) || (template_id && strcmp(template_id, "mcp-gateway") == 0)) {
        errors_respond_e2b(request, 501,
                           "not supported by cellbox: E2B's MCP gateway (Sandbox.create({mcp}), "
                           "getMcpUrl, getMcpToken) runs in E2B's cloud; cellbox serves MCP "
                           "itself at /mcp (docs/api.md)");
        return true;
    }
    return false;
}

/* POST /sandboxes {templateID, timeout, metadata, envVars, allow_internet_access, network,
   autoPause, autoResume, volumeMounts, ...}: other fields are ignored, but for the cloud's own
   options (mcp, the egress proxy's network options, iam), which are refused by name. */
static void create_sandbox(http_request *request)
{
    json_t *body = request_parse_body(request, REQUEST_ANY_FIELD); /* unlike /v1 */
    if (!body)
        return;
    bool pause_at_timeout, auto_resume;
    const char *template_id = NULL;
    int timeout_s = DEFAULT_TIMEOUT_S;
    json_t *env = NULL, *metadata = NULL;
    e2b_network_request network;
    if (!request_optional_string(request, body, "templateID", &template_id) ||
        !request_optional_int(request, body, "timeout", 0, &timeout_s) ||
        !request_optional_string_map(request, body, "envVars", &env) ||
        !request_optional_string_map(request, body, "metadata", &metadata) ||
        !read_lifecycle(request, body, &pause_at_timeout, &auto_resume) ||
        refuse_cloud_only_create(request, body, template_id) ||
        e2b_network_read_create(request, body, &network) < 0) {
        json_decref(body);
        return;
    }
    /* A template's name wins over a snapshot's (the SDK's default "base" must stay the default
       template whatever a snapshot is called); a snapshot's id is a UUID no template has. */
    const char *spec = kernelspec_for_template(template_id);
    json_t *snapshot = spec ? NULL : e2b_snapshots_find(template_id);
    if (snapshot) { /* a sandbox from a snapshot: its template, files and state are the snapshot's */
        e2b_restore_request restore = {timeout_s, metadata, env, pause_at_timeout, auto_resume};
        e2b_snapshots_restore(request, json_string_value(json_object_get(snapshot, "snapshot_id")),
                              &restore);
        json_decref(snapshot);
        e2b_network_request_free(&network);
        json_decref(body);
        return;
    }
    failure_kind failure;
    char why[512];
    rootfs_volumes volumes;
    if (e2b_volumes_from_request(json_object_get(body, "volumeMounts"), &volumes, &failure, why,
                                 sizeof why) < 0) {
        errors_respond_e2b(request, errors_status_of_failure(failure), "%s", why);
        e2b_network_request_free(&network);
        json_decref(body);
        return;
    }
    kernel *k = spec ? manager_create(spec, env, NULL, network.network, &volumes, &failure, why,
                                      sizeof why)
                     : NULL;
    if (k && e2b_network_apply(k, &network, why, sizeof why) < 0) {
        manager_delete(k);
        k = NULL;
        failure = FAILURE_INVALID;
    }
    e2b_network_request_free(&network);
    if (!spec)
        errors_respond_e2b(request, 404,
                           "template '%.*s' does not exist: name one of GET /v1/templates "
                           "('base' is the default one), or build it from a Dockerfile first "
                           "(POST /v1/templates, `cellbox template build NAME -f Dockerfile`)",
                           text_utf8_prefix(template_id, 200), template_id);
    else if (!k)
        errors_respond_e2b(request, errors_status_of_failure(failure), "%s", why);
    if (!k) {
        json_decref(body);
        return;
    }
    box *b = box_of(k);
    box_configure(b, metadata, env, timeout_s);
    /* E2B's default context starts in the home, or where the template's WORKDIR says */
    if (!kernel_working_directory(k))
        kernel_set_working_directory(k, ENVD_HOME_DIR);
    box_set_lifecycle(b, pause_at_timeout, auto_resume); /* records both */
    json_decref(body);
    /* answered once it can run code and take files: the SDK calls into it at once */
    v1_respond_when_ready(request, k, e2b_connection_model(request, b));
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

/* Sandbox.list's pages are in a stable order, oldest first (ties by id); a page's next token
   names the last sandbox it holds by that order ("<started_at_us>-<id>"), so a sandbox created
   or deleted between two pages neither repeats nor shifts the rest. */
typedef struct list_key {
    long long started_at_us;
    const char *id;
} list_key;

static int compare_keys(const list_key *a, const list_key *b)
{
    if (a->started_at_us != b->started_at_us)
        return a->started_at_us < b->started_at_us ? -1 : 1;
    return strcmp(a->id, b->id);
}

static list_key key_of(const box *b)
{
    return (list_key){box_started_at_us(b), box_id(b)};
}

static int compare_boxes(const void *a, const void *b)
{
    list_key x = key_of(*(box *const *)a), y = key_of(*(box *const *)b);
    return compare_keys(&x, &y);
}

/* ?nextToken= as a key; false when it is not one this server gave. */
static bool parse_next_token(const char *token, list_key *key)
{
    char *end;
    key->started_at_us = strtoll(token, &end, 10);
    key->id = end + 1;
    return end != token && *end == '-' && *key->id;
}

/* ?limit=: 1 to LIST_LIMIT_MAX sandboxes a page (that many when absent); -1 after a 400. */
static int page_limit(http_request *request)
{
    const char *text = http_query(request, "limit");
    char *end;
    long limit = text ? strtol(text, &end, 10) : LIST_LIMIT_MAX;
    if (text && (end == text || *end || limit < 1 || limit > LIST_LIMIT_MAX)) {
        errors_respond_e2b(request, 400, "'limit' is %.32s: give 1 to %d sandboxes a page", text,
                           LIST_LIMIT_MAX);
        return -1;
    }
    return (int)limit;
}

static void list_sandboxes(http_request *request)
{
    const char *token = http_query(request, "nextToken");
    list_key after = {0};
    int limit = page_limit(request);
    if (limit < 0)
        return;
    if (token && *token && !parse_next_token(token, &after)) {
        errors_respond_e2b(request, 400,
                           "'nextToken' %.100s is not one cellbox gave: pass the x-next-token "
                           "header of the previous page as it is",
                           token);
        return;
    }
    json_t *filter = metadata_filter(request);
    box **matching = calloc(manager_count() + 1, sizeof *matching);
    if (!matching)
        die("out of memory");
    size_t count = 0;
    for (size_t i = 0; i < manager_count(); i++) {
        box *b = box_of(manager_at(i));
        list_key key = key_of(b);
        if (e2b_state(b) && state_wanted(request, e2b_state(b)) && box_matches(b, NULL, filter) &&
            (!token || !*token || compare_keys(&key, &after) > 0))
            matching[count++] = b;
    }
    qsort(matching, count, sizeof *matching, compare_boxes);
    json_t *page = json_array();
    for (size_t i = 0; i < count && i < (size_t)limit; i++)
        json_array_append_new(page, listed_model(matching[i]));
    if (count > (size_t)limit) {
        char next[160];
        list_key last = key_of(matching[limit - 1]);
        snprintf(next, sizeof next, "%lld-%s", last.started_at_us, last.id);
        http_add_response_header(request, "X-Next-Token", next);
    }
    free(matching);
    json_decref(filter);
    http_respond_json(request, 200, page);
}

static void get_sandbox(http_request *request, box *b)
{
    json_t *model = listed_model(b);
    json_t *connection = e2b_connection_model(request, b);
    json_object_set(model, "envdAccessToken", json_object_get(connection, "envdAccessToken"));
    json_object_set(model, "domain", json_object_get(connection, "domain"));
    json_decref(connection);
    e2b_network_describe(b, model);
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

/* Sandbox.connect() of a hibernated sandbox: answered 201 once it woke, its timeout set then
   (the wake puts back the one it had). */
typedef struct connect_wake {
    http_request *request;
    int timeout_s; /* -1: as it was */
} connect_wake;

static void on_woken_for_connect(void *arg, json_t *result, failure_kind failure, const char *why)
{
    connect_wake *wake = arg;
    http_request *request = wake->request;
    int timeout_s = wake->timeout_s;
    free(wake);
    if (!result) {
        errors_respond_e2b(request, errors_status_of_failure(failure),
                           "the sandbox could not wake from hibernation: %s", why);
        return;
    }
    box *b = box_find(json_string_value(json_object_get(result, "id")));
    if (b && timeout_s >= 0)
        box_set_timeout(b, timeout_s);
    if (b)
        http_respond_json(request, 201, e2b_connection_model(request, b));
    else
        errors_respond_e2b(request, 404, "the sandbox was deleted while it woke");
}

/* POST /sandboxes/{id}/connect (and the older /resume): resumes a paused sandbox, or wakes a
   hibernated one; 201 when it was resumed or woken, 200 when it was running. */
static void connect_sandbox(http_request *request, box *b)
{
    json_t *body = request_parse_body(request, REQUEST_ANY_FIELD);
    int timeout_s = body ? body_timeout(request, body) : -2;
    json_decref(body);
    if (timeout_s == -2)
        return;
    char why[256];
    int status = 200;
    if (box_get_state(b) == BOX_HIBERNATED) {
        failure_kind failure;
        connect_wake *wake = malloc(sizeof *wake);
        if (!wake)
            die("out of memory");
        *wake = (connect_wake){.request = request, .timeout_s = timeout_s};
        if (box_wake(b, on_woken_for_connect, wake, &failure, why, sizeof why) < 0) {
            free(wake);
            errors_respond_e2b(request, errors_status_of_failure(failure), "%s", why);
        } else {
            http_respond_later(request);
        }
        return;
    }
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
    http_respond_json(request, status, e2b_connection_model(request, b));
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

/* GET /sandboxes/{id}/metrics: one sample taken now, whatever ?start= and ?end= ask (cellbox
   keeps no history); CPU as the share of its CPUs used since the previous call. */
static void get_metrics(http_request *request, box *b)
{
    box_usage_sample usage;
    box_sample_usage(b, &usage);
    char now[ISO_TIME_BUFFER];
    clock_format_iso(usage.at_us, now);
    json_t *sample = json_pack(
        "{s:s, s:i, s:f, s:I, s:I, s:I, s:I}", "timestamp", now, "cpuCount",
        (int)ceil(usage.cpu_count), "cpuUsedPct", usage.cpu_used_percent, "memUsed",
        (json_int_t)usage.memory_used, "memTotal", (json_int_t)usage.memory_total, "diskUsed",
        (json_int_t)usage.disk_used, "diskTotal", (json_int_t)usage.disk_total);
    http_respond_json(request, 200, json_pack("[o]", sample));
}

/* ---- E2B's cloud-only calls ----
   What the SDKs can ask of E2B's control plane that only makes sense in E2B's cloud, or that
   cellbox does not do: each answers 501 with a sentence naming the SDK call and what to use
   instead, which the SDK raises as SandboxError("501: not supported by cellbox: ..."). */

typedef struct cloud_only {
    const char *action; /* a sandbox's action (/sandboxes/{id}/<action>), or NULL */
    const char *prefix; /* else a path prefix of the control plane ("/secrets") */
    const char *what;   /* the SDK calls, and why or what to use instead */
} cloud_only;

static const cloud_only cloud_only_calls[] = {
    {NULL, "/secrets",
     "E2B's secrets (Secret.create, update, getInfo, list, exists, destroy) are a vault of E2B's "
     "cloud; give values to a sandbox with envs (Sandbox.create({envs}), runCode(code, {envs}))"},
    {NULL, "/templates",
     "E2B's template builds and tags (Template.build, buildInBackground, getBuildStatus, "
     "getTags, assignTags, removeTags) run in E2B's cloud; build a "
     "cellbox template from the same Dockerfile with POST /v1/templates or `cellbox template "
     "build NAME -f Dockerfile`, then name it by templateID at create (Template.exists works)"},
    {NULL, "/teams",
     "E2B's teams and billing belong to E2B's cloud; cellbox has one token, the daemon's"},
    {NULL, "/api-keys",
     "E2B's API keys belong to E2B's cloud; cellbox has one token, the daemon's"},
    {NULL, "/access-tokens",
     "E2B's access tokens belong to E2B's cloud; cellbox has one token, the daemon's"},
};

/* ---- templates: Template.exists ----
   The SDK asks GET /templates/aliases/{alias} and reads 404 as "no such template", any 2xx with
   a body as "it exists" (checkAliasExists in e2b's dist). A cellbox template's name is both its
   alias and its id: whatever Sandbox.create takes as templateID exists here, E2B's default
   names included. */

#define TEMPLATE_ALIASES_PREFIX "/templates/aliases/"

static bool is_template_alias_path(const char *path)
{
    size_t n = strlen(TEMPLATE_ALIASES_PREFIX);
    return strncmp(path, TEMPLATE_ALIASES_PREFIX, n) == 0 && path[n] && !strchr(path + n, '/');
}

static void get_template_alias(http_request *request)
{
    const char *alias = http_path(request) + strlen(TEMPLATE_ALIASES_PREFIX); /* decoded */
    if (!http_method_is(request, "GET")) {
        errors_respond_e2b_method_not_allowed(request, "GET");
        return;
    }
    if (!kernelspec_for_template(alias)) {
        errors_respond_e2b(request, 404,
                           "template '%.*s' does not exist: build it with POST /v1/templates or "
                           "`cellbox template build NAME -f Dockerfile` (GET /v1/templates lists "
                           "the templates there are)",
                           text_utf8_prefix(alias, 100), alias);
        return;
    }
    http_respond_json(request, 200, json_pack("{s:s, s:b}", "templateID", alias, "public", false));
}

/* The entry for a control-plane path (its /v2 or /v3 prefix taken off), or NULL. */
static const cloud_only *cloud_only_path(const char *path)
{
    if (strncmp(path, "/v2/", 4) == 0 || strncmp(path, "/v3/", 4) == 0)
        path += 3;
    for (size_t i = 0; i < sizeof cloud_only_calls / sizeof *cloud_only_calls; i++) {
        const char *prefix = cloud_only_calls[i].prefix;
        size_t n = prefix ? strlen(prefix) : 0;
        if (prefix && strncmp(path, prefix, n) == 0 && (path[n] == '\0' || path[n] == '/'))
            return &cloud_only_calls[i];
    }
    return NULL;
}

static void respond_cloud_only(http_request *request, const cloud_only *call)
{
    errors_respond_e2b(request, 501, "not supported by cellbox: %s (%s %s)", call->what,
                       http_method_is(request, "GET")      ? "GET"
                       : http_method_is(request, "DELETE") ? "DELETE"
                       : http_method_is(request, "PUT")    ? "PUT"
                                                           : "POST",
                       http_path(request));
}

/* True after answering a sandbox's cloud-only action (/sandboxes/{id}/fork, ...). */
static bool refuse_cloud_only_action(http_request *request, const char *action)
{
    for (size_t i = 0; i < sizeof cloud_only_calls / sizeof *cloud_only_calls; i++)
        if (cloud_only_calls[i].action && strcmp(cloud_only_calls[i].action, action) == 0) {
            respond_cloud_only(request, &cloud_only_calls[i]);
            return true;
        }
    return false;
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
    } else if (strcmp(action, "network") == 0) {
        if (http_method_is(request, "PUT"))
            e2b_network_update(request, b);
        else
            errors_respond_e2b_method_not_allowed(request, "PUT");
    } else if (refuse_cloud_only_action(request, action)) {
        return;
    } else if (!http_method_is(request, "POST")) {
        errors_respond_e2b_method_not_allowed(request, "POST");
    } else if (strcmp(action, "timeout") == 0) {
        set_timeout(request, b);
    } else if (strcmp(action, "pause") == 0) {
        pause_sandbox(request, b);
    } else if (strcmp(action, "connect") == 0 || strcmp(action, "resume") == 0) {
        connect_sandbox(request, b);
    } else if (strcmp(action, "snapshots") == 0) {
        e2b_snapshots_create(request, b);
    } else if (strcmp(action, "fork") == 0) {
        e2b_snapshots_fork(request, b);
    } else {
        errors_respond_e2b(request, 404,
                      "no such sandbox endpoint: %s (cellbox serves timeout, pause, "
                      "connect, resume, snapshots, fork and metrics)",
                      action);
    }
}

/* DELETE /templates/{id} is also the SDK's deleteSnapshot: a snapshot's is e2b_snapshots'; for
   an id that names neither a snapshot nor a template, 404 (deleteSnapshot's "not found"). True
   after answering. */
static bool refuse_unknown_template_delete(http_request *request)
{
    const char *path = http_path(request);
    size_t n = strlen("/templates/");
    if (!http_method_is(request, "DELETE") || strncmp(path, "/templates/", n) != 0 ||
        !path[n] || strchr(path + n, '/') || kernelspec_for_template(path + n) ||
        strcmp(path + n, "tags") == 0) /* Template.removeTags: E2B's cloud's, answered 501 */
        return false;
    errors_respond_e2b(request, 404,
                       "no snapshot or template is named '%.*s': Sandbox.listSnapshots() lists "
                       "the snapshots there are",
                       text_utf8_prefix(path + n, 200), path + n);
    return true;
}

static void route_control_plane(http_request *request)
{
    if (is_template_alias_path(http_path(request))) {
        get_template_alias(request);
        return;
    }
    if (e2b_snapshots_route(request) || refuse_unknown_template_delete(request))
        return;
    const cloud_only *call = cloud_only_path(http_path(request));
    if (call) {
        respond_cloud_only(request, call);
        return;
    }
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
            v1_create_context(request, b, ENVD_HOME_DIR); /* as E2B's code interpreter */
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
    return (strncmp(path, "/sandboxes", 10) == 0 && (path[10] == '\0' || path[10] == '/')) ||
           strcmp(path, "/snapshots") == 0;
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
           is_signed_file_url(request) || cloud_only_path(http_path(request)) ||
           e2b_volumes_owns(http_path(request));
}

bool e2b_streams_body(const http_request *request)
{
    const char *port = http_header(request, "E2b-Sandbox-Port");
    bool to_envd = is_signed_file_url(request) || (http_header(request, "E2b-Sandbox-Id") && port &&
                                                    strcmp(port, ENVD_PORT) == 0);
    return to_envd && envd_streams_body(request);
}

bool e2b_serves_port(int port)
{
    return port == atoi(INTERPRETER_PORT) || port == atoi(ENVD_PORT);
}

/* A call into a paused or hibernated sandbox: resumed (woken) first when its lifecycle says
   autoResume, as E2B's proxy does; else 502, E2B's answer for a sandbox that is not running (the
   SDK's isRunning() reads it as false). A sandbox the daemon hibernated on its own
   (--hibernate-idle, /v1) is woken whatever its lifecycle, unless that lifecycle asked E2B's
   pause without autoResume: hibernation is then the pause it asked for. True when the call can
   go on now; a woken sandbox's call is dispatched again (v1_wake_then_dispatch). */
static bool resumed_for_call(http_request *request, box *b)
{
    char why[256];
    bool pause_is_asked = box_pauses_at_timeout(b) && !box_resumes_on_call(b);
    if (box_is_hibernated(b) && !pause_is_asked)
        return v1_wake_then_dispatch(request, b);
    if (box_get_state(b) != BOX_PAUSED && !box_is_hibernated(b))
        return true;
    if (!box_resumes_on_call(b)) {
        errors_respond_e2b(request, 502,
                           "sandbox %s is paused: resume it with Sandbox.connect(), or create it "
                           "with lifecycle {onTimeout: 'pause', autoResume: true} so that calls "
                           "resume it",
                           box_id(b));
        return false;
    }
    if (box_resume(b, why, sizeof why) < 0) {
        errors_respond_e2b(request, 500, "sandbox %s is paused and could not be resumed: %s",
                           box_id(b), why);
        return false;
    }
    return true;
}

/* A call into a sandbox, as E2B's proxy routes it: an unknown sandbox is 502, which the SDK
   reads as "not running" (Sandbox.isRunning). */
void e2b_route_into_sandbox(http_request *request, const char *id, const char *port)
{
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
    } else if (resumed_for_call(request, b)) {
        interpreter ? route_interpreter(request, b, s, n) : envd_route(request, b, s, n);
    }
}

void e2b_dispatch(http_request *request)
{
    if (http_header(request, "E2b-Sandbox-Id"))
        e2b_route_into_sandbox(request, http_header(request, "E2b-Sandbox-Id"),
                               http_header(request, "E2b-Sandbox-Port"));
    else if (is_signed_file_url(request))
        envd_files_route(request, NULL);
    else if (e2b_volumes_owns(http_path(request)))
        e2b_volumes_route(request);
    else
        route_control_plane(request);
}
