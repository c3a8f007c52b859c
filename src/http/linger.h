/* linger — a lingering close for a connection answered before its request body was read.
 *
 * libmicrohttpd closes such a connection while the client may still be sending; closing a
 * socket with unread data makes the kernel send a reset, which throws our answer away on the
 * client's side (python-requests reported "connection reset" instead of a 413). As web servers
 * do, the socket is kept (a duplicate of its descriptor), our side is shut for writing once the
 * answer is out, and what the client still sends is read and dropped, up to LINGER_MAX_BYTES or
 * LINGER_MAX_MS, before the socket is closed. */
#ifndef CELLBOX_HTTP_LINGER_H
#define CELLBOX_HTTP_LINGER_H

#define LINGER_MAX_BYTES (64 * 1024 * 1024)
#define LINGER_MAX_MS 10000
#define LINGER_MAX_SOCKETS 256 /* more at once are closed at once: lingers cost descriptors */

/* Called once the answer was handed to the socket, before libmicrohttpd closes its descriptor:
   duplicates `socket_fd` and lingers on the duplicate. */
void linger_start(int socket_fd);
/* Closes every lingering socket now (the server is stopping). */
void linger_stop_all(void);

#endif
