/* jupyter_wire — see jupyter_wire.h. */
#include "runtime/jupyter_wire.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

/* The frame that ends the routing identities of a Jupyter message. */
#define DELIMITER "<IDS|MSG>"
/* header, parent_header, metadata, content: the parts the signature covers. */
#define SIGNED_PARTS 4
/* More parts than a message with a few buffers has: the rest are read and dropped. */
#define MAX_PARTS 64

static const char *const part_names[SIGNED_PARTS] = {"header", "parent_header", "metadata",
                                                     "content"};

/* Binds `count` loopback sockets to port 0 at once, so the kernel gets distinct ports the
   system had free; they are closed before the kernel binds them (the sandbox's loopback is its
   own, so nothing else races for them but the kernel's own processes). */
static int pick_free_ports(int *ports, int count)
{
    int fds[JUPYTER_SOCKET_COUNT + 1];
    int opened = 0, rc = 0;
    for (; opened < count; opened++) {
        struct sockaddr_in address = {.sin_family = AF_INET,
                                      .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t length = sizeof address;
        fds[opened] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fds[opened] < 0 ||
            bind(fds[opened], (struct sockaddr *)&address, sizeof address) != 0 ||
            getsockname(fds[opened], (struct sockaddr *)&address, &length) != 0) {
            rc = -1;
            opened += fds[opened] >= 0;
            break;
        }
        ports[opened] = ntohs(address.sin_port);
    }
    for (int i = 0; i < opened; i++)
        close(fds[i]);
    return rc;
}

static int make_key(char *hex)
{
    unsigned char bytes[32];
    if (getrandom(bytes, sizeof bytes, 0) != (ssize_t)sizeof bytes)
        return -1;
    for (size_t i = 0; i < sizeof bytes; i++)
        sprintf(hex + 2 * i, "%02x", bytes[i]);
    return 0;
}

static int connect_socket(jupyter_wire *wire, jupyter_socket which, int type, const char *identity)
{
    void *socket = zmq_socket(wire->context, type);
    if (socket == NULL)
        return -1;
    wire->sockets[which] = socket;
    int linger = 0; /* never hold the process's exit for unsent messages to a dead kernel */
    zmq_setsockopt(socket, ZMQ_LINGER, &linger, sizeof linger);
    /* The sockets connect before the kernel has bound its ports (it binds them as it starts), so
       libzmq retries; at its default 100 ms a kernel ready in 400 ms waited up to 100 ms more
       for each socket. The retries are to the sandbox's own loopback: cheap. */
    int reconnect_ms = 10;
    zmq_setsockopt(socket, ZMQ_RECONNECT_IVL, &reconnect_ms, sizeof reconnect_ms);
    /* ipykernel sends input_request to the identity the execute_request came from: the stdin
       socket must carry the shell socket's identity. */
    if (identity != NULL && zmq_setsockopt(socket, ZMQ_ROUTING_ID, identity, strlen(identity)) != 0)
        return -1;
    if (type == ZMQ_SUB && zmq_setsockopt(socket, ZMQ_SUBSCRIBE, "", 0) != 0)
        return -1;
    char endpoint[64];
    if (type == ZMQ_DEALER) { /* see jupyter_wire_connected */
        snprintf(endpoint, sizeof endpoint, "inproc://cellbox-handshake-%d", (int)which);
        wire->monitors[which] = zmq_socket(wire->context, ZMQ_PAIR);
        if (wire->monitors[which] == NULL ||
            zmq_socket_monitor(socket, endpoint, ZMQ_EVENT_HANDSHAKE_SUCCEEDED) != 0 ||
            zmq_connect(wire->monitors[which], endpoint) != 0)
            return -1;
    }
    snprintf(endpoint, sizeof endpoint, "tcp://127.0.0.1:%d", wire->ports[which]);
    return zmq_connect(socket, endpoint);
}

int jupyter_wire_open(jupyter_wire *wire, char *why, size_t why_size)
{
    memset(wire, 0, sizeof *wire);
    if (pick_free_ports(wire->ports, JUPYTER_SOCKET_COUNT + 1) != 0) {
        snprintf(why, why_size, "cannot find free ports on 127.0.0.1: %s", strerror(errno));
        return -1;
    }
    if (make_key(wire->key) != 0) {
        snprintf(why, why_size, "cannot read random bytes for the key: %s", strerror(errno));
        return -1;
    }
    char identity[32];
    snprintf(identity, sizeof identity, "cellbox-%d", (int)getpid());
    wire->context = zmq_ctx_new();
    if (wire->context == NULL || connect_socket(wire, JUPYTER_SHELL, ZMQ_DEALER, identity) != 0 ||
        connect_socket(wire, JUPYTER_CONTROL, ZMQ_DEALER, identity) != 0 ||
        connect_socket(wire, JUPYTER_STDIN, ZMQ_DEALER, identity) != 0 ||
        connect_socket(wire, JUPYTER_IOPUB, ZMQ_SUB, NULL) != 0) {
        snprintf(why, why_size, "cannot make the ZMQ sockets: %s", zmq_strerror(zmq_errno()));
        return -1;
    }
    return 0;
}

/* Stops watching `which`'s handshakes (only the first one matters). */
static void stop_monitor(jupyter_wire *wire, int which)
{
    if (wire->monitors[which] == NULL)
        return;
    zmq_socket_monitor(wire->sockets[which], NULL, 0);
    zmq_close(wire->monitors[which]);
    wire->monitors[which] = NULL;
}

int jupyter_wire_connected(jupyter_wire *wire)
{
    int all = 1;
    for (int which = JUPYTER_SHELL; which <= JUPYTER_STDIN; which++) {
        zmq_msg_t event;
        zmq_msg_init(&event);
        /* An event is two parts: 6 bytes (uint16 event, uint32 value), then the endpoint. */
        while (!wire->connected[which] && wire->monitors[which] != NULL &&
               zmq_msg_recv(&event, wire->monitors[which], ZMQ_DONTWAIT) >= 0) {
            uint16_t kind = 0;
            if (zmq_msg_size(&event) >= sizeof kind)
                memcpy(&kind, zmq_msg_data(&event), sizeof kind);
            int more = zmq_msg_more(&event);
            if (more)
                zmq_msg_recv(&event, wire->monitors[which], 0);
            if (kind == ZMQ_EVENT_HANDSHAKE_SUCCEEDED)
                wire->connected[which] = 1;
        }
        zmq_msg_close(&event);
        if (wire->connected[which])
            stop_monitor(wire, which);
        all = all && wire->connected[which];
    }
    return all;
}

void jupyter_wire_close(jupyter_wire *wire)
{
    for (int i = 0; i < JUPYTER_SOCKET_COUNT; i++)
        stop_monitor(wire, i);
    for (int i = 0; i < JUPYTER_SOCKET_COUNT; i++)
        if (wire->sockets[i] != NULL)
            zmq_close(wire->sockets[i]);
    if (wire->context != NULL)
        zmq_ctx_term(wire->context);
    memset(wire, 0, sizeof *wire);
}

int jupyter_wire_write_connection_file(const jupyter_wire *wire, const char *path,
                                       const char *kernel_name, char *why, size_t why_size)
{
    json_t *connection = json_pack(
        "{s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:s, s:s, s:s}", "transport", "tcp", "ip", "127.0.0.1",
        "shell_port", wire->ports[JUPYTER_SHELL], "control_port", wire->ports[JUPYTER_CONTROL],
        "stdin_port", wire->ports[JUPYTER_STDIN], "iopub_port", wire->ports[JUPYTER_IOPUB],
        "hb_port", wire->ports[JUPYTER_SOCKET_COUNT], "signature_scheme", "hmac-sha256", "key",
        wire->key, "kernel_name", kernel_name);
    char *text = connection != NULL ? json_dumps(connection, JSON_INDENT(1)) : NULL;
    json_decref(connection);
    /* The key signs every request: only this sandbox's user may read it. */
    int fd = text != NULL ? open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600) : -1;
    size_t length = text != NULL ? strlen(text) : 0;
    int rc = (fd >= 0 && write(fd, text, length) == (ssize_t)length) ? 0 : -1;
    if (rc != 0)
        snprintf(why, why_size, "cannot write %s: %s", path, strerror(errno));
    if (fd >= 0)
        close(fd);
    free(text);
    return rc;
}

/* HMAC-SHA256 of the four signed parts, as lowercase hex (65 bytes with the NUL). */
static int sign_parts(const char *key, const void *const parts[], const size_t sizes[], char *hex)
{
    EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    EVP_MAC_CTX *context = mac != NULL ? EVP_MAC_CTX_new(mac) : NULL;
    OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, "SHA256", 0),
                           OSSL_PARAM_construct_end()};
    unsigned char digest[32];
    size_t digest_size = 0;
    int ok = context != NULL &&
             EVP_MAC_init(context, (const unsigned char *)key, strlen(key), params) == 1;
    for (int i = 0; ok && i < SIGNED_PARTS; i++)
        ok = EVP_MAC_update(context, parts[i], sizes[i]) == 1;
    ok = ok && EVP_MAC_final(context, digest, &digest_size, sizeof digest) == 1 &&
         digest_size == sizeof digest;
    EVP_MAC_CTX_free(context);
    EVP_MAC_free(mac);
    for (size_t i = 0; ok && i < sizeof digest; i++)
        sprintf(hex + 2 * i, "%02x", digest[i]);
    return ok ? 0 : -1;
}

int jupyter_wire_send(jupyter_wire *wire, jupyter_socket which, const json_t *message)
{
    char *texts[SIGNED_PARTS] = {0};
    const void *parts[SIGNED_PARTS];
    size_t sizes[SIGNED_PARTS];
    char signature[65];
    int rc = 0;
    for (int i = 0; i < SIGNED_PARTS && rc == 0; i++) {
        const json_t *part = json_object_get(message, part_names[i]);
        texts[i] = json_is_object(part) ? json_dumps(part, JSON_COMPACT) : strdup("{}");
        rc = texts[i] != NULL ? 0 : -1;
        parts[i] = texts[i];
        sizes[i] = rc == 0 ? strlen(texts[i]) : 0;
    }
    if (rc == 0)
        rc = sign_parts(wire->key, parts, sizes, signature);
    void *socket = wire->sockets[which];
    if (rc == 0 && (zmq_send(socket, DELIMITER, strlen(DELIMITER), ZMQ_SNDMORE) < 0 ||
                    zmq_send(socket, signature, 64, ZMQ_SNDMORE) < 0))
        rc = -1;
    for (int i = 0; i < SIGNED_PARTS && rc == 0; i++)
        if (zmq_send(socket, parts[i], sizes[i], i + 1 < SIGNED_PARTS ? ZMQ_SNDMORE : 0) < 0)
            rc = -1;
    for (int i = 0; i < SIGNED_PARTS; i++)
        free(texts[i]);
    return rc;
}

/* Reads every part of the next message into `parts` (up to MAX_PARTS kept). The count, 0 when
   nothing waits. */
static int receive_parts(void *socket, zmq_msg_t *parts)
{
    int count = 0, more = 1;
    while (more) {
        zmq_msg_t part;
        zmq_msg_init(&part);
        if (zmq_msg_recv(&part, socket, count == 0 ? ZMQ_DONTWAIT : 0) < 0) {
            zmq_msg_close(&part);
            return count;
        }
        more = zmq_msg_more(&part);
        if (count < MAX_PARTS)
            parts[count++] = part;
        else
            zmq_msg_close(&part);
    }
    return count;
}

/* Checks and parses the parts after the delimiter: signature, then the four signed parts. */
static int parse_message(const char *key, zmq_msg_t *parts, int count, json_t **message)
{
    int start = 0;
    while (start < count &&
           !(zmq_msg_size(&parts[start]) == strlen(DELIMITER) &&
             memcmp(zmq_msg_data(&parts[start]), DELIMITER, strlen(DELIMITER)) == 0))
        start++;
    if (count - start < 2 + SIGNED_PARTS) {
        fprintf(stderr, "cellbox-kernel: dropped a kernel message with %d parts\n", count);
        return -1;
    }
    const void *signed_parts[SIGNED_PARTS];
    size_t sizes[SIGNED_PARTS];
    for (int i = 0; i < SIGNED_PARTS; i++) {
        signed_parts[i] = zmq_msg_data(&parts[start + 2 + i]);
        sizes[i] = zmq_msg_size(&parts[start + 2 + i]);
    }
    char expected[65];
    if (sign_parts(key, signed_parts, sizes, expected) != 0 ||
        zmq_msg_size(&parts[start + 1]) != 64 ||
        CRYPTO_memcmp(expected, zmq_msg_data(&parts[start + 1]), 64) != 0) {
        fprintf(stderr, "cellbox-kernel: dropped a kernel message with a bad signature\n");
        return -1;
    }
    json_t *result = json_object();
    for (int i = 0; i < SIGNED_PARTS && result != NULL; i++) {
        json_t *part = json_loadb(signed_parts[i], sizes[i], 0, NULL);
        if (!json_is_object(part)) {
            fprintf(stderr,
                    "cellbox-kernel: dropped a kernel message whose %s is not a JSON "
                    "object\n",
                    part_names[i]);
            json_decref(part);
            json_decref(result);
            return -1;
        }
        json_object_set_new(result, part_names[i], part);
    }
    *message = result;
    return result != NULL ? 1 : -1;
}

int jupyter_wire_receive(jupyter_wire *wire, jupyter_socket which, json_t **message)
{
    zmq_msg_t parts[MAX_PARTS];
    int count = receive_parts(wire->sockets[which], parts);
    if (count == 0)
        return 0;
    int rc = parse_message(wire->key, parts, count, message);
    for (int i = 0; i < count; i++)
        zmq_msg_close(&parts[i]);
    return rc;
}
