/* Text from outside: JSON strings that never fail, control bytes, and whole-string numbers. */
#include <jansson.h>
#include <limits.h>

#include "check.h"
#include "common/text.h"

static void test_json_string_replaces_what_is_not_utf8(void)
{
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"plain", "plain"},
        {"caf\xc3\xa9", "caf\xc3\xa9"},                             /* valid: kept as it is */
        {"\xff\xfe", "\xef\xbf\xbd\xef\xbf\xbd"},                   /* stray bytes */
        {"cut \xc3", "cut \xef\xbf\xbd"},                           /* a character cut short */
        {"\xc0\xaf", "\xef\xbf\xbd\xef\xbf\xbd"},                   /* overlong */
        {"\xed\xa0\x80!", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd!"}, /* a surrogate */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        json_t *s = text_json_string(cases[i].in);
        CHECK(s != NULL);
        CHECK_STR(json_string_value(s), cases[i].out);
        json_decref(s);
    }
    json_t *n = text_json_stringn("a\0b", 3); /* a NUL inside is kept, as JSON can hold it */
    CHECK(json_string_length(n) == 3);
    json_decref(n);
}

static void test_control_bytes(void)
{
    CHECK(!text_has_control_bytes("a b/c\xc3\xa9", 7));
    CHECK(text_has_control_bytes("a\0b", 3));
    CHECK(text_has_control_bytes("a\nb", 3));
    CHECK(text_has_control_bytes("\x1f", 1));
    CHECK(text_has_control_bytes("\x7f", 1));
    CHECK(!text_has_control_bytes("\x80\xff", 2)); /* not control bytes: not UTF-8 either */
}

static void test_integers_are_parsed_whole(void)
{
    long long v = -7;
    CHECK(text_parse_integer("0", 0, 10, &v) && v == 0);
    CHECK(text_parse_integer("10", 0, 10, &v) && v == 10);
    CHECK(text_parse_integer("-3", -5, 5, &v) && v == -3);
    CHECK(text_parse_integer("9223372036854775807", 0, LLONG_MAX, &v) && v == LLONG_MAX);
    v = 42;
    static const char *const refused[] = {
        "", "abc", "5x", " 5", "+5", "1.5", "11", "-1", "0x10", "99999999999999999999", "5 "};
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++)
        CHECK(!text_parse_integer(refused[i], 0, 10, &v));
    CHECK(!text_parse_integer(NULL, 0, 10, &v));
    CHECK(v == 42); /* untouched by a refusal */
}

int main(void)
{
    RUN(test_json_string_replaces_what_is_not_utf8);
    RUN(test_control_bytes);
    RUN(test_integers_are_parsed_whole);
    return check_summary("text");
}
