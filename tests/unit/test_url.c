/* URL helpers (http/url.c) on hostile paths and escapes (the routing fuzzer's ground). */
#include "check.h"
#include "http/url.h"

static void test_split_path_counts_and_caps(void)
{
    char copy[64], *segments[3];
    CHECK(url_split_path("/api/kernels/abc", copy, sizeof copy, segments, 3) == 3);
    CHECK_STR(segments[2], "abc");
    CHECK(url_split_path("//a///b/", copy, sizeof copy, segments, 3) == 2);
    CHECK(url_split_path("/a/b/c/d", copy, sizeof copy, segments, 3) == 4); /* max + 1 */
    CHECK(url_split_path("/", copy, sizeof copy, segments, 3) == 0);
    char small[4];
    CHECK(url_split_path("/abcdef/g", small, sizeof small, segments, 3) ==
          1); /* cut, no overflow */
    CHECK_STR(segments[0], "ab");
}

static void test_percent_decode_takes_exactly_two_hex_digits(void)
{
    char text[64];
    snprintf(text, sizeof text, "a%%3Db%%26c%%20d");
    url_percent_decode(text);
    CHECK_STR(text, "a=b&c d");
    snprintf(text, sizeof text, "%%-1%% 12%%+1%%g0%%4");
    url_percent_decode(text); /* sscanf("%2x") read "-1" as 0xff and " 1" as 0x01 */
    CHECK_STR(text, "%-1% 12%+1%g0%4");
    snprintf(text, sizeof text, "plus+stays%%");
    url_percent_decode(text);
    CHECK_STR(text, "plus+stays%");
}

int main(void)
{
    RUN(test_split_path_counts_and_caps);
    RUN(test_percent_decode_takes_exactly_two_hex_digits);
    return check_summary("url");
}
