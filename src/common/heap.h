/* heap — gives the memory a burst used back to the system once the burst is over.
 *
 * glibc's malloc keeps freed memory in its heap: after 200 clients and a few hundred sandboxes
 * came and went, the daemon's RSS stayed 8x its start although nothing was live. Two things
 * make it return: large blocks (queues, frames, JSON texts past 128 KiB) are mmap'd, so freeing
 * one unmaps it at once (glibc would otherwise raise that threshold as big blocks are freed and
 * keep them in the heap); and once frees stop for a moment, malloc_trim() returns the free pages
 * inside the heap as well. */
#ifndef CELLBOX_COMMON_HEAP_H
#define CELLBOX_COMMON_HEAP_H

/* Called once at start, before the first allocation that matters. */
void heap_init(void);
/* Something sizeable was freed (a connection, a stream, a kernel): trim when things go quiet. */
void heap_note_release(void);

#endif
