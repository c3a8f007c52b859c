/* The daemon-wide count of bytes queued for slow clients: past the ceiling the biggest queue is
   evicted (once), an evicted queue stops counting, and queues that leave give their bytes back.
   Also buffer.c's give-back of an emptied large allocation. */
#include "check.h"
#include "common/buffer.h"
#include "http/outbound.h"

typedef struct fake_connection {
    outbound_queue queue;
    int evictions;
    size_t total_seen;
} fake_connection;

static void evict(void *owner, size_t total)
{
    fake_connection *c = owner;
    c->evictions++;
    c->total_seen = total;
}

static void test_biggest_queue_is_evicted_past_the_ceiling(void)
{
    fake_connection small = {0}, big = {0}, writer = {0};
    outbound_set_ceiling(1000);
    outbound_add(&small.queue, evict, &small);
    outbound_add(&big.queue, evict, &big);
    outbound_add(&writer.queue, evict, &writer);
    outbound_update(&small.queue, 100);
    outbound_update(&big.queue, 700);
    CHECK(outbound_total() == 800);
    outbound_update(&writer.queue, 300); /* 1100: the write that passes the ceiling */
    CHECK(big.evictions == 1 && big.total_seen == 1100);
    CHECK(small.evictions == 0 && writer.evictions == 0);
    CHECK(outbound_total() == 400);
    outbound_update(&big.queue, 5000); /* evicted: no longer counted, never evicted twice */
    CHECK(outbound_total() == 400 && big.evictions == 1);
    outbound_remove(&big.queue); /* safe after eviction */
    outbound_remove(&small.queue);
    outbound_remove(&writer.queue);
    CHECK(outbound_total() == 0);
}

static void test_no_ceiling_evicts_nothing(void)
{
    fake_connection c = {0};
    outbound_set_ceiling(0);
    outbound_add(&c.queue, evict, &c);
    outbound_update(&c.queue, (size_t)1 << 40);
    CHECK(c.evictions == 0 && outbound_total() == (size_t)1 << 40);
    outbound_remove(&c.queue);
    CHECK(outbound_total() == 0);
}

static void test_emptied_large_buffer_is_given_back(void)
{
    static char block[256 * 1024];
    buffer b = {0};
    buffer_append(&b, block, sizeof block);
    buffer_consume(&b, 1000);
    CHECK(b.capacity >= sizeof block); /* still holding bytes: kept */
    buffer_consume(&b, sizeof block - 1000);
    CHECK(b.data == NULL && b.capacity == 0 && buffer_size(&b) == 0);
    buffer_append(&b, "abc", 3);
    buffer_truncate(&b, 1);
    CHECK(buffer_size(&b) == 1 && buffer_head(&b)[0] == 'a');
    buffer_free(&b);
}

int main(void)
{
    RUN(test_biggest_queue_is_evicted_past_the_ceiling);
    RUN(test_no_ceiling_evicts_nothing);
    RUN(test_emptied_large_buffer_is_given_back);
    return check_summary("outbound");
}
