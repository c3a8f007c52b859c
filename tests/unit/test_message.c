/* Message building and checking, UTF-8 hygiene and the timestamp format clients parse. */
#include <stdlib.h>

#include "check.h"
#include "common/clock.h"
#include "common/fs.h"
#include "common/ids.h"
#include "common/text.h"
#include "kernel/message.h"
#include <sys/stat.h>
#include <unistd.h>

static void test_status_message_shape(void)
{
    json_t *parent = json_pack("{s:s, s:s, s:s}", "msg_id", "req", "session", "client", "msg_type",
                               "execute_request");
    json_t *m = message_status("kernel-session", parent, "busy");
    CHECK_STR(message_type(m), "status");
    CHECK_STR(message_parent_session(m), "client");
    CHECK_STR(message_parent_type(m), "execute_request");
    CHECK_STR(json_string_value(json_object_get(json_object_get(m, "header"), "version")), "5.3");
    CHECK(id_is_uuid(message_id(m)));
    CHECK_STR(json_string_value(json_object_get(json_object_get(m, "content"), "execution_state")), "busy");
    json_decref(m);
    json_decref(parent);
}

static void test_check_fills_defaults_and_rejects_bad_shapes(void)
{
    static const char *const channels[] = {"shell", NULL};
    char why[128];
    json_t *m = json_pack("{s:s, s:{s:s}}", "channel", "shell", "header", "msg_type", "kernel_info_request");
    CHECK(message_check(m, channels, why, sizeof why));
    CHECK(json_is_object(json_object_get(m, "content")));
    json_object_set_new(m, "channel", json_string("iopub"));
    CHECK(!message_check(m, channels, why, sizeof why));
    CHECK(strstr(why, "channel") != NULL);
    json_object_set_new(m, "channel", json_string("shell"));
    json_object_set_new(m, "content", json_integer(3));
    CHECK(!message_check(m, channels, why, sizeof why));
    json_decref(m);
    json_t *no_type = json_pack("{s:s, s:{}}", "channel", "shell", "header");
    CHECK(!message_check(no_type, channels, why, sizeof why));
    json_decref(no_type);
}

static void test_untracked_types(void)
{
    CHECK(message_type_is_untracked("kernel_info_request"));
    CHECK(!message_type_is_untracked("execute_request"));
    CHECK(!message_type_is_untracked(NULL));
}

static void test_utf8_repair_and_split_sequences(void)
{
    buffer out = {0};
    const unsigned char bad[] = {'a', 0xff, 'b'};
    CHECK(text_append_utf8(&out, bad, 3, 0) == 0);
    CHECK(buffer_size(&out) == 5 && memcmp(buffer_head(&out), "a\xef\xbf\xbd" "b", 5) == 0);
    buffer_free(&out);
    const unsigned char euro[] = {'x', 0xe2, 0x82}; /* € cut after two of three bytes */
    CHECK(text_append_utf8(&out, euro, 3, 0) == 2);
    CHECK(buffer_size(&out) == 1);
    buffer_free(&out);
    CHECK(text_append_utf8(&out, euro, 3, 1) == 0); /* at the end it is replaced */
    CHECK(buffer_size(&out) == 4);
    buffer_free(&out);
    const unsigned char surrogate[] = {0xed, 0xa0, 0x80};
    text_append_utf8(&out, surrogate, 3, 1);
    json_t *as_json = json_stringn(buffer_head(&out), buffer_size(&out));
    CHECK(as_json != NULL);
    json_decref(as_json);
    buffer_free(&out);
}

static void test_ansi_colours_are_taken_out(void)
{
    buffer out = {0};
    /* As IPython colours a traceback line, then an unfinished sequence at the end. */
    text_append_without_ansi(&out, "\033[0;31mZeroDivisionError\033[0m: division by zero\033[1");
    buffer_append(&out, "", 1);
    CHECK_STR(buffer_head(&out), "ZeroDivisionError: division by zero");
    buffer_free(&out);
    text_append_without_ansi(&out, "plain \xe2\x82\xac text\033");
    buffer_append(&out, "", 1);
    CHECK_STR(buffer_head(&out), "plain \xe2\x82\xac text");
    buffer_free(&out);
}

/* A prefix that must fit a limit (a close reason's 123 bytes) ends before a character, never
   inside one; what fits is left whole. */
static void test_utf8_fit_never_cuts_a_character(void)
{
    const char *euros = "\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac"; /* three 3-byte characters */
    CHECK(text_utf8_fit(euros, 9, 9) == 9);
    CHECK(text_utf8_fit(euros, 9, 8) == 6);
    CHECK(text_utf8_fit(euros, 9, 7) == 6);
    CHECK(text_utf8_fit(euros, 9, 6) == 6);
    CHECK(text_utf8_fit(euros, 9, 2) == 0);
    CHECK(text_utf8_fit("abc\xf0\x9f\x98\x80", 7, 5) == 3); /* a 4-byte emoji */
    CHECK(text_utf8_fit("plain ascii", 11, 5) == 5);
    char channel[130];
    memset(channel, 0, sizeof channel);
    for (int i = 0; i < 42; i++)
        memcpy(channel + 3 * i, "\xe2\x82\xac", 3);
    static const char *const channels[] = {"shell", NULL};
    char why[200];
    json_t *m = json_pack("{s:s, s:{s:s}}", "channel", channel, "header", "msg_type", "x");
    CHECK(!message_check(m, channels, why, sizeof why));
    buffer repaired = {0};
    CHECK(text_append_utf8(&repaired, (const unsigned char *)why, strlen(why), 1) == 0);
    CHECK(buffer_size(&repaired) == strlen(why)); /* nothing needed replacing: valid UTF-8 */
    buffer_free(&repaired);
    json_decref(m);
}

static void test_iso_time_has_six_digits_and_z(void)
{
    char text[ISO_TIME_BUFFER];
    clock_format_iso(1710265878123456LL, text);
    CHECK_STR(text, "2024-03-12T17:51:18.123456Z");
    clock_format_iso(1710265878000001LL, text);
    CHECK_STR(text, "2024-03-12T17:51:18.000001Z");
}

static void test_remove_tree_does_not_follow_links(void)
{
    char root[] = "/tmp/cellbox-unit-XXXXXX", outside[] = "/tmp/cellbox-outside-XXXXXX";
    CHECK(mkdtemp(root) && mkdtemp(outside));
    char path[256], keep[256];
    snprintf(keep, sizeof keep, "%s/keep", outside);
    FILE *f = fopen(keep, "w");
    fputs("precious", f);
    fclose(f);
    snprintf(path, sizeof path, "%s/a/b", root);
    CHECK(fs_mkdir_p(path, 0700) == 0);
    snprintf(path, sizeof path, "%s/a/link", root);
    CHECK(symlink(outside, path) == 0);
    CHECK(fs_remove_tree(root) == 0);
    CHECK(access(root, F_OK) != 0);
    CHECK(access(keep, F_OK) == 0);
    fs_remove_tree(outside);
}

static void test_kernel_frames_split_and_checked(void)
{
    static const unsigned char two[] = "\x02\x00\x00\x00{}\x05\x00\x00\x00[1,2";
    size_t length = 99;
    CHECK(message_frame_next(two, 3, &length) == MESSAGE_FRAME_INCOMPLETE);
    CHECK(message_frame_next(two, sizeof two - 1, &length) == MESSAGE_FRAME_READY && length == 2);
    CHECK(message_frame_next(two + 6, sizeof two - 7, &length) == MESSAGE_FRAME_INCOMPLETE);
    static const unsigned char huge[] = "\xf0\xff\xff\xff{}";
    CHECK(message_frame_next(huge, sizeof huge - 1, &length) == MESSAGE_FRAME_TOO_LARGE);
    CHECK(length == 0xfffffff0u); /* named in the kernel's death reason */

    char why[160];
    static const char good[] = "{\"header\":{\"msg_type\":\"status\"},\"channel\":\"iopub\"}";
    json_t *message = message_from_kernel(good, sizeof good - 1, why, sizeof why);
    CHECK(message && json_is_object(json_object_get(message, "content")));
    json_decref(message);
    static const char twice[] = "{\"header\":{\"msg_type\":\"a\"},\"channel\":\"iopub\",\"channel\":\"x\"}";
    CHECK(!message_from_kernel(twice, sizeof twice - 1, why, sizeof why));
    CHECK(strstr(why, "invalid JSON") != NULL);
    static const char shell_only[] = "{\"header\":{\"msg_type\":\"a\"},\"channel\":\"evil\"}";
    CHECK(!message_from_kernel(shell_only, sizeof shell_only - 1, why, sizeof why));
    CHECK_STR(why, "unknown channel 'evil'");
}

static void test_utf8_prefix_never_cuts_a_character(void)
{
    CHECK(text_utf8_prefix("abc", 10) == 3);
    CHECK(text_utf8_prefix("abcdef", 4) == 4);
    CHECK(text_utf8_prefix("a\xc3\xa9", 2) == 1);           /* é would be cut */
    CHECK(text_utf8_prefix("a\xc3\xa9", 3) == 3);
    CHECK(text_utf8_prefix("\xe2\x82\xac\xe2\x82\xac", 5) == 3); /* €€ */
    CHECK(text_utf8_prefix("\xf0\x9f\x98\x80", 3) == 0);
    CHECK(text_utf8_prefix("", 5) == 0);
    /* a kernel's unknown channel of 40+ bytes ending mid-character: the reason stays UTF-8 */
    static const char frame[] = "{\"header\":{\"msg_type\":\"a\"},\"channel\":\"a\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
                                "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
                                "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\"}";
    char why[160];
    CHECK(!message_from_kernel(frame, sizeof frame - 1, why, sizeof why));
    json_t *reason = json_string(why);
    CHECK(reason != NULL);
    json_decref(reason);
}

static void test_scrub_leaves_only_utf8(void)
{
    char text[64];
    snprintf(text, sizeof text, "invalid escape near '\"l\\\xd3'");
    text_scrub_utf8(text); /* jansson's text for {"l\<U+04CF>: the character cut */
    CHECK_STR(text, "invalid escape near '\"l\\?'");
    snprintf(text, sizeof text, "ok \xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
    text_scrub_utf8(text);
    CHECK_STR(text, "ok \xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
    snprintf(text, sizeof text, "\xff\xc0\xaf\xed\xa0\x80\xe2\x82x");
    text_scrub_utf8(text); /* invalid, overlong, surrogate, cut before 'x' */
    CHECK_STR(text, "????????x");
    json_error_t error;
    CHECK(!json_loads("{\"l\\\xd3\x8f\"}", 0, &error));
    text_scrub_utf8(error.text);
    json_t *reason = json_string(error.text);
    CHECK(reason != NULL);
    json_decref(reason);
}

int main(void)
{
    RUN(test_status_message_shape);
    RUN(test_check_fills_defaults_and_rejects_bad_shapes);
    RUN(test_untracked_types);
    RUN(test_utf8_repair_and_split_sequences);
    RUN(test_ansi_colours_are_taken_out);
    RUN(test_utf8_fit_never_cuts_a_character);
    RUN(test_iso_time_has_six_digits_and_z);
    RUN(test_remove_tree_does_not_follow_links);
    RUN(test_kernel_frames_split_and_checked);
    RUN(test_utf8_prefix_never_cuts_a_character);
    RUN(test_scrub_leaves_only_utf8);
    return check_summary("message");
}
