/* The byte buffer (common/buffer.c) behind every socket queue: bytes come out in the order they
   went in across growth and front consumption, the capped append cuts at the cap and says so,
   the integer appends write the byte order they name, and a drained buffer that grew large gives
   its memory back. */
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "common/buffer.h"

static void test_an_empty_buffer_has_no_data(void)
{
    buffer b = {0};
    CHECK(buffer_size(&b) == 0);
    CHECK(buffer_head(&b) == NULL); /* NULL + 0 would be undefined behaviour */
    buffer_append(&b, "", 0);
    CHECK(b.data == NULL);
    buffer_free(&b);
}

static void test_bytes_come_out_in_order_across_growth_and_consumption(void)
{
    buffer b = {0};
    unsigned char expected = 0;
    bool in_order = true;
    /* 300 appends of 1000 bytes, consuming 700 after each: the front is reclaimed and the
       allocation grows, and every byte read back is the next one written */
    unsigned char next = 0;
    for (int round = 0; round < 300; round++) {
        unsigned char chunk[1000];
        for (size_t i = 0; i < sizeof chunk; i++)
            chunk[i] = next++;
        buffer_append(&b, chunk, sizeof chunk);
        for (size_t i = 0; i < 700; i++)
            in_order = in_order && (unsigned char)buffer_head(&b)[i] == expected++;
        buffer_consume(&b, 700);
    }
    CHECK(in_order);
    CHECK(buffer_size(&b) == 300 * 300);
    CHECK(b.start + buffer_size(&b) == b.length);
    CHECK(b.length <= b.capacity);
    buffer_free(&b);
    CHECK(b.data == NULL && b.capacity == 0 && buffer_size(&b) == 0);
}

static void test_capped_append_cuts_at_the_cap_and_says_so(void)
{
    buffer b = {0};
    CHECK(buffer_append_capped(&b, "hello", 5, 8));
    CHECK(!buffer_append_capped(&b, "world", 5, 8)); /* 3 of 5 fit */
    CHECK(buffer_size(&b) == 8);
    CHECK(memcmp(buffer_head(&b), "hellowor", 8) == 0);
    CHECK(!buffer_append_capped(&b, "x", 1, 8)); /* full: nothing fits */
    CHECK(buffer_size(&b) == 8);
    CHECK(buffer_append_capped(&b, "", 0, 8)); /* nothing asked, nothing cut */
    buffer_consume(&b, 5);
    CHECK(buffer_append_capped(&b, "abc", 3, 8)); /* the cap counts live bytes only */
    CHECK(buffer_size(&b) == 6);
    CHECK(memcmp(buffer_head(&b), "worabc", 6) == 0);
    buffer_free(&b);
}

static void test_integers_are_written_in_the_byte_order_named(void)
{
    buffer b = {0};
    buffer_append_u32le(&b, 0x11223344u);
    buffer_append_u32be(&b, 0x11223344u);
    buffer_append_u64le(&b, 0x0102030405060708ULL);
    const unsigned char expected[] = {0x44, 0x33, 0x22, 0x11, 0x11, 0x22, 0x33, 0x44,
                                      0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01};
    CHECK(buffer_size(&b) == sizeof expected);
    CHECK(memcmp(buffer_head(&b), expected, sizeof expected) == 0);
    buffer_free(&b);
}

static void test_truncate_keeps_the_first_bytes(void)
{
    buffer b = {0};
    buffer_append(&b, "abcdef", 6);
    buffer_consume(&b, 1);
    buffer_truncate(&b, 3);
    CHECK(buffer_size(&b) == 3);
    CHECK(memcmp(buffer_head(&b), "bcd", 3) == 0);
    buffer_truncate(&b, 10); /* longer than what is there: nothing changes */
    CHECK(buffer_size(&b) == 3);
    buffer_free(&b);
}

static void test_a_drained_buffer_gives_a_large_allocation_back(void)
{
    buffer small = {0}, large = {0};
    buffer_append(&small, "abc", 3);
    buffer_consume(&small, 3);
    CHECK(buffer_size(&small) == 0);
    CHECK(small.data != NULL); /* a small one is kept for the next bytes */
    CHECK(small.start == 0 && small.length == 0);

    char *burst = calloc(1, 1 << 20);
    CHECK(burst != NULL);
    buffer_append(&large, burst, 1 << 20);
    CHECK(large.capacity >= 1 << 20);
    buffer_consume(&large, 1 << 19);
    CHECK(large.data != NULL); /* not drained yet */
    buffer_consume(&large, 1 << 19);
    CHECK(large.data == NULL && large.capacity == 0);

    buffer_append(&large, burst, 1 << 20);
    buffer_truncate(&large, 0); /* emptied by truncation too */
    CHECK(large.data == NULL && large.capacity == 0);
    free(burst);
    buffer_free(&small);
    buffer_free(&large);
}

int main(void)
{
    RUN(test_an_empty_buffer_has_no_data);
    RUN(test_bytes_come_out_in_order_across_growth_and_consumption);
    RUN(test_capped_append_cuts_at_the_cap_and_says_so);
    RUN(test_integers_are_written_in_the_byte_order_named);
    RUN(test_truncate_keeps_the_first_bytes);
    RUN(test_a_drained_buffer_gives_a_large_allocation_back);
    return check_summary("buffer");
}
