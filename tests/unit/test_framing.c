/* The two WebSocket framings: round trips, and hostile input rejected with a reason. */
#include "api/framing.h"
#include "check.h"

static json_t *sample(void)
{
    return json_pack("{s:s, s:{s:s, s:s, s:s}, s:{s:s}, s:{}, s:{s:s}}", "channel", "shell", "header",
                     "msg_id", "m1", "msg_type", "execute_request", "session", "s1",
                     "parent_header", "msg_id", "p0", "metadata", "content", "code", "1+1");
}

static void test_legacy_round_trip(void)
{
    json_t *message = sample();
    size_t length;
    char *text = framing_encode_legacy(message, &length);
    char why[128];
    json_t *back = framing_decode_legacy((unsigned char *)text, length, 0, why, sizeof why);
    CHECK(back != NULL);
    CHECK_STR(json_string_value(json_object_get(back, "msg_type")), "execute_request");
    CHECK_STR(json_string_value(json_object_get(back, "msg_id")), "m1");
    CHECK_STR(json_string_value(json_object_get(back, "channel")), "shell");
    CHECK(json_object_get(back, "buffers") == NULL); /* client buffers are dropped */
    free(text);
    json_decref(back);
    json_decref(message);
}

static void test_legacy_defaults_channel_and_drops_dict_buffers(void)
{
    const char *autogen = "{\"header\":{\"msg_type\":\"kernel_info_request\",\"msg_id\":\"a\"},"
                          "\"parent_header\":{},\"metadata\":{},\"content\":{},\"buffers\":{}}";
    char why[128];
    json_t *m = framing_decode_legacy((const unsigned char *)autogen, strlen(autogen), 0, why, sizeof why);
    CHECK(m != NULL);
    CHECK_STR(json_string_value(json_object_get(m, "channel")), "shell");
    CHECK(json_object_get(m, "buffers") == NULL);
    json_decref(m);
}

static void test_legacy_binary(void)
{
    const char *json = "{\"header\":{\"msg_type\":\"comm_msg\"},\"channel\":\"shell\"}";
    buffer b = {0};
    buffer_append_u32be(&b, 2);
    buffer_append_u32be(&b, 12);
    buffer_append_u32be(&b, 12 + (unsigned)strlen(json));
    buffer_append(&b, json, strlen(json));
    buffer_append(&b, "BUF", 3);
    char why[128];
    json_t *m = framing_decode_legacy((unsigned char *)buffer_head(&b), buffer_size(&b), 1, why, sizeof why);
    CHECK(m != NULL);
    json_decref(m);
    /* An offset table that points past the end is refused. */
    ((unsigned char *)buffer_head(&b))[11] = 0xff;
    m = framing_decode_legacy((unsigned char *)buffer_head(&b), buffer_size(&b), 1, why, sizeof why);
    CHECK(m == NULL);
    buffer_free(&b);
}

static void test_v1_round_trip(void)
{
    json_t *message = sample();
    buffer b = {0};
    framing_encode_v1(message, &b);
    const unsigned char *p = (const unsigned char *)buffer_head(&b);
    CHECK(p[0] == 6);                 /* offset_count = 2 + 4 parts */
    CHECK(p[8] == 56);                /* offsets[0] = 8 * (offset_count + 1) */
    char why[128];
    json_t *back = framing_decode_v1(p, buffer_size(&b), why, sizeof why);
    CHECK(back != NULL);
    CHECK_STR(json_string_value(json_object_get(back, "channel")), "shell");
    CHECK_STR(json_string_value(json_object_get(json_object_get(back, "content"), "code")), "1+1");
    json_decref(back);
    json_decref(message);
    buffer_free(&b);
}

static void test_v1_rejects_garbage(void)
{
    char why[128];
    unsigned char tiny[4] = {1, 2, 3, 4};
    CHECK(framing_decode_v1(tiny, sizeof tiny, why, sizeof why) == NULL);
    unsigned char huge_count[64] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f};
    CHECK(framing_decode_v1(huge_count, sizeof huge_count, why, sizeof why) == NULL);
    json_t *message = sample();
    buffer b = {0};
    framing_encode_v1(message, &b);
    unsigned char *p = (unsigned char *)buffer_head(&b);
    p[8 * 3] = 0xf0; /* an offset beyond the message */
    CHECK(framing_decode_v1(p, buffer_size(&b), why, sizeof why) == NULL);
    json_decref(message);
    buffer_free(&b);
}

static void test_legacy_rejects_non_objects(void)
{
    char why[128];
    CHECK(framing_decode_legacy((const unsigned char *)"[1,2]", 5, 0, why, sizeof why) == NULL);
    CHECK(strstr(why, "object") != NULL);
    CHECK(framing_decode_legacy((const unsigned char *)"{\"a\":", 5, 0, why, sizeof why) == NULL);
    CHECK(strstr(why, "JSON") != NULL);
}

int main(void)
{
    RUN(test_legacy_round_trip);
    RUN(test_legacy_defaults_channel_and_drops_dict_buffers);
    RUN(test_legacy_binary);
    RUN(test_v1_round_trip);
    RUN(test_v1_rejects_garbage);
    RUN(test_legacy_rejects_non_objects);
    return check_summary("framing");
}
