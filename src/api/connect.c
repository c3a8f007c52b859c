#include "api/connect.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- errors ---- */

/* Connect's codes and the HTTP status its protocol gives each (connectrpc.com/docs/protocol,
   "Error codes"); clients read the code from the body, and the status when there is none. */
static const struct {
    const char *code;
    int status;
} connect_statuses[] = {
    {"canceled", 499},
    {"unknown", 500},
    {"invalid_argument", 400},
    {"deadline_exceeded", 504},
    {"not_found", 404},
    {"already_exists", 409},
    {"permission_denied", 403},
    {"resource_exhausted", 429},
    {"failed_precondition", 400},
    {"aborted", 409},
    {"out_of_range", 400},
    {"unimplemented", 404},
    {"internal", 500},
    {"unavailable", 503},
    {"data_loss", 500},
    {"unauthenticated", 401},
};

static int status_of_code(const char *code)
{
    for (size_t i = 0; i < sizeof connect_statuses / sizeof *connect_statuses; i++)
        if (strcmp(connect_statuses[i].code, code) == 0)
            return connect_statuses[i].status;
    return 500;
}

static void respond_error(http_request *request, const connect_error *error)
{
    http_respond_json(request, status_of_code(error->code),
                      json_pack("{s:s, s:s}", "code", error->code, "message", error->message));
}

void connect_respond_error(http_request *request, const connect_error *error)
{
    respond_error(request, error);
}

json_t *connect_fail(connect_error *error, const char *code, const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    vsnprintf(error->message, sizeof error->message, fmt, args);
    va_end(args);
    error->code = code;
    return NULL;
}

/* ---- the request ---- */

/* Content-Type without parameters ("application/json; charset=utf-8") is `expected`. */
static bool content_type_is(http_request *request, const char *expected)
{
    const char *type = http_header(request, "Content-Type");
    size_t length = strlen(expected);
    return type && strncasecmp(type, expected, length) == 0 &&
           (type[length] == '\0' || type[length] == ';' || type[length] == ' ');
}

/* The headers Connect defines for a unary call; false with the error set. Connect-Timeout-Ms is
   checked for its form only: every unary method here finishes before the response is written, so
   there is nothing for a deadline to cut short. */
static bool check_headers(http_request *request, connect_error *error)
{
    const char *version = http_header(request, "Connect-Protocol-Version");
    if (version && strcmp(version, "1") != 0) {
        connect_fail(error, "invalid_argument",
                     "Connect-Protocol-Version '%.32s' is not served: cellbox speaks Connect "
                     "protocol version 1",
                     version);
        return false;
    }
    const char *timeout = http_header(request, "Connect-Timeout-Ms");
    size_t digits = timeout ? strspn(timeout, "0123456789") : 0;
    if (timeout && (digits == 0 || digits > 10 || timeout[digits] != '\0')) {
        connect_fail(error, "invalid_argument",
                     "Connect-Timeout-Ms '%.32s' must be a positive whole number of at most 10 "
                     "digits (milliseconds)",
                     timeout);
        return false;
    }
    return true;
}

/* The request message: an empty body is the empty message, as protojson writes it. */
static json_t *parse_message(http_request *request, connect_error *error)
{
    size_t length = 0;
    const char *body = http_body(request, &length);
    if (!body || length == 0)
        return json_object();
    json_error_t parse_error;
    json_t *message = json_loadb(body, length, JSON_REJECT_DUPLICATES, &parse_error);
    if (!message)
        return connect_fail(error, "invalid_argument",
                            "the request body is not JSON (%s, at byte %d): send the message as "
                            "protojson",
                            parse_error.text, parse_error.position);
    if (!json_is_object(message)) {
        json_decref(message);
        return connect_fail(error, "invalid_argument",
                            "the request message must be a JSON object (protojson)");
    }
    return message;
}

/* ---- fields ---- */

bool connect_string_field(json_t *message, const char *field, const char **out,
                          connect_error *error)
{
    json_t *value = json_object_get(message, field);
    if (!value || json_is_null(value))
        return true;
    if (!json_is_string(value)) {
        connect_fail(error, "invalid_argument", "'%s' must be a string", field);
        return false;
    }
    *out = json_string_value(value);
    return true;
}

bool connect_uint32_field(json_t *message, const char *field, unsigned *out, connect_error *error)
{
    json_t *value = json_object_get(message, field);
    long long number = -1;
    if (!value || json_is_null(value))
        return true;
    if (json_is_integer(value)) {
        number = json_integer_value(value);
    } else if (json_is_string(value)) {
        const char *text = json_string_value(value);
        size_t digits = strspn(text, "0123456789");
        if (digits > 0 && digits <= 10 && text[digits] == '\0')
            number = strtoll(text, NULL, 10);
    }
    if (number < 0 || number > 0xffffffffLL) {
        connect_fail(error, "invalid_argument", "'%s' must be a whole number from 0 to 4294967295",
                     field);
        return false;
    }
    *out = (unsigned)number;
    return true;
}

/* ---- dispatch ---- */

static const connect_method *find_method(const connect_service *const *services,
                                         const char *service, const char *method)
{
    for (size_t i = 0; services[i]; i++) {
        if (strcmp(services[i]->name, service) != 0)
            continue;
        for (const connect_method *m = services[i]->methods; m->name; m++)
            if (strcmp(m->name, method) == 0)
                return m;
    }
    return NULL;
}

void connect_serve(http_request *request, const connect_service *const *services,
                   const char *service, const char *method, void *context)
{
    connect_error error = {0};
    const connect_method *found = find_method(services, service, method);
    if (!found || !found->unary) {
        connect_fail(&error, "unimplemented",
                     "cellbox does not serve %s/%s (yet): docs/api.md lists the Connect-RPC "
                     "methods it serves; run commands with runCode or cellbox's /v1 commands",
                     service, method);
        respond_error(request, &error);
        return;
    }
    if (!http_method_is(request, "POST")) {
        http_respond_method_not_allowed(request, "POST");
        return;
    }
    if (!content_type_is(request, "application/json")) {
        /* Connect answers a codec it does not speak with 415 (no Connect body is required) */
        connect_fail(&error, "unimplemented",
                     "Content-Type '%.64s' is not served for %s/%s: send application/json "
                     "(protojson; binary protobuf is not served)",
                     http_header(request, "Content-Type") ? http_header(request, "Content-Type")
                                                          : "(none)",
                     service, method);
        http_add_response_header(request, "Accept-Post", "application/json");
        http_respond_json(request, 415,
                          json_pack("{s:s, s:s}", "code", error.code, "message", error.message));
        return;
    }
    json_t *message = check_headers(request, &error) ? parse_message(request, &error) : NULL;
    json_t *response = message ? found->unary(context, message, &error) : NULL;
    if (response)
        http_respond_json(request, 200, response);
    else
        respond_error(request, &error);
    json_decref(message);
}
