/* outbound — the daemon-wide count of bytes queued for clients that have not read them yet.
 *
 * Every queue of bytes waiting on a slow client (a WebSocket's frames, a streamed response's
 * body: NDJSON executions and commands, held answers) is an outbound_queue here and reports its
 * size whenever it changes. Each connection has its own cap as well, but a few idle clients each
 * under it can still take the daemon's memory; so when the sum passes the ceiling
 * (--max-queued-bytes), the queue holding the most is evicted: its owner ends the connection with
 * a reason the client can read, and the queue stops counting (what it still holds is freed when
 * the connection goes, within a bounded time). */
#ifndef CELLBOX_HTTP_OUTBOUND_H
#define CELLBOX_HTTP_OUTBOUND_H

#include <stdbool.h>
#include <stddef.h>

typedef struct outbound_queue {
    size_t bytes;                             /* held now, as last reported */
    bool counted;                             /* in the list and the total */
    void (*evict)(void *owner, size_t total); /* ends the connection; called at most once */
    void *owner;
    struct outbound_queue *prev, *next;
} outbound_queue;

/* Called once at start; 0 = no ceiling. */
void outbound_set_ceiling(size_t bytes);
size_t outbound_ceiling(void);
size_t outbound_total(void); /* bytes queued across every counted queue */

/* A connection's queue starts counting (at 0 bytes) when the connection opens... */
void outbound_add(outbound_queue *queue, void (*evict)(void *owner, size_t total), void *owner);
/* ...reports its new size after every write and send; past the ceiling the biggest queue is
   evicted, possibly this one (its evict runs inside this call)... */
void outbound_update(outbound_queue *queue, size_t bytes);
/* ...and stops counting when the connection ends. Safe on a queue already evicted. */
void outbound_remove(outbound_queue *queue);

#endif
