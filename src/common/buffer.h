/* buffer — a growable byte buffer with a read offset, for socket input and output queues. */
#ifndef CELLBOX_COMMON_BUFFER_H
#define CELLBOX_COMMON_BUFFER_H

#include <stdbool.h>
#include <stddef.h>

typedef struct buffer {
    char *data;    /* allocation; bytes [start, length) are live */
    size_t start;  /* bytes already consumed from the front */
    size_t length; /* end of live bytes */
    size_t capacity;
} buffer;

void buffer_append(buffer *b, const void *bytes, size_t n);
/* Appends as much of `bytes` as keeps the buffer within `cap` bytes; false if some was cut. */
bool buffer_append_capped(buffer *b, const void *bytes, size_t n, size_t cap);
void buffer_append_u32le(buffer *b, unsigned value);
void buffer_append_u64le(buffer *b, unsigned long long value);
void buffer_append_u32be(buffer *b, unsigned value);
static inline size_t buffer_size(const buffer *b) { return b->length - b->start; }
/* An empty buffer that never held anything has no data: NULL + 0 is undefined behaviour in C. */
static inline char *buffer_head(const buffer *b) { return b->data ? b->data + b->start : b->data; }
/* Drops `n` bytes from the front; an emptied buffer gives a large allocation back. */
void buffer_consume(buffer *b, size_t n);
/* Keeps the first `n` live bytes and drops the rest. */
void buffer_truncate(buffer *b, size_t n);
void buffer_free(buffer *b);

#endif
