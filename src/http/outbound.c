#include "http/outbound.h"

#include "common/log.h"

static struct {
    size_t ceiling; /* 0 = none */
    size_t total;
    outbound_queue *head;
    bool evicting; /* an evict callback runs: its own updates must not start another round */
} outbound;

void outbound_set_ceiling(size_t bytes) { outbound.ceiling = bytes; }
size_t outbound_ceiling(void) { return outbound.ceiling; }
size_t outbound_total(void) { return outbound.total; }

void outbound_add(outbound_queue *queue, void (*evict)(void *owner, size_t total), void *owner)
{
    *queue = (outbound_queue){.counted = true, .evict = evict, .owner = owner, .next = outbound.head};
    if (outbound.head)
        outbound.head->prev = queue;
    outbound.head = queue;
}

void outbound_remove(outbound_queue *queue)
{
    if (!queue->counted)
        return;
    outbound.total -= queue->bytes;
    if (queue->prev)
        queue->prev->next = queue->next;
    else
        outbound.head = queue->next;
    if (queue->next)
        queue->next->prev = queue->prev;
    queue->counted = false;
    queue->bytes = 0;
    queue->prev = queue->next = NULL;
}

static outbound_queue *biggest_queue(void)
{
    outbound_queue *biggest = outbound.head;
    for (outbound_queue *q = outbound.head; q; q = q->next)
        if (q->bytes > biggest->bytes)
            biggest = q;
    return biggest;
}

/* The scan is linear, but it only runs past the ceiling, and each round removes a queue. */
static void evict_until_under_ceiling(void)
{
    outbound.evicting = true;
    while (outbound.total > outbound.ceiling && outbound.head) {
        outbound_queue *victim = biggest_queue();
        size_t total = outbound.total;
        log_warn("outbound: %zu bytes queued for slow clients pass --max-queued-bytes (%zu); "
                 "closing the connection that queues the most (%zu bytes)",
                 total, outbound.ceiling, victim->bytes);
        outbound_remove(victim);
        victim->evict(victim->owner, total);
    }
    outbound.evicting = false;
}

void outbound_update(outbound_queue *queue, size_t bytes)
{
    if (!queue->counted)
        return;
    outbound.total = outbound.total - queue->bytes + bytes;
    queue->bytes = bytes;
    if (outbound.ceiling > 0 && outbound.total > outbound.ceiling && !outbound.evicting)
        evict_until_under_ceiling();
}
