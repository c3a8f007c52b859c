#include "model/box_log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buffer.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/text.h"
#include "model/box_fields.h"

#define LOG_TEXT_MAX 4096 /* one entry; longer output is split */

static void drop_log_entry(box *b, log_entry *e)
{
    if (e->text)
        b->log_bytes -= strlen(e->text);
    free(e->text);
    e->text = NULL;
}

void box_log(box *b, const char *source, const char *stream, const char *text, size_t length)
{
    while (length > 0) {
        size_t n = length < LOG_TEXT_MAX ? length : LOG_TEXT_MAX;
        while (n < length && n > 1 && ((unsigned char)text[n] & 0xC0) == 0x80)
            n--; /* cut between characters, not inside one */
        log_entry *e = &b->log[b->log_next];
        drop_log_entry(b, e);
        buffer repaired = {0};
        text_append_utf8(&repaired, (const unsigned char *)text, n, 1);
        buffer_append(&repaired, "", 1);
        e->text = strdup(buffer_head(&repaired));
        buffer_free(&repaired);
        if (!e->text)
            die("out of memory");
        e->at_us = clock_wall_us();
        e->source = source;
        e->stream = stream;
        b->log_bytes += strlen(e->text);
        b->log_next = (b->log_next + 1) % BOX_LOG_ENTRIES;
        if (b->log_count < BOX_LOG_ENTRIES)
            b->log_count++;
        /* Thousands of chatty sandboxes must not hold gigabytes of log: the oldest go first. */
        while (b->log_bytes > BOX_LOG_BYTES && b->log_count > 1) {
            drop_log_entry(
                b, &b->log[(b->log_next + BOX_LOG_ENTRIES - b->log_count) % BOX_LOG_ENTRIES]);
            b->log_count--;
        }
        text += n;
        length -= n;
    }
}

void box_log_event(box *b, const char *fmt, ...)
{
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    box_log(b, "sandbox", "event", text, n < (int)sizeof text ? (size_t)n : sizeof text - 1);
}

json_t *box_log_model(const box *b, size_t limit)
{
    json_t *list = json_array();
    size_t count = b->log_count < limit ? b->log_count : limit;
    size_t first = (b->log_next + BOX_LOG_ENTRIES - count) % BOX_LOG_ENTRIES;
    for (size_t i = 0; i < count; i++) {
        const log_entry *e = &b->log[(first + i) % BOX_LOG_ENTRIES];
        char at[ISO_TIME_BUFFER];
        clock_format_iso(e->at_us, at);
        json_array_append_new(list, json_pack("{s:s, s:s, s:s, s:s}", "timestamp", at, "source",
                                              e->source, "stream", e->stream, "text", e->text));
    }
    return list;
}

void box_log_free(box *b)
{
    for (size_t i = 0; i < BOX_LOG_ENTRIES; i++)
        drop_log_entry(b, &b->log[i]);
    b->log_count = 0;
}
