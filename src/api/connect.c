#include "api/connect.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/buffer.h"
#include "common/log.h"
#include "common/loop.h"

/* The largest request message an envelope may carry; a client-streaming call's messages are
   each held until complete, so this bounds what one call holds. */
#define CONNECT_MAX_MESSAGE (4u << 20)
/* Keepalive-Ping-Interval is taken between these (seconds); absent, envd's SDKs' 50 s. */
#define KEEPALIVE_DEFAULT_SECONDS 50
#define KEEPALIVE_MAX_SECONDS 3600

/* The envelope's flag byte (connectrpc.com/docs/protocol, "Streaming-Request" and "-Response"). */
#define ENVELOPE_COMPRESSED 0x01
#define ENVELOPE_END_STREAM 0x02
#define ENVELOPE_HEADER 5
#define STREAMING_TYPE "application/connect+json"

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

/* The headers Connect defines; false with the error set. *timeout_ms is Connect-Timeout-Ms (0
   when absent). A unary method here finishes before its response is written, so only streams
   have anything for a deadline to cut short. */
static bool check_headers(http_request *request, int64_t *timeout_ms, connect_error *error)
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
    *timeout_ms = timeout ? strtoll(timeout, NULL, 10) : 0;
    return true;
}

/* A message as protojson: empty bytes are the empty message, as protojson writes it. */
static json_t *parse_json_message(const char *body, size_t length, connect_error *error)
{
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

static json_t *parse_message(http_request *request, connect_error *error)
{
    size_t length = 0;
    const char *body = http_body(request, &length);
    return parse_json_message(body, length, error);
}

/* ---- envelopes ---- */

static void append_envelope(buffer *out, unsigned flags, json_t *message)
{
    char *text = json_dumps(message, JSON_COMPACT);
    if (!text)
        die("out of memory encoding a Connect message");
    size_t length = strlen(text);
    unsigned char header[ENVELOPE_HEADER] = {(unsigned char)flags, (unsigned char)(length >> 24),
                                             (unsigned char)(length >> 16),
                                             (unsigned char)(length >> 8), (unsigned char)length};
    buffer_append(out, header, sizeof header);
    buffer_append(out, text, length);
    free(text);
}

/* The end-of-stream frame: {} for success, {"error": {"code", "message"}} for a failure. */
static void append_end_of_stream(buffer *out, const connect_error *error)
{
    json_t *end =
        error ? json_pack("{s:{s:s, s:s}}", "error", "code", error->code, "message", error->message)
              : json_object();
    append_envelope(out, ENVELOPE_END_STREAM, end);
    json_decref(end);
}

/* A whole streaming response at once: `message` (stolen; NULL: none), then the end frame. */
static void respond_stream_at_once(http_request *request, json_t *message,
                                   const connect_error *error)
{
    buffer out = {0};
    if (message)
        append_envelope(&out, 0, message);
    json_decref(message);
    append_end_of_stream(&out, error);
    http_respond(request, 200, STREAMING_TYPE, buffer_head(&out), buffer_size(&out));
    buffer_free(&out);
}

/* One envelope from the front of `data`: 1 when it is all there (*flags, *payload, *payload_length
   and *used set), 0 when more bytes are needed, -1 with the error set when it cannot be read. */
static int read_envelope(const char *data, size_t length, unsigned *flags, const char **payload,
                         size_t *payload_length, size_t *used, connect_error *error)
{
    if (length < ENVELOPE_HEADER)
        return 0;
    const unsigned char *header = (const unsigned char *)data;
    uint32_t size = (uint32_t)header[1] << 24 | (uint32_t)header[2] << 16 |
                    (uint32_t)header[3] << 8 | header[4];
    *flags = header[0];
    if (*flags & ~(unsigned)ENVELOPE_COMPRESSED) {
        connect_fail(error, "invalid_argument",
                     "the request's envelope has flags 0x%02x: a request message's flag byte is 0 "
                     "(send each message as a flag byte, a 4-byte big-endian length, the JSON)",
                     *flags);
        return -1;
    }
    if (*flags & ENVELOPE_COMPRESSED) {
        connect_fail(error, "unimplemented",
                     "the request's envelope is compressed (flag 0x01): cellbox serves "
                     "Connect-Content-Encoding identity only; send messages uncompressed");
        return -1;
    }
    if (size > CONNECT_MAX_MESSAGE) {
        connect_fail(error, "resource_exhausted",
                     "a request message of %u bytes is larger than the limit of %u bytes: send "
                     "smaller messages",
                     (unsigned)size, CONNECT_MAX_MESSAGE);
        return -1;
    }
    if (length - ENVELOPE_HEADER < size)
        return 0;
    *payload = data + ENVELOPE_HEADER;
    *payload_length = size;
    *used = ENVELOPE_HEADER + size;
    return 1;
}

/* A server-streaming request: exactly one envelope holding the message; NULL with the error set. */
static json_t *parse_single_envelope(http_request *request, connect_error *error)
{
    size_t length = 0, used = 0, payload_length = 0;
    const char *body = http_body(request, &length);
    const char *payload = NULL;
    unsigned flags = 0;
    int read = read_envelope(body, length, &flags, &payload, &payload_length, &used, error);
    if (read < 0)
        return NULL;
    if (read == 0 || used != length)
        return connect_fail(error, "invalid_argument",
                            "the request body (%zu bytes) is not one Connect envelope (a flag "
                            "byte, a 4-byte big-endian length, then that many bytes of JSON)",
                            length);
    return parse_json_message(payload, payload_length, error);
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

/* ---- server streaming ---- */

struct connect_stream {
    http_stream *http;     /* the response; valid until on_http_closed */
    const char *keepalive; /* the method's keepalive message (NULL: none) */
    int64_t keepalive_ms;
    loop_timer_id keepalive_timer; /* 0 when none is pending */
    loop_timer_id deadline_timer;  /* Connect-Timeout-Ms; 0 when none is pending */
    void (*on_cancel)(void *arg);
    void *cancel_arg;
    bool ended; /* the end frame went out: the handler is done with it */
};

static void write_envelope(connect_stream *stream, unsigned flags, json_t *message)
{
    buffer out = {0};
    append_envelope(&out, flags, message);
    http_stream_write(stream->http, buffer_head(&out), buffer_size(&out));
    buffer_free(&out);
}

static void stop_timers(connect_stream *stream)
{
    loop_timer_cancel(stream->keepalive_timer);
    loop_timer_cancel(stream->deadline_timer);
    stream->keepalive_timer = stream->deadline_timer = 0;
}

static void send_keepalive(void *arg)
{
    connect_stream *stream = arg;
    json_t *message = json_loads(stream->keepalive, 0, NULL);
    if (message)
        write_envelope(stream, 0, message);
    json_decref(message);
    stream->keepalive_timer = loop_timer_add(stream->keepalive_ms, send_keepalive, stream);
}

/* The call ended without the handler: it hears so once and forgets the stream. */
static void cancel(connect_stream *stream)
{
    stream->ended = true;
    stop_timers(stream);
    if (stream->on_cancel)
        stream->on_cancel(stream->cancel_arg);
}

static void on_deadline(void *arg)
{
    connect_stream *stream = arg;
    stream->deadline_timer = 0;
    connect_error error = {.code = "deadline_exceeded"};
    snprintf(error.message, sizeof error.message,
             "the call's deadline (Connect-Timeout-Ms) passed: ask again with a longer timeout "
             "(the SDK's timeoutMs; 0 for none)");
    buffer out = {0};
    append_end_of_stream(&out, &error);
    http_stream_write(stream->http, buffer_head(&out), buffer_size(&out));
    buffer_free(&out);
    http_stream_end(stream->http);
    cancel(stream);
}

/* The response is over: sent whole, or the client went away (then the handler hears it). */
static void on_http_closed(void *arg, bool completed)
{
    connect_stream *stream = arg;
    if (!stream->ended)
        cancel(stream);
    free(stream);
}

void connect_stream_send(connect_stream *stream, json_t *message)
{
    if (!stream->ended)
        write_envelope(stream, 0, message);
    json_decref(message);
}

void connect_stream_end(connect_stream *stream, const connect_error *error)
{
    if (stream->ended)
        return;
    buffer out = {0};
    append_end_of_stream(&out, error);
    http_stream_write(stream->http, buffer_head(&out), buffer_size(&out));
    buffer_free(&out);
    http_stream_end(stream->http);
    stream->ended = true;
    stop_timers(stream);
}

void connect_stream_on_cancel(connect_stream *stream, void (*on_cancel)(void *arg), void *arg)
{
    stream->on_cancel = on_cancel;
    stream->cancel_arg = arg;
}

size_t connect_stream_queued(const connect_stream *stream)
{
    return stream->ended ? 0 : http_stream_queued(stream->http);
}

/* Keepalive-Ping-Interval in milliseconds; the header is seconds, as the SDKs send it (one that
   is not a whole number is taken as absent). */
static int64_t keepalive_interval_ms(http_request *request)
{
    const char *header = http_header(request, "Keepalive-Ping-Interval");
    size_t digits = header ? strspn(header, "0123456789") : 0;
    bool given = digits > 0 && digits <= 9 && header[digits] == '\0';
    long seconds = given ? strtol(header, NULL, 10) : KEEPALIVE_DEFAULT_SECONDS;
    if (seconds < 1)
        seconds = 1;
    if (seconds > KEEPALIVE_MAX_SECONDS)
        seconds = KEEPALIVE_MAX_SECONDS;
    return (int64_t)seconds * 1000;
}

static void serve_server_streaming(http_request *request, const connect_method *method,
                                   void *context)
{
    connect_error error = {0};
    int64_t timeout_ms = 0;
    json_t *message =
        check_headers(request, &timeout_ms, &error) ? parse_single_envelope(request, &error) : NULL;
    if (!message) {
        respond_stream_at_once(request, NULL, &error);
        return;
    }
    connect_stream *stream = calloc(1, sizeof *stream);
    if (!stream)
        die("out of memory");
    stream->keepalive = method->keepalive;
    stream->keepalive_ms = keepalive_interval_ms(request);
    stream->http = http_respond_stream(request, 200, STREAMING_TYPE, on_http_closed, stream);
    if (stream->keepalive)
        stream->keepalive_timer = loop_timer_add(stream->keepalive_ms, send_keepalive, stream);
    if (timeout_ms > 0)
        stream->deadline_timer = loop_timer_add(timeout_ms, on_deadline, stream);
    method->server_streaming(context, message, stream);
    json_decref(message);
}

/* ---- client streaming ---- */

typedef struct client_call {
    http_request *request;
    const connect_client_streaming *method;
    void *state;    /* what the method's open returned */
    buffer pending; /* the bytes of an envelope not complete yet */
} client_call;

static void close_client_call(client_call *call)
{
    call->method->close(call->state);
    buffer_free(&call->pending);
    free(call);
}

/* Hands every complete envelope in `pending` to the method; false with the error set. */
static bool deliver_envelopes(client_call *call, connect_error *error)
{
    for (;;) {
        unsigned flags = 0;
        const char *payload = NULL;
        size_t payload_length = 0, used = 0;
        int read = read_envelope(buffer_head(&call->pending), buffer_size(&call->pending), &flags,
                                 &payload, &payload_length, &used, error);
        if (read <= 0)
            return read == 0;
        json_t *message = parse_json_message(payload, payload_length, error);
        bool delivered = message && call->method->on_message(call->state, message, error);
        json_decref(message);
        if (!delivered)
            return false;
        buffer_consume(&call->pending, used);
    }
}

static int on_client_data(void *arg, const char *data, size_t length)
{
    client_call *call = arg;
    connect_error error = {0};
    buffer_append(&call->pending, data, length);
    if (deliver_envelopes(call, &error))
        return 0;
    respond_stream_at_once(call->request, NULL, &error);
    close_client_call(call);
    return -1;
}

static void on_client_end(http_request *request, void *arg)
{
    client_call *call = arg;
    connect_error error = {0};
    json_t *response = NULL;
    if (buffer_size(&call->pending) > 0)
        connect_fail(&error, "invalid_argument",
                     "the request body ended inside an envelope (%zu bytes left over): send whole "
                     "envelopes",
                     buffer_size(&call->pending));
    else
        response = call->method->on_end(call->state, &error);
    respond_stream_at_once(request, response, response ? NULL : &error);
    close_client_call(call);
}

static void on_client_abort(void *arg)
{
    close_client_call(arg);
}

static const http_body_receiver client_body_receiver = {on_client_data, on_client_end,
                                                        on_client_abort};

static void serve_client_streaming(http_request *request, const connect_method *method,
                                   void *context)
{
    connect_error error = {0};
    int64_t timeout_ms = 0;
    void *state = check_headers(request, &timeout_ms, &error)
                      ? method->client_streaming->open(context, &error)
                      : NULL;
    if (!state) {
        respond_stream_at_once(request, NULL, &error);
        return;
    }
    client_call *call = calloc(1, sizeof *call);
    if (!call)
        die("out of memory");
    call->request = request;
    call->method = method->client_streaming;
    call->state = state;
    if (http_body_is_streamed(request)) {
        http_receive_body(request, &client_body_receiver, call);
        return;
    }
    /* a route that did not stream the body: the whole of it is here */
    size_t length = 0;
    const char *body = http_body(request, &length);
    if (on_client_data(call, body, length) == 0)
        on_client_end(request, call);
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

bool connect_streams_body(const connect_service *const *services, const char *method,
                          const char *path)
{
    char service[128];
    const char *slash = path[0] == '/' ? strchr(path + 1, '/') : NULL;
    if (strcmp(method, "POST") != 0 || !slash || (size_t)(slash - path - 1) >= sizeof service)
        return false;
    memcpy(service, path + 1, (size_t)(slash - path - 1));
    service[slash - path - 1] = '\0';
    const connect_method *found = find_method(services, service, slash + 1);
    return found && found->client_streaming;
}

static void respond_unimplemented(http_request *request, bool streaming, const char *service,
                                  const char *method)
{
    connect_error error = {0};
    connect_fail(&error, "unimplemented",
                 "cellbox does not serve %s/%s (yet): docs/api.md lists the Connect-RPC methods "
                 "it serves; run commands with runCode or cellbox's /v1 commands",
                 service, method);
    if (streaming)
        respond_stream_at_once(request, NULL, &error);
    else
        respond_error(request, &error);
}

/* Connect answers a codec the method does not speak with 415 (no Connect body is required). */
static void respond_unsupported_codec(http_request *request, const char *service,
                                      const char *method, const char *accepted)
{
    connect_error error = {0};
    const char *type = http_header(request, "Content-Type");
    connect_fail(&error, "unimplemented",
                 "Content-Type '%.64s' is not served for %s/%s: send %s (protojson; binary "
                 "protobuf is not served)",
                 type ? type : "(none)", service, method, accepted);
    http_add_response_header(request, "Accept-Post", accepted);
    http_respond_json(request, 415,
                      json_pack("{s:s, s:s}", "code", error.code, "message", error.message));
}

/* A streaming call's Connect-Content-Encoding: only identity is spoken. */
static bool refuse_compression(http_request *request)
{
    const char *encoding = http_header(request, "Connect-Content-Encoding");
    if (!encoding || strcasecmp(encoding, "identity") == 0)
        return false;
    connect_error error = {0};
    connect_fail(&error, "unimplemented",
                 "Connect-Content-Encoding '%.32s' is not served: cellbox speaks identity; send "
                 "messages uncompressed",
                 encoding);
    respond_stream_at_once(request, NULL, &error);
    return true;
}

static void serve_unary(http_request *request, const connect_method *found, void *context)
{
    connect_error error = {0};
    int64_t timeout_ms = 0;
    json_t *message =
        check_headers(request, &timeout_ms, &error) ? parse_message(request, &error) : NULL;
    json_t *response = message ? found->unary(context, message, &error) : NULL;
    if (response)
        http_respond_json(request, 200, response);
    else
        respond_error(request, &error);
    json_decref(message);
}

void connect_serve(http_request *request, const connect_service *const *services,
                   const char *service, const char *method, void *context)
{
    const connect_method *found = find_method(services, service, method);
    const char *type = http_header(request, "Content-Type");
    bool streaming_protocol = type && strncasecmp(type, "application/connect+", 20) == 0;
    bool streaming_method = found && !found->unary;
    if (!found || !(found->unary || found->server_streaming || found->client_streaming)) {
        respond_unimplemented(request, streaming_protocol, service, method);
    } else if (!http_method_is(request, "POST")) {
        http_respond_method_not_allowed(request, "POST");
    } else if (!streaming_method) {
        if (content_type_is(request, "application/json"))
            serve_unary(request, found, context);
        else
            respond_unsupported_codec(request, service, method, "application/json");
    } else if (!content_type_is(request, STREAMING_TYPE)) {
        respond_unsupported_codec(request, service, method, STREAMING_TYPE);
    } else if (!refuse_compression(request)) {
        if (found->server_streaming)
            serve_server_streaming(request, found, context);
        else
            serve_client_streaming(request, found, context);
    }
}
