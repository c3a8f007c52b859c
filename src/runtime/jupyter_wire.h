/* jupyter_wire — a Jupyter kernel's ZMQ channels as its client sees them: the connection
 * (five loopback ports, an HMAC-SHA256 key), the sockets (DEALER for shell, control and stdin
 * under one identity, SUB for iopub) and the signed multipart messages that travel on them
 * ([<IDS|MSG>, hmac hex, header, parent_header, metadata, content, buffers...]). libzmq speaks
 * ZMTP, OpenSSL computes the HMAC; this module only frames and checks. Used by jupyter_bridge.c. */
#ifndef CELLBOX_RUNTIME_JUPYTER_WIRE_H
#define CELLBOX_RUNTIME_JUPYTER_WIRE_H

#include <jansson.h>
#include <stddef.h>

typedef enum jupyter_socket {
    JUPYTER_SHELL,
    JUPYTER_CONTROL,
    JUPYTER_STDIN,
    JUPYTER_IOPUB,
    JUPYTER_SOCKET_COUNT,
} jupyter_socket;

typedef struct jupyter_wire {
    void *context;                        /* the zmq context owning the sockets */
    void *sockets[JUPYTER_SOCKET_COUNT];  /* indexed by jupyter_socket */
    void *monitors[JUPYTER_SOCKET_COUNT]; /* handshake events of shell, control, stdin */
    int connected[JUPYTER_SOCKET_COUNT];  /* their handshake with the kernel succeeded */
    int ports[JUPYTER_SOCKET_COUNT + 1];  /* shell, control, stdin, iopub, heartbeat */
    char key[65];                         /* 32 random bytes as hex: the signing key */
} jupyter_wire;

/* Picks five free loopback ports and a fresh key (getrandom), then makes the sockets and
   connects them (ZMQ connects lazily: the kernel may bind later). 0, or -1 with `why`. */
int jupyter_wire_open(jupyter_wire *wire, char *why, size_t why_size);
void jupyter_wire_close(jupyter_wire *wire);
/* 1 once shell, control and stdin have each finished their ZMTP handshake with the kernel (its
   ROUTER then knows their identity: a kernel drops an input_request for an identity its stdin
   socket does not know yet), else 0. Reads the handshake events waiting, without blocking. */
int jupyter_wire_connected(jupyter_wire *wire);
/* Writes the connection file the kernel reads (created 0600, never over an existing file). */
int jupyter_wire_write_connection_file(const jupyter_wire *wire, const char *path,
                                       const char *kernel_name, char *why, size_t why_size);

/* Signs and sends one message made of `message`'s header, parent_header, metadata and content
   (missing ones as {}). 0, or -1 when ZMQ refused it. */
int jupyter_wire_send(jupyter_wire *wire, jupyter_socket socket, const json_t *message);
/* The next message waiting on `socket`, without blocking, as {header, parent_header, metadata,
   content} (buffers dropped). 1 with *message set; 0 when nothing waits; -1 when a message came
   but was dropped (bad signature or not JSON: a line on stderr says which). */
int jupyter_wire_receive(jupyter_wire *wire, jupyter_socket socket, json_t **message);

#endif
