#include "api/channels.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/framing.h"
#include "common/log.h"
#include "model/manager.h"
#include "kernel/message.h"

#define REMEMBERED_SESSIONS 8
/* A client that stops reading is dropped before its backlog eats the daemon's memory. */
#define MAX_QUEUED_BYTES (256u << 20)

typedef struct channel_connection {
    websocket *socket;
    char kernel_id[UUID_STRING_LENGTH + 1];
    kernel *kernel;                         /* NULL once the kernel is deleted */
    char *session_id;                       /* ?session_id= of the URL, or NULL */
    char *sessions[REMEMBERED_SESSIONS];    /* header.session values this client used */
    int next_session;
    bool v1;                                /* v1.kernel.websocket.jupyter.org framing */
    struct channel_connection *next;        /* in the kernel's list, newest first */
} connection;

static size_t max_message;

static void on_kernel_message(kernel *k, const char *channel, json_t *message);

void channels_init(size_t max_message_size)
{
    max_message = max_message_size;
    kernel_add_message_handler(on_kernel_message);
}

/* ---- the kernel's list of connections ---- */

static void attach(connection *c, kernel *k)
{
    c->kernel = k;
    c->next = kernel_subscribers(k);
    kernel_set_subscribers(k, c);
    kernel_set_connection_count(k, kernel_connection_count(k) + 1);
}

static void detach(connection *c)
{
    kernel *k = c->kernel;
    if (!k)
        return;
    connection *head = kernel_subscribers(k);
    if (head == c) {
        kernel_set_subscribers(k, c->next);
    } else {
        for (connection *p = head; p; p = p->next) {
            if (p->next == c) {
                p->next = c->next;
                break;
            }
        }
    }
    kernel_set_connection_count(k, kernel_connection_count(k) - 1);
    c->kernel = NULL;
    c->next = NULL;
}

static void connection_free(connection *c)
{
    free(c->session_id);
    for (int i = 0; i < REMEMBERED_SESSIONS; i++)
        free(c->sessions[i]);
    free(c);
}

static bool connection_has_session(const connection *c, const char *session)
{
    if (c->session_id && strcmp(c->session_id, session) == 0)
        return true;
    for (int i = 0; i < REMEMBERED_SESSIONS; i++)
        if (c->sessions[i] && strcmp(c->sessions[i], session) == 0)
            return true;
    return false;
}

static void remember_session(connection *c, const char *session)
{
    if (!session || !*session || connection_has_session(c, session))
        return;
    free(c->sessions[c->next_session]);
    c->sessions[c->next_session] = strdup(session);
    c->next_session = (c->next_session + 1) % REMEMBERED_SESSIONS;
}

/* ---- sending ---- */

static void send_to(connection *c, json_t *message)
{
    if (!c->socket)
        return;
    if (websocket_queued_bytes(c->socket) > MAX_QUEUED_BYTES) {
        websocket_close(c->socket, WEBSOCKET_POLICY_VIOLATION,
                        "client is not reading its messages");
        return;
    }
    if (c->v1) {
        buffer frame = {0};
        framing_encode_v1(message, &frame);
        websocket_send(c->socket, true, buffer_head(&frame), buffer_size(&frame));
        buffer_free(&frame);
    } else {
        size_t length;
        char *text = framing_encode_legacy(message, &length);
        websocket_send(c->socket, false, text, length);
        free(text);
    }
}

static void on_kernel_message(kernel *k, const char *channel, json_t *message)
{
    connection *head = kernel_subscribers(k);
    if (strcmp(channel, "iopub") == 0) {
        for (connection *c = head; c; c = c->next)
            send_to(c, message);
        return;
    }
    const char *session = message_parent_session(message);
    if (!session)
        return;
    for (connection *c = head; c; c = c->next) {
        if (connection_has_session(c, session)) {
            send_to(c, message);
            return;
        }
    }
}

static void publish_status(kernel *k, json_t *parent, const char *state)
{
    json_t *status = message_status(kernel_session(k), parent, state);
    json_object_set_new(status, "channel", json_string("iopub"));
    on_kernel_message(k, "iopub", status);
    json_decref(status);
}

/* A client talking to a dead kernel is told so, instead of waiting forever: what ipykernel's
   clients wait for, as a kernel sends it for a cell that failed (busy, the error, the reply,
   idle; the request as parent), the error naming the death and what to do. */
static void answer_for_dead_kernel(connection *c, kernel *k, json_t *request)
{
    const char *type = message_type(request);
    if (!type || strcmp(type, "execute_request") != 0)
        return;
    char why[256];
    snprintf(why, sizeof why, "%s; restart the kernel to run code again",
             kernel_death_reason(k)[0] ? kernel_death_reason(k) : "kernel is dead");
    json_t *header = json_object_get(request, "header");
    publish_status(k, header, "busy");
    json_t *error = message_new("error", kernel_session(k), header,
                                message_error_content("DeadKernelError", why));
    json_object_set_new(error, "channel", json_string("iopub"));
    on_kernel_message(k, "iopub", error);
    json_decref(error);
    json_t *content = message_error_content("DeadKernelError", why);
    json_object_set_new(content, "status", json_string("error"));
    json_object_set_new(content, "execution_count", json_integer(0));
    json_t *reply = message_new("execute_reply", kernel_session(k), header, content);
    json_object_set_new(reply, "channel", json_string("shell"));
    send_to(c, reply);
    json_decref(reply);
    publish_status(k, header, "idle");
}

/* Answered here: a busy single-threaded kernel could not. Wrapped in busy/idle with the request
   as parent, as ipykernel does for every control request. */
static void answer_interrupt(connection *c, kernel *k, json_t *request)
{
    json_t *header = json_object_get(request, "header");
    publish_status(k, header, "busy");
    kernel_interrupt(k);
    json_t *reply = message_new("interrupt_reply", kernel_session(k), header,
                                json_pack("{s:s}", "status", "ok"));
    json_object_set_new(reply, "channel", json_string("control"));
    send_to(c, reply);
    json_decref(reply);
    publish_status(k, header, "idle");
}

/* ---- receiving ---- */

static void on_client_message(void *owner, websocket *socket, bool binary,
                              const unsigned char *data, size_t length)
{
    static const char *const client_channels[] = {"shell", "control", "stdin", NULL};
    connection *c = owner;
    char why[200];
    json_t *message = c->v1 ? (binary ? framing_decode_v1(data, length, why, sizeof why) : NULL)
                            : framing_decode_legacy(data, length, binary, why, sizeof why);
    if (c->v1 && !binary)
        snprintf(why, sizeof why, "the v1 protocol takes binary messages only");
    if (message && !message_check(message, client_channels, why, sizeof why)) {
        json_decref(message);
        message = NULL;
    }
    if (!message) {
        log_info("kernel %s: closing a connection that sent a bad message: %s", c->kernel_id, why);
        websocket_close(socket, WEBSOCKET_INVALID_PAYLOAD, why);
        return;
    }
    kernel *k = c->kernel;
    if (!k) {
        json_decref(message);
        return;
    }
    remember_session(c, message_session(message));
    const char *type = message_type(message);
    if (!message_type_is_untracked(type))
        kernel_touch(k);
    if (strcmp(type, "interrupt_request") == 0)
        answer_interrupt(c, k, message);
    else if (kernel_send(k, message) < 0)
        answer_for_dead_kernel(c, k, message);
    json_decref(message);
}

static void on_client_close(void *owner, websocket *socket)
{
    connection *c = owner;
    detach(c);
    connection_free(c);
}

static const websocket_callbacks connection_callbacks = {
    .on_message = on_client_message,
    .on_close = on_client_close,
};

/* jupyter_server closes an older connection that used the same session_id. */
static void replace_same_session(kernel *k, const char *session_id)
{
    if (!session_id)
        return;
    for (connection *c = kernel_subscribers(k); c; c = c->next) {
        if (c->session_id && strcmp(c->session_id, session_id) == 0) {
            detach(c);
            websocket_close(c->socket, WEBSOCKET_NORMAL_CLOSURE,
                            "replaced by a new connection with the same session_id");
            return;
        }
    }
}

static void on_open(void *arg, websocket *socket)
{
    connection *c = arg;
    if (!socket) { /* the handshake failed */
        connection_free(c);
        return;
    }
    c->socket = socket;
    kernel *k = manager_find(c->kernel_id);
    if (!k) {
        websocket_close(socket, WEBSOCKET_GOING_AWAY, "kernel was deleted");
        return;
    }
    replace_same_session(k, c->session_id);
    attach(c, k);
}

static bool offers_v1(const char *protocols)
{
    while (protocols && *protocols) {
        while (*protocols == ' ' || *protocols == ',')
            protocols++;
        size_t n = strcspn(protocols, ", ");
        if (n == strlen(FRAMING_V1_PROTOCOL) && strncmp(protocols, FRAMING_V1_PROTOCOL, n) == 0)
            return true;
        protocols += n;
    }
    return false;
}

void channels_accept(http_request *request, kernel *k)
{
    connection *c = calloc(1, sizeof *c);
    if (!c)
        die("out of memory");
    snprintf(c->kernel_id, sizeof c->kernel_id, "%s", kernel_id(k));
    const char *session_id = http_query(request, "session_id");
    if (session_id && *session_id)
        c->session_id = strdup(session_id);
    c->v1 = offers_v1(http_header(request, "Sec-WebSocket-Protocol"));
    http_upgrade_websocket(request, c->v1 ? FRAMING_V1_PROTOCOL : NULL, max_message,
                           &connection_callbacks, on_open, c);
}

void channels_kernel_deleted(kernel *k)
{
    connection *c;
    while ((c = kernel_subscribers(k)) != NULL) {
        detach(c);
        websocket_close(c->socket, WEBSOCKET_GOING_AWAY, "kernel was deleted");
    }
}
