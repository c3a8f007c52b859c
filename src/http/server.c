#include "http/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/buffer.h"
#include "common/heap.h"
#include "common/log.h"
#include "common/loop.h"
#include "http/admission.h"
#include "http/outbound.h"
#include "common/text.h"
#include "http/linger.h"
#include "http/server_connection.h"

/* Headers added to one response, kept until it is queued. */
typedef struct response_header {
    char *name, *value;
    struct response_header *next;
} response_header;

typedef struct pending_upgrade {
    char accept[64];            /* Sec-WebSocket-Accept */
    size_t max_message;
    const websocket_callbacks *callbacks;
    http_websocket_open on_open;
    http_raw_upgrade_open on_raw_open; /* http_upgrade_raw: the socket itself is handed over */
    void *arg;
    bool opened;
} pending_upgrade;

struct http_stream {
    http_request *request;
    buffer queue;               /* written, not yet handed to libmicrohttpd */
    bool ended;                 /* http_stream_end was called */
    bool suspended;             /* the connection waits for more to send */
    bool peer_gone;             /* the client hung up while we waited */
    bool lines;                 /* NDJSON: a line can tell the client why the stream ends */
    bool evicted;               /* ended for the daemon-wide queue ceiling */
    outbound_queue outbound;    /* `queue`'s share of the daemon-wide count */
    int peer_fd;                /* a duplicate of the client's socket, watched for hang-ups */
    loop_watch peer_watch;
    http_stream_closed on_closed;
    void (*on_drained)(void *arg);
    void *arg;
};

struct http_request {
    struct MHD_Connection *connection;
    http_stream *stream;        /* a streaming response, until the connection is done with it */
    bool streams_body;          /* dispatched before the body: it goes to `receiver` */
    bool body_started, body_complete;
    struct MHD_Response *deferred; /* answered while the body was still arriving */
    int deferred_status;
    const http_body_receiver *receiver;
    void *receiver_arg;
    const char *method;
    char *path;                 /* relative to the base URL */
    buffer body;
    bool body_too_large;
    bool body_read;             /* libmicrohttpd has passed us the whole body */
    bool framing_refused;       /* answered 400/501 for its framing: its body is not trusted */
    bool answered_early;        /* answered while the client still had a body to send */
    bool responded;
    bool admitted_by_token; /* the daemon's token, not a credential the API admits */
    bool answer_later;          /* suspended until a response is given (http_respond_later) */
    bool body_paused;           /* suspended until the receiver takes more (http_pause_body) */
    response_header *headers;
    pending_upgrade *upgrade;   /* set once a WebSocket handshake was answered */
};

static struct {
    struct MHD_Daemon *daemon;
    http_server_options options;
    http_dispatch dispatch;
    loop_watch watch;
} server;

static const char *reason_phrase(int status)
{
    if (status == 413)
        return "Request Entity Too Large"; /* Kernel Gateway's (Tornado's) wording */
    const char *phrase = MHD_get_reason_phrase_for((unsigned)status);
    return phrase && *phrase ? phrase : "Error";
}

const char *http_method(const http_request *request) { return request->method; }
const char *http_path(const http_request *request) { return request->path; }

bool http_method_is(const http_request *request, const char *method)
{
    return strcmp(request->method, method) == 0;
}
const char *http_base_url(void) { return server.options.base_url; }

struct MHD_Connection *http_request_connection(http_request *request)
{
    return request->connection;
}

const char *http_header(const http_request *request, const char *name)
{
    return MHD_lookup_connection_value(request->connection, MHD_HEADER_KIND, name);
}

const char *http_query(const http_request *request, const char *name)
{
    return MHD_lookup_connection_value(request->connection, MHD_GET_ARGUMENT_KIND, name);
}

typedef struct query_collector {
    const char *prefix;
    json_t *out;
} query_collector;

static enum MHD_Result collect_query(void *cls, enum MHD_ValueKind kind, const char *key,
                                     const char *value)
{
    query_collector *collector = cls;
    size_t n = strlen(collector->prefix);
    if (key && strncmp(key, collector->prefix, n) == 0 && key[n])
        json_object_set_new(collector->out, key + n, text_json_string(value ? value : ""));
    return MHD_YES;
}

void http_query_each(const http_request *request, const char *prefix, json_t *out)
{
    query_collector collector = {prefix, out};
    MHD_get_connection_values(request->connection, MHD_GET_ARGUMENT_KIND, collect_query, &collector);
}

typedef struct value_visitor {
    void (*visit)(void *arg, const char *name, const char *value);
    void *arg;
} value_visitor;

static enum MHD_Result visit_value(void *cls, enum MHD_ValueKind kind, const char *key,
                                   const char *value)
{
    value_visitor *visitor = cls;
    if (key)
        visitor->visit(visitor->arg, key, value);
    return MHD_YES;
}

void http_each_header(const http_request *request,
                      void (*visit)(void *arg, const char *name, const char *value), void *arg)
{
    value_visitor visitor = {visit, arg};
    MHD_get_connection_values(request->connection, MHD_HEADER_KIND, visit_value, &visitor);
}

void http_each_query_argument(const http_request *request,
                              void (*visit)(void *arg, const char *name, const char *value),
                              void *arg)
{
    value_visitor visitor = {visit, arg};
    MHD_get_connection_values(request->connection, MHD_GET_ARGUMENT_KIND, visit_value, &visitor);
}

const char *http_body(const http_request *request, size_t *length)
{
    static const char empty[] = "";
    *length = buffer_size(&request->body);
    return *length ? buffer_head(&request->body) : empty;
}

/* True if the comma-separated header value lists `token` (case-insensitive). */
static bool header_lists(const char *value, const char *token)
{
    size_t token_length = strlen(token);
    while (value && *value) {
        while (*value == ' ' || *value == ',' || *value == '\t')
            value++;
        size_t n = strcspn(value, ",");
        while (n > 0 && (value[n - 1] == ' ' || value[n - 1] == '\t'))
            n--;
        if (n == token_length && strncasecmp(value, token, n) == 0)
            return true;
        value += strcspn(value, ",");
    }
    return false;
}

bool http_is_websocket_upgrade(const http_request *request)
{
    return strcmp(request->method, "GET") == 0 &&
           header_lists(http_header(request, "Upgrade"), "websocket");
}

void http_add_response_header(http_request *request, const char *name, const char *value)
{
    response_header *header = calloc(1, sizeof *header);
    if (!header || !(header->name = strdup(name)) || !(header->value = strdup(value)))
        die("out of memory");
    header->next = request->headers;
    request->headers = header;
}

static void add_cors_headers(struct MHD_Response *response)
{
    const http_cors *cors = &server.options.cors;
    char number[32];
    if (cors->allow_origin && *cors->allow_origin)
        MHD_add_response_header(response, "Access-Control-Allow-Origin", cors->allow_origin);
    if (cors->allow_headers && *cors->allow_headers)
        MHD_add_response_header(response, "Access-Control-Allow-Headers", cors->allow_headers);
    if (cors->allow_methods && *cors->allow_methods)
        MHD_add_response_header(response, "Access-Control-Allow-Methods", cors->allow_methods);
    if (cors->expose_headers && *cors->expose_headers)
        MHD_add_response_header(response, "Access-Control-Expose-Headers", cors->expose_headers);
    if (cors->allow_credentials)
        MHD_add_response_header(response, "Access-Control-Allow-Credentials", "true");
    if (cors->max_age > 0) {
        snprintf(number, sizeof number, "%d", cors->max_age);
        MHD_add_response_header(response, "Access-Control-Max-Age", number);
    }
}

/* Whether the client announced a body (which it may still be sending when we answer). */
static bool request_has_body(const http_request *request)
{
    const char *length = http_header(request, "Content-Length");
    return (length && strcmp(length, "0") != 0) || http_header(request, "Transfer-Encoding");
}

/* Our answer went out before the client's body was read: the socket is kept a while longer
   (http/linger.c) so that the client reads the answer instead of a reset. */
static void linger_after_answer(struct MHD_Connection *connection)
{
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (info)
        linger_start(info->connect_fd);
}

static void queue_response(http_request *request, int status, struct MHD_Response *response)
{
    if (!response)
        die("out of memory building a response");
    add_cors_headers(response);
    for (response_header *h = request->headers; h; h = h->next)
        MHD_add_response_header(response, h->name, h->value);
    /* libmicrohttpd takes a response before the body or after all of it, not in between: one
       given mid-upload (an error) waits, and the rest of the body is discarded meanwhile. */
    if (request->streams_body && request->body_started && !request->body_complete) {
        request->deferred = response;
        request->deferred_status = status;
        request->responded = true;
        return;
    }
    if (MHD_queue_response(request->connection, (unsigned)status, response) != MHD_YES)
        log_warn("could not queue a %d response for %s %s", status, request->method, request->path);
    MHD_destroy_response(response);
    request->responded = true;
    if (request->answer_later) { /* the response wakes the connection that slept for it */
        request->answer_later = false;
        MHD_resume_connection(request->connection);
    }
    request->answered_early =
        !request->body_read && status != MHD_HTTP_SWITCHING_PROTOCOLS && request_has_body(request);
}

void http_respond(http_request *request, int status, const char *content_type, const void *body,
                  size_t length)
{
    if (request->responded) {
        log_error("BUG: second response to %s %s", request->method, request->path);
        return;
    }
    struct MHD_Response *response =
        MHD_create_response_from_buffer(length, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (content_type)
        MHD_add_response_header(response, "Content-Type", content_type);
    queue_response(request, status, response);
}

/* Compact JSON text of `value` (stolen), or NULL when there is no value: json_pack() gives NULL
   for a string that is not UTF-8, so outside text must go through text_json_string(); a site
   that forgot costs that one answer, never the daemon. */
static char *encode_json(json_t *value, const http_request *request)
{
    if (!value) {
        log_error("BUG: the answer to %s %s could not be built (text that is not UTF-8?)",
                  request->method, request->path);
        return NULL;
    }
    char *text = json_dumps(value, JSON_COMPACT);
    json_decref(value);
    if (!text)
        die("out of memory encoding JSON");
    return text;
}

void http_respond_json(http_request *request, int status, json_t *body)
{
    char *text = encode_json(body, request);
    if (!text) {
        static const char fallback[] =
            "{\"reason\":\"Internal Server Error\",\"message\":\"the answer could not be "
            "encoded as JSON; this is a bug in cellboxd: please report the request\"}";
        http_respond(request, 500, "application/json", fallback, sizeof fallback - 1);
        return;
    }
    http_respond(request, status, "application/json", text, strlen(text));
    free(text);
}

void http_respond_error(http_request *request, int status, const char *fmt, ...)
{
    char message[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    /* The message quotes the request (paths, ids, values), and vsnprintf may have cut a
       character in two: text_json_string keeps it a valid JSON string either way. */
    http_respond_json(request, status,
                      json_pack("{s:s, s:o}", "reason", reason_phrase(status), "message",
                                text_json_string(message)));
}

void http_respond_method_not_allowed(http_request *request, const char *allow)
{
    http_add_response_header(request, "Allow", allow);
    http_respond_error(request, 405, "%s is not allowed on %s: use %s", request->method,
                       request->path, allow);
}

/* ---- streaming responses ---- */

#define STREAM_BLOCK_SIZE (64 * 1024)

static void resume_stream(http_stream *stream)
{
    if (stream->suspended) {
        stream->suspended = false;
        MHD_resume_connection(stream->request->connection);
    }
}

/* libmicrohttpd asks for the next piece: what is queued, the end, or nothing yet (then the
   connection sleeps until http_stream_write wakes it). */
static ssize_t read_stream(void *cls, uint64_t position, char *out, size_t max)
{
    http_stream *stream = cls;
    if (stream->peer_gone && !(stream->ended && buffer_size(&stream->queue) == 0))
        return MHD_CONTENT_READER_END_WITH_ERROR;
    size_t queued = buffer_size(&stream->queue);
    if (queued > 0) {
        size_t n = queued < max ? queued : max;
        memcpy(out, buffer_head(&stream->queue), n);
        buffer_consume(&stream->queue, n);
        outbound_update(&stream->outbound, buffer_size(&stream->queue));
        if (buffer_size(&stream->queue) == 0 && stream->on_drained && !stream->ended)
            stream->on_drained(stream->arg);
        return (ssize_t)n;
    }
    if (stream->ended)
        return stream->evicted && !stream->lines ? MHD_CONTENT_READER_END_WITH_ERROR
                                                 : MHD_CONTENT_READER_END_OF_STREAM;
    stream->suspended = true;
    MHD_suspend_connection(stream->request->connection);
    return 0;
}

/* A suspended connection is not looked at by libmicrohttpd, so a client that hangs up while
   nothing is being sent (a long silent command) would go unnoticed: we watch its socket for the
   hang-up ourselves and end the response then. */
static void on_peer_event(void *owner, uint32_t events)
{
    http_stream *stream = owner;
    if (!(events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)))
        return;
    stream->peer_gone = true;
    loop_watch_remove(&stream->peer_watch);
    resume_stream(stream);
}

static void watch_peer(http_stream *stream)
{
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(stream->request->connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    stream->peer_fd = info ? fcntl(info->connect_fd, F_DUPFD_CLOEXEC, 3) : -1;
    if (stream->peer_fd >= 0)
        loop_watch_add(&stream->peer_watch, stream->peer_fd, EPOLLRDHUP, on_peer_event, stream);
}

static void unwatch_peer(http_stream *stream)
{
    if (stream->peer_fd < 0)
        return;
    loop_watch_remove(&stream->peer_watch);
    close(stream->peer_fd);
    stream->peer_fd = -1;
}

/* Past the daemon-wide ceiling the stream that queues the most ends here. Its queue is cut after
   the line the client is in the middle of; an NDJSON stream then gets an error line saying why,
   any other body is cut short (an aborted chunked response, not a document that looks whole). */
static void evict_stream(void *owner, size_t total)
{
    http_stream *stream = owner;
    size_t queued = buffer_size(&stream->queue);
    const char *newline = stream->lines ? memchr(buffer_head(&stream->queue), '\n', queued) : NULL;
    size_t kept = newline ? (size_t)(newline - buffer_head(&stream->queue)) + 1 : 0;
    log_warn("http: ending the response to %s %s: %zu bytes unread, %zu queued for slow clients "
             "in all", stream->request->method, stream->request->path, queued, total);
    buffer_truncate(&stream->queue, kept);
    if (stream->lines) {
        char value[400];
        snprintf(value, sizeof value, "the server's memory for output waiting on slow clients "
                 "reached --max-queued-bytes (%zu bytes); this stream had %zu bytes unread, the "
                 "most of any connection, and was ended: read the stream as it comes, or ask the "
                 "operator to raise --max-queued-bytes", outbound_ceiling(), queued);
        http_stream_write_line(stream, json_pack("{s:s, s:s, s:s, s:s}", "type", "error", "name",
                                                 "QueueLimitExceeded", "value", value,
                                                 "traceback", value));
    }
    stream->evicted = true;
    http_stream_end(stream);
}

http_stream *http_respond_stream(http_request *request, int status, const char *content_type,
                                 http_stream_closed on_closed, void *arg)
{
    http_stream *stream = calloc(1, sizeof *stream);
    if (!stream)
        die("out of memory");
    stream->request = request;
    stream->peer_fd = -1;
    stream->on_closed = on_closed;
    stream->arg = arg;
    stream->lines = content_type && strcmp(content_type, "application/x-ndjson") == 0;
    outbound_add(&stream->outbound, evict_stream, stream);
    request->stream = stream;
    struct MHD_Response *response =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, STREAM_BLOCK_SIZE, read_stream, stream, NULL);
    if (content_type)
        MHD_add_response_header(response, "Content-Type", content_type);
    /* Proxies must pass lines on as they come. */
    MHD_add_response_header(response, "Cache-Control", "no-cache");
    MHD_add_response_header(response, "X-Accel-Buffering", "no");
    queue_response(request, status, response);
    watch_peer(stream);
    return stream;
}

void http_stream_write(http_stream *stream, const void *data, size_t length)
{
    if (stream->ended || length == 0)
        return;
    buffer_append(&stream->queue, data, length);
    outbound_update(&stream->outbound, buffer_size(&stream->queue)); /* may end this stream */
    resume_stream(stream);
}

void http_stream_write_line(http_stream *stream, json_t *value)
{
    char *text = encode_json(value, stream->request);
    if (!text)
        return;
    size_t n = strlen(text);
    http_stream_write(stream, text, n);
    http_stream_write(stream, "\n", 1);
    free(text);
}

size_t http_stream_queued(const http_stream *stream) { return buffer_size(&stream->queue); }

void http_stream_on_drained(http_stream *stream, void (*on_drained)(void *arg))
{
    stream->on_drained = on_drained;
}

void http_stream_end(http_stream *stream)
{
    stream->ended = true;
    resume_stream(stream);
}

void http_stream_finish_json(http_stream *stream, json_t *value)
{
    char *text = encode_json(value, stream->request);
    if (text)
        http_stream_write(stream, text, strlen(text));
    free(text);
    http_stream_end(stream);
}

void http_respond_fd(http_request *request, int status, const char *content_type, int fd,
                     size_t length)
{
    struct MHD_Response *response = MHD_create_response_from_fd((uint64_t)length, fd);
    if (content_type)
        MHD_add_response_header(response, "Content-Type", content_type);
    queue_response(request, status, response);
}

/* ---- streaming request bodies ---- */

void http_receive_body(http_request *request, const http_body_receiver *receiver, void *arg)
{
    request->receiver = receiver;
    request->receiver_arg = arg;
}

bool http_responded(const http_request *request) { return request->responded; }

bool http_body_is_streamed(const http_request *request) { return request->streams_body; }

bool http_admitted_by_token(const http_request *request) { return request->admitted_by_token; }

void http_pause_body(http_request *request)
{
    if (request->body_paused || request->body_complete)
        return;
    request->body_paused = true;
    MHD_suspend_connection(request->connection);
}

void http_resume_body(http_request *request)
{
    if (!request->body_paused)
        return;
    request->body_paused = false;
    MHD_resume_connection(request->connection);
}

/* libmicrohttpd calls the handler of a request whose body is in again and again until it has a
   response; a suspended connection is left alone until resumed, which queue_response does. */
void http_respond_later(http_request *request)
{
    if (request->responded || request->answer_later)
        return;
    request->answer_later = true;
    MHD_suspend_connection(request->connection);
}

/* ---- authentication ---- */

static bool token_equals(const char *given)
{
    const char *token = server.options.token;
    size_t n = strlen(token);
    return given && strlen(given) == n && CRYPTO_memcmp(given, token, n) == 0;
}

/* E2B's SDK (api/e2b.c) sends the token as its API key to the control plane and as the access
   tokens cellbox handed out to calls into a sandbox; its Authorization header, when present,
   names the sandbox user ("Basic user:"), not a credential. */
static const char *const e2b_token_headers[] = {"X-API-Key", "X-Access-Token",
                                                "E2B-Traffic-Access-Token"};

/* Kernel Gateway checks ?token= first, then "Authorization: token <t>" (jupyter_server also
   takes "bearer", and so do we), then E2B's headers. */
static bool request_is_authorized(const http_request *request)
{
    if (!*server.options.token)
        return true;
    const char *query = http_query(request, "token");
    if (query) /* given, it decides: a wrong ?token= is not rescued by a header */
        return token_equals(query);
    const char *auth = http_header(request, "Authorization");
    if (auth && strncasecmp(auth, "token ", 6) == 0)
        return token_equals(auth + 6);
    if (auth && strncasecmp(auth, "bearer ", 7) == 0)
        return token_equals(auth + 7);
    for (size_t i = 0; i < sizeof e2b_token_headers / sizeof *e2b_token_headers; i++) {
        const char *given = http_header(request, e2b_token_headers[i]);
        if (given)
            return token_equals(given);
    }
    return false;
}

/* ---- WebSocket handshake ---- */

static void close_upgraded_socket(void *urh)
{
    MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
}

static void on_upgraded(void *cls, struct MHD_Connection *connection, void *con_cls,
                        const char *extra_in, size_t extra_in_size, MHD_socket sock,
                        struct MHD_UpgradeResponseHandle *urh)
{
    http_request *request = con_cls;
    pending_upgrade *upgrade = request->upgrade;
    upgrade->opened = true;
    if (upgrade->on_raw_open) {
        upgrade->on_raw_open(upgrade->arg, sock, extra_in, extra_in_size, urh);
        return;
    }
    websocket *socket = websocket_start(sock, extra_in, extra_in_size, upgrade->max_message,
                                        upgrade->callbacks, upgrade->arg, close_upgraded_socket, urh);
    upgrade->on_open(upgrade->arg, socket);
}

static bool websocket_accept_key(const char *key, char out[64])
{
    static const char guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
    char joined[128];
    unsigned char digest[SHA_DIGEST_LENGTH];
    if (!key || strlen(key) > 64)
        return false;
    int n = snprintf(joined, sizeof joined, "%s%s", key, guid);
    SHA1((const unsigned char *)joined, (size_t)n, digest);
    EVP_EncodeBlock((unsigned char *)out, digest, SHA_DIGEST_LENGTH);
    return true;
}

void http_upgrade_websocket(http_request *request, const char *subprotocol, size_t max_message,
                            const websocket_callbacks *callbacks, http_websocket_open on_open,
                            void *arg)
{
    const char *version = http_header(request, "Sec-WebSocket-Version");
    pending_upgrade *upgrade = calloc(1, sizeof *upgrade);
    if (!upgrade)
        die("out of memory");
    if (!version || strcmp(version, "13") != 0 ||
        !websocket_accept_key(http_header(request, "Sec-WebSocket-Key"), upgrade->accept)) {
        free(upgrade);
        on_open(arg, NULL);
        http_add_response_header(request, "Sec-WebSocket-Version", "13");
        http_respond_error(request, 400, "a WebSocket upgrade needs Sec-WebSocket-Key and "
                                         "Sec-WebSocket-Version: 13");
        return;
    }
    upgrade->max_message = max_message;
    upgrade->callbacks = callbacks;
    upgrade->on_open = on_open;
    upgrade->arg = arg;
    request->upgrade = upgrade;
    struct MHD_Response *response = MHD_create_response_for_upgrade(on_upgraded, NULL);
    MHD_add_response_header(response, "Upgrade", "websocket");
    MHD_add_response_header(response, "Sec-WebSocket-Accept", upgrade->accept);
    if (subprotocol)
        MHD_add_response_header(response, "Sec-WebSocket-Protocol", subprotocol);
    queue_response(request, MHD_HTTP_SWITCHING_PROTOCOLS, response);
}

void http_upgrade_raw(http_request *request, http_raw_upgrade_open on_open, void *arg)
{
    pending_upgrade *upgrade = calloc(1, sizeof *upgrade);
    if (!upgrade)
        die("out of memory");
    upgrade->on_raw_open = on_open;
    upgrade->arg = arg;
    request->upgrade = upgrade;
    queue_response(request, MHD_HTTP_SWITCHING_PROTOCOLS,
                   MHD_create_response_for_upgrade(on_upgraded, NULL));
}

void http_upgraded_close(void *handle) { close_upgraded_socket(handle); }

/* ---- request life cycle ---- */

static void respond_preflight(http_request *request)
{
    http_respond(request, 204, NULL, "", 0);
}

/* Token and preflight checks: true when the request may go on to dispatch. */
static bool admit_request(http_request *request)
{
    if (strcmp(request->method, "OPTIONS") == 0) {
        respond_preflight(request); /* CORS preflights are never authenticated (as in KG) */
        return false;
    }
    request->admitted_by_token = request_is_authorized(request);
    if (!request->admitted_by_token &&
        !(server.options.admits && server.options.admits(request))) {
        http_respond_error(request, 401, "a valid token is required: pass ?token= or the header "
                                         "'Authorization: token <token>'");
        return false;
    }
    return true;
}

/* A streamed-body request is dispatched as soon as its headers are in. */
static void start_streamed_request(http_request *request)
{
    if (!admit_request(request))
        return;
    server.dispatch(request);
    if (!request->responded && !request->receiver && !request->answer_later)
        http_respond_error(request, 500, "no response was produced for %s %s", request->method,
                           request->path);
}

static void handle_complete_request(http_request *request)
{
    if (!admit_request(request))
        return;
    if (request->body_too_large) {
        http_respond_error(request, 413, "request body is larger than the limit of %zu bytes",
                           server.options.max_body_size);
        return;
    }
    server.dispatch(request);
    if (!request->responded && !request->answer_later)
        http_respond_error(request, 500, "no response was produced for %s %s", request->method,
                           request->path);
}

/* Strips the base URL; NULL when the URL lies outside it. */
static char *path_below_base(const char *url)
{
    const char *base = server.options.base_url;
    size_t base_length = strlen(base); /* always ends with '/' */
    if (strncmp(url, base, base_length) == 0) {
        char *path = malloc(strlen(url) - base_length + 2);
        if (!path)
            die("out of memory");
        path[0] = '/';
        strcpy(path + 1, url + base_length);
        return path;
    }
    if (strlen(url) + 1 == base_length && strncmp(url, base, base_length - 1) == 0)
        return strdup("/");
    return NULL;
}

static http_request *request_new(struct MHD_Connection *connection, const char *url,
                                 const char *method)
{
    http_request *request = calloc(1, sizeof *request);
    if (!request)
        die("out of memory");
    request->connection = connection;
    request->method = method;
    request->path = path_below_base(url);
    return request;
}

/* ---- requests that could be read two ways ---- */

/* libmicrohttpd decodes %XX in the path in place and hands the access handler a C string, so a
   %00 used to end the path early (DELETE /v1/sandboxes/ID%00/files deleted the sandbox ID). The
   raw request line is only seen here, before that decoding: its path is decoded once more, on a
   copy and by the library's own decoder, and checked whole. What this returns becomes the first
   *con_cls of the request: the address of one of these markers when the line is refused. */
static const char path_has_control_bytes = 1, url_too_long = 1;

/* libmicrohttpd answers a request line or headers that do not fit a connection's memory itself,
   with a fixed HTML page. Its memory is made larger than these limits so that the daemon is the
   one that refuses (414, 431), with its JSON body; only heads past the memory still get HTML. */
#define CONNECTION_MEMORY (128 * 1024)
#define MAX_URL_BYTES (24 * 1024)
#define MAX_HEADER_BYTES (32 * 1024)

static void *inspect_request_line(void *cls, const char *uri, struct MHD_Connection *connection)
{
    if (strlen(uri) > MAX_URL_BYTES)
        return (void *)&url_too_long;
    char *path = strndup(uri, strcspn(uri, "?"));
    if (!path)
        die("out of memory");
    size_t length = MHD_http_unescape(path);
    bool refused = text_has_control_bytes(path, length);
    free(path);
    return refused ? (void *)&path_has_control_bytes : NULL;
}

typedef struct header_scan {
    size_t header_bytes;         /* names and values, with ": " and CRLF */
    const char *content_length;  /* the first Content-Length */
    bool content_lengths_differ; /* a second one with another value */
    const char *transfer_encoding;
} header_scan;

typedef struct query_scan {
    bool refused;        /* a key or value holds a control byte */
    char parameter[128]; /* its key, up to the first NUL */
} query_scan;

static enum MHD_Result scan_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                   size_t key_size, const char *value, size_t value_size)
{
    header_scan *scan = cls;
    scan->header_bytes += key_size + value_size + 4;
    if (!value)
        return MHD_YES;
    if (strcasecmp(key, "Content-Length") == 0) {
        if (scan->content_length && strcmp(scan->content_length, value) != 0)
            scan->content_lengths_differ = true;
        scan->content_length = scan->content_length ? scan->content_length : value;
    } else if (strcasecmp(key, "Transfer-Encoding") == 0) {
        scan->transfer_encoding = value;
    }
    return MHD_YES;
}

/* The query's keys and values come decoded with their lengths, so a %00 inside one shows. */
static enum MHD_Result scan_query_argument(void *cls, enum MHD_ValueKind kind, const char *key,
                                           size_t key_size, const char *value, size_t value_size)
{
    query_scan *scan = cls;
    if (!text_has_control_bytes(key, key_size) &&
        !(value && text_has_control_bytes(value, value_size)))
        return MHD_YES;
    scan->refused = true;
    snprintf(scan->parameter, sizeof scan->parameter, "%.*s", (int)strnlen(key, key_size), key);
    return MHD_NO;
}

/* Answers (and returns true) a request whose head is too large, whose framing a proxy in front
   could read differently (request smuggling), or whose body coding we cannot read. */
static bool refuse_unreadable_head(http_request *request, bool url_refused)
{
    header_scan scan = {0};
    MHD_get_connection_values_n(request->connection, MHD_HEADER_KIND, scan_header, &scan);
    if (url_refused) {
        http_respond_error(request, 414,
                           "the URL is longer than %d bytes: send long values in "
                           "a request body",
                           MAX_URL_BYTES);
    } else if (scan.header_bytes > MAX_HEADER_BYTES) {
        http_respond_error(request, 431,
                           "the request's headers add up to more than %d bytes: "
                           "send fewer or shorter ones",
                           MAX_HEADER_BYTES);
    } else if (scan.content_lengths_differ) {
        http_respond_error(request, 400,
                           "the request has two different Content-Length headers: "
                           "send one");
    } else if (scan.transfer_encoding && scan.content_length) {
        http_respond_error(request, 400,
                           "the request has both Content-Length and "
                           "Transfer-Encoding: send one of them");
    } else if (scan.transfer_encoding && strcasecmp(scan.transfer_encoding, "chunked") != 0) {
        http_respond_error(request, 501,
                           "Transfer-Encoding: %s is not supported: send the body "
                           "with Content-Length or Transfer-Encoding: chunked",
                           scan.transfer_encoding);
    } else {
        return false;
    }
    return true;
}

/* Answers (and returns true) a request whose path or query holds a NUL or control byte: no id,
   file path or value the daemon acts on may contain one, and a C string would end at a NUL. */
static bool refuse_control_bytes(http_request *request, bool in_path)
{
    query_scan scan = {0};
    if (in_path) {
        http_respond_error(request, 400,
                           "the URL path holds a NUL or control byte (%%00-%%1F or "
                           "%%7F): ids and paths cannot contain them");
        return true;
    }
    MHD_get_connection_values_n(request->connection, MHD_GET_ARGUMENT_KIND, scan_query_argument,
                                &scan);
    if (!scan.refused)
        return false;
    http_respond_error(request, 400,
                       "query parameter '%s' holds a NUL or control byte (%%00-%%1F "
                       "or %%7F): values cannot contain them",
                       scan.parameter);
    return true;
}

static bool declared_body_too_large(struct MHD_Connection *connection)
{
    const char *length = MHD_lookup_connection_value(connection, MHD_HEADER_KIND, "Content-Length");
    return length && strtoull(length, NULL, 10) > server.options.max_body_size;
}

/* A connection past a limit is answered, then closed; the client knows to come back later. */
static bool refuse_over_limit(http_request *request)
{
    admission_verdict verdict = admission_verdict_of(request->connection);
    if (verdict == ADMISSION_ADMITTED)
        return false;
    http_add_response_header(request, "Connection", "close");
    http_add_response_header(request, "Retry-After", "1");
    if (verdict == ADMISSION_OVER_TOTAL)
        http_respond_error(request, 503, "the server has its most connections open (--max-connections "
                           "%u): close idle connections or retry later", admission_max_total());
    else
        http_respond_error(request, 429, "this address has its most connections open "
                           "(--max-connections-per-ip %u): close some of yours (idle keep-alive "
                           "connections and WebSockets count) and retry",
                           admission_max_per_address());
    return true;
}

/* The first call for a request: its head is in. Refusals that need no body are answered here;
   a request whose route takes its body as a stream is dispatched now. */
static void begin_request(struct MHD_Connection *connection, const char *url, const char *method,
                          void **con_cls)
{
    http_request *request = *con_cls;
    bool path_refused = request == (const void *)&path_has_control_bytes;
    bool url_refused = request == (const void *)&url_too_long;
    request = request_new(connection, url, method);
    *con_cls = request;
    if (refuse_over_limit(request))
        return;
    if (refuse_unreadable_head(request, url_refused)) {
        request->framing_refused = true; /* closed without reading: its body is not trusted */
    } else if (refuse_control_bytes(request, path_refused)) {
        /* answered; the body, if any, is not read */
    } else if (!request->path) {
        http_respond_error(request, 404, "%s is outside the base URL %s", url,
                           server.options.base_url);
    } else if (server.options.streams_body &&
               server.options.streams_body(request)) {
        request->streams_body = true;
        start_streamed_request(request);
    } else if (declared_body_too_large(connection)) {
        /* Answer before reading the body: a client sending gigabytes is not kept waiting. */
        http_respond_error(request, 413, "request body is larger than the limit of %zu bytes",
                           server.options.max_body_size);
    }
}

/* A streamed body: each piece goes to the route's receiver as it comes; at its end the receiver
   answers (or the answer it deferred goes out). */
static void continue_streamed_request(struct MHD_Connection *connection, http_request *request,
                                      const char *upload_data, size_t *upload_data_size)
{
    if (*upload_data_size > 0) {
        request->body_started = true;
        if (!request->responded && request->receiver &&
            request->receiver->on_data(request->receiver_arg, upload_data, *upload_data_size) < 0)
            request->receiver = NULL; /* it answered, or will: the rest is discarded */
        *upload_data_size = 0;
        return;
    }
    if (request->body_complete)
        return;
    request->body_complete = true;
    request->body_read = true;
    if (request->deferred) {
        if (MHD_queue_response(connection, (unsigned)request->deferred_status, request->deferred) !=
            MHD_YES)
            log_warn("could not queue a %d response for %s %s", request->deferred_status,
                     request->method, request->path);
        MHD_destroy_response(request->deferred);
        request->deferred = NULL;
        return;
    }
    if (!request->responded && request->receiver)
        request->receiver->on_end(request, request->receiver_arg);
    if (!request->responded && !request->answer_later)
        http_respond_error(request, 500, "no response was produced for %s %s", request->method,
                           request->path);
}

/* A buffered body: kept up to --max-body-size, then the request is handled whole. */
static void continue_buffered_request(http_request *request, const char *upload_data,
                                      size_t *upload_data_size)
{
    if (*upload_data_size > 0) {
        if (!request->responded && !request->body_too_large) {
            if (buffer_size(&request->body) + *upload_data_size > server.options.max_body_size)
                request->body_too_large = true;
            else
                buffer_append(&request->body, upload_data, *upload_data_size);
        }
        *upload_data_size = 0;
        return;
    }
    request->body_read = true;
    if (!request->responded)
        handle_complete_request(request);
}

/* libmicrohttpd calls this once for the head, once per piece of the body, and once at its end. */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *connection, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    http_request *request = *con_cls;
    if (!request || request == (const void *)&path_has_control_bytes ||
        request == (const void *)&url_too_long)
        begin_request(connection, url, method, con_cls);
    else if (request->streams_body)
        continue_streamed_request(connection, request, upload_data, upload_data_size);
    else
        continue_buffered_request(request, upload_data, upload_data_size);
    return MHD_YES;
}

static void on_request_completed(void *cls, struct MHD_Connection *connection, void **con_cls,
                                 enum MHD_RequestTerminationCode code)
{
    http_request *request = *con_cls;
    if (!request)
        return;
    if (request->answered_early && !request->framing_refused &&
        code == MHD_REQUEST_TERMINATED_COMPLETED_OK)
        linger_after_answer(connection);
    if (request->streams_body && !request->body_complete && request->receiver &&
        request->receiver->on_abort)
        request->receiver->on_abort(request->receiver_arg);
    if (request->deferred)
        MHD_destroy_response(request->deferred);
    if (request->stream) {
        http_stream *stream = request->stream;
        bool completed = code == MHD_REQUEST_TERMINATED_COMPLETED_OK && stream->ended;
        unwatch_peer(stream);
        outbound_remove(&stream->outbound);
        if (stream->on_closed)
            stream->on_closed(stream->arg, completed);
        buffer_free(&stream->queue);
        /* It owns peer_watch: a hang-up event for it may be in the loop's batch that is being
           handled now (this runs from libmicrohttpd's turn), so it is freed after the batch. */
        loop_defer(free, stream);
        heap_note_release();
    }
    if (request->upgrade) {
        pending_upgrade *upgrade = request->upgrade;
        if (!upgrade->opened && upgrade->on_raw_open)
            upgrade->on_raw_open(upgrade->arg, -1, NULL, 0, NULL);
        else if (!upgrade->opened)
            upgrade->on_open(upgrade->arg, NULL);
        free(request->upgrade);
    }
    while (request->headers) {
        response_header *next = request->headers->next;
        free(request->headers->name);
        free(request->headers->value);
        free(request->headers);
        request->headers = next;
    }
    buffer_free(&request->body);
    free(request->path);
    free(request);
    *con_cls = NULL;
}

/* ---- event loop glue ---- */

static void run_microhttpd(void *arg)
{
    if (server.daemon)
        MHD_run(server.daemon);
}

static void on_microhttpd_ready(void *owner, uint32_t events) { run_microhttpd(NULL); }

static int64_t microhttpd_timeout(void *arg)
{
    MHD_UNSIGNED_LONG_LONG timeout;
    if (!server.daemon || MHD_get_timeout(server.daemon, &timeout) != MHD_YES)
        return -1;
    return (int64_t)timeout;
}

static char *normalized_base_url(const char *base)
{
    size_t n = strlen(base ? base : "");
    char *out = malloc(n + 3);
    if (!out)
        die("out of memory");
    snprintf(out, n + 3, "%s%s%s", (base && base[0] == '/') ? "" : "/", base ? base : "",
             (n > 0 && base[n - 1] == '/') ? "" : "/");
    if (strcmp(out, "//") == 0)
        strcpy(out, "/");
    return out;
}

int http_server_start(const http_server_options *options, http_dispatch dispatch)
{
    struct sockaddr_storage address;
    memset(&address, 0, sizeof address);
    unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_UPGRADE | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG |
                     MHD_USE_TURBO;
    struct sockaddr_in *v4 = (struct sockaddr_in *)&address;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&address;
    if (inet_pton(AF_INET, options->ip, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)options->port);
    } else if (inet_pton(AF_INET6, options->ip, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)options->port);
        flags |= MHD_USE_IPv6;
    } else {
        die("--ip %s is not an IPv4 or IPv6 address", options->ip);
    }
    server.options = *options;
    server.options.base_url = normalized_base_url(options->base_url);
    server.dispatch = dispatch;
    admission_set_limits(options->max_connections, options->max_connections_per_ip);
    server.daemon = MHD_start_daemon(
        flags, (uint16_t)options->port, NULL, NULL, on_request, NULL, MHD_OPTION_SOCK_ADDR,
        (struct sockaddr *)&address, MHD_OPTION_NOTIFY_COMPLETED, on_request_completed, NULL,
        MHD_OPTION_NOTIFY_CONNECTION, admission_on_connection, NULL,
        MHD_OPTION_CONNECTION_LIMIT,
        options->max_connections ? options->max_connections + ADMISSION_HEADROOM : 65536u,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT,
        options->max_connections_per_ip ? options->max_connections_per_ip + ADMISSION_HEADROOM : 0u,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)300,
        MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned)1024, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        (size_t)CONNECTION_MEMORY, MHD_OPTION_URI_LOG_CALLBACK, inspect_request_line, NULL,
        MHD_OPTION_END);
    if (!server.daemon)
        die("cannot listen on %s port %d: %s (is another server using it?)", options->ip,
            options->port, strerror(errno));
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(server.daemon, MHD_DAEMON_INFO_EPOLL_FD);
    loop_watch_add(&server.watch, info->epoll_fd, EPOLLIN, on_microhttpd_ready, NULL);
    loop_set_poll_hook(run_microhttpd, NULL, microhttpd_timeout);
    info = MHD_get_daemon_info(server.daemon, MHD_DAEMON_INFO_BIND_PORT);
    return info ? info->port : options->port;
}

void http_server_stop(void)
{
    if (!server.daemon)
        return;
    loop_watch_remove(&server.watch);
    linger_stop_all();
    MHD_stop_daemon(server.daemon);
    server.daemon = NULL;
}
