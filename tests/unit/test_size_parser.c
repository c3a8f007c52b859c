/* The size parser (sandbox/limits.c limits_parse_size) that reads every size a user gives (the
   --*-limit options, a request's "memory" and "disk"): binary suffixes in either case with an
   optional "iB"/"B", fractions, and -1 for anything else (junk, signs, hex, overflow). */
#include "check.h"
#include "sandbox/limits.h"

static void test_plain_numbers_are_bytes(void)
{
    CHECK(limits_parse_size("0") == 0);
    CHECK(limits_parse_size("1") == 1);
    CHECK(limits_parse_size("1048576") == 1048576);
    CHECK(limits_parse_size("1.9") == 1); /* a fraction of a byte is dropped */
    CHECK(limits_parse_size("5B") == 5);
}

static void test_suffixes_are_powers_of_1024_in_any_case(void)
{
    CHECK(limits_parse_size("64k") == 64LL << 10);
    CHECK(limits_parse_size("64K") == 64LL << 10);
    CHECK(limits_parse_size("512M") == 512LL << 20);
    CHECK(limits_parse_size("512m") == 512LL << 20);
    CHECK(limits_parse_size("1G") == 1LL << 30);
    CHECK(limits_parse_size("2T") == 2LL << 40);
    CHECK(limits_parse_size("1GiB") == 1LL << 30);
    CHECK(limits_parse_size("1Gi") == 1LL << 30);
    CHECK(limits_parse_size("1GB") == 1LL << 30);
    CHECK(limits_parse_size("1gb") == 1LL << 30);
    CHECK(limits_parse_size("1 G") == 1LL << 30); /* spaces before the unit (or none after) */
    CHECK(limits_parse_size("1 ") == 1);
    CHECK(limits_parse_size("0.5G") == 512LL << 20);
    CHECK(limits_parse_size("1.5k") == 1536);
}

static void test_junk_is_malformed(void)
{
    const char *const junk[] = {"",     " 1",   "-1",  "+1", "G",    "1X",  "1GG", "1Gx",  "1G ",
                                "0x10", "0X10", "abc", "1e", "1,5G", "nan", "inf", "1KiBB"};
    for (size_t i = 0; i < sizeof junk / sizeof *junk; i++) {
        long long parsed = limits_parse_size(junk[i]);
        if (parsed != -1)
            printf("# '%s' parsed as %lld\n", junk[i], parsed);
        CHECK(parsed == -1);
    }
    CHECK(limits_parse_size(NULL) == -1);
}

static void test_sizes_past_2_to_the_63_are_malformed(void)
{
    CHECK(limits_parse_size("8388607T") == 8388607LL << 40); /* just under 2^63 */
    CHECK(limits_parse_size("8388608T") == -1);              /* 2^63 */
    CHECK(limits_parse_size("9223372036854775808") == -1);
    CHECK(limits_parse_size("1e300T") == -1);
    CHECK(limits_parse_size("99999999999999999999999999999999999999999") == -1);
}

int main(void)
{
    RUN(test_plain_numbers_are_bytes);
    RUN(test_suffixes_are_powers_of_1024_in_any_case);
    RUN(test_junk_is_malformed);
    RUN(test_sizes_past_2_to_the_63_are_malformed);
    return check_summary("size_parser");
}
