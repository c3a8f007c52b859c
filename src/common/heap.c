#include "common/heap.h"

#include <malloc.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/clock.h"
#include "common/loop.h"

/* Blocks at least this large get their own mapping. */
#define MMAP_THRESHOLD_BYTES (128 * 1024)
/* How long after the last release the heap is trimmed: a burst's frees come closer together. */
#define QUIET_MS 2000

static struct {
    int64_t last_release_ms;
    bool timer_armed;
} heap;

void heap_init(void)
{
    /* Setting it fixes it: glibc stops moving the threshold up (and with it the trim
       threshold), so big blocks never settle in the heap. */
    mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES);
}

static void trim_when_quiet(void *arg)
{
    int64_t quiet_for = clock_monotonic_ms() - heap.last_release_ms;
    if (quiet_for < QUIET_MS) { /* still releasing: look again when it may have stopped */
        loop_timer_add(QUIET_MS - quiet_for, trim_when_quiet, NULL);
        return;
    }
    heap.timer_armed = false;
    malloc_trim(0);
}

void heap_note_release(void)
{
    heap.last_release_ms = clock_monotonic_ms();
    if (heap.timer_armed)
        return;
    heap.timer_armed = true;
    loop_timer_add(QUIET_MS, trim_when_quiet, NULL);
}
