#include "common/buffer.h"

#include <stdlib.h>
#include <string.h>

#include "common/log.h"

void buffer_append(buffer *b, const void *bytes, size_t n)
{
    if (n == 0)
        return;
    if (b->length + n > b->capacity) {
        /* Reclaim consumed space before growing: queues are drained from the front. */
        if (b->start > 0) {
            memmove(b->data, b->data + b->start, b->length - b->start);
            b->length -= b->start;
            b->start = 0;
        }
        if (b->length + n > b->capacity) {
            size_t want = b->capacity ? b->capacity * 2 : 4096;
            while (want < b->length + n)
                want *= 2;
            char *grown = realloc(b->data, want);
            if (!grown)
                die("out of memory growing a buffer to %zu bytes", want);
            b->data = grown;
            b->capacity = want;
        }
    }
    memcpy(b->data + b->length, bytes, n);
    b->length += n;
}

bool buffer_append_capped(buffer *b, const void *bytes, size_t n, size_t cap)
{
    size_t room = buffer_size(b) < cap ? cap - buffer_size(b) : 0;
    buffer_append(b, bytes, n < room ? n : room);
    return n <= room;
}

void buffer_append_u32le(buffer *b, unsigned value)
{
    unsigned char bytes[4] = {value & 0xff, (value >> 8) & 0xff, (value >> 16) & 0xff, (value >> 24) & 0xff};
    buffer_append(b, bytes, 4);
}

void buffer_append_u32be(buffer *b, unsigned value)
{
    unsigned char bytes[4] = {(value >> 24) & 0xff, (value >> 16) & 0xff, (value >> 8) & 0xff, value & 0xff};
    buffer_append(b, bytes, 4);
}

void buffer_append_u64le(buffer *b, unsigned long long value)
{
    unsigned char bytes[8];
    for (int i = 0; i < 8; i++)
        bytes[i] = (value >> (8 * i)) & 0xff;
    buffer_append(b, bytes, 8);
}

/* Queues that once held a burst keep no more than this while empty: a client's output queue
   that reached megabytes would otherwise hold them for the rest of the connection. */
#define KEPT_WHEN_EMPTY (64 * 1024)

static void release_if_empty(buffer *b)
{
    if (b->start < b->length)
        return;
    b->start = b->length = 0;
    if (b->capacity > KEPT_WHEN_EMPTY)
        buffer_free(b);
}

void buffer_consume(buffer *b, size_t n)
{
    b->start += n;
    release_if_empty(b);
}

void buffer_truncate(buffer *b, size_t n)
{
    if (n < buffer_size(b))
        b->length = b->start + n;
    release_if_empty(b);
}

void buffer_free(buffer *b)
{
    free(b->data);
    memset(b, 0, sizeof *b);
}
