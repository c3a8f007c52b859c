/* box_log — a box's log (GET /v1/sandboxes/{id}/logs): what its contexts and commands print and
 * what happens to it ("paused", "context X adopted"), the last BOX_LOG_ENTRIES entries and
 * BOX_LOG_BYTES of text at most, the oldest dropped first. box.c, pause.c, ttl.c and the
 * commands write to it; nothing here calls back into them. */
#ifndef CELLBOX_MODEL_BOX_LOG_H
#define CELLBOX_MODEL_BOX_LOG_H

#include <jansson.h>
#include <stddef.h>

#define BOX_LOG_ENTRIES 1000
#define BOX_LOG_BYTES (256 * 1024)

typedef struct box box;

/* While the box lives: output (split into entries of at most 4 KiB, made valid UTF-8) and
   events; source and stream are static strings ("execute", "stderr"). */
void box_log(box *b, const char *source, const char *stream, const char *text, size_t length);
void box_log_event(box *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The last `limit` entries, oldest first, as /v1 answers them. */
json_t *box_log_model(const box *b, size_t limit);
/* When the box ends: its entries' text is freed. */
void box_log_free(box *b);

#endif
