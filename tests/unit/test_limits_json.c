/* Limits written out (sandbox/limits.c): one spelling for GET /v1/sandboxes and the registry's
   records, read back whole, the records of an earlier daemon too; and equality over a chosen
   set of limits (a warm-pool kernel fits every limit, a prepared set only its cgroup's and
   volume's). */
#include "check.h"
#include "sandbox/limits.h"

static const sandbox_limits sample = {.memory_bytes = 512LL << 20,
                                      .pids = 256,
                                      .cpus = 1.5,
                                      .disk_bytes = 3LL << 30,
                                      .open_files = 1024,
                                      .timeout_seconds = 60,
                                      .output_bytes = 4 << 20,
                                      .network = true};

static void test_written_in_the_documented_spelling(void)
{
    json_t *written = limits_to_json(&sample);
    char *text = json_dumps(written, JSON_COMPACT);
    CHECK_STR(text, "{\"memory_bytes\":536870912,\"pids\":256,\"cpus\":1.5,\"disk_bytes\":3221225472,"
                    "\"open_files\":1024,\"timeout_s\":60,\"output_bytes\":4194304,\"network\":true}");
    free(text);
    json_decref(written);
}

static void test_read_back_whole(void)
{
    json_t *written = limits_to_json(&sample);
    sandbox_limits read = limits_from_json(written);
    CHECK(limits_equal(&read, &sample, LIMITS_ALL));
    json_decref(written);
}

static void test_an_earlier_daemons_record_is_read(void)
{
    json_t *record = json_pack("{s:I, s:i, s:f, s:I, s:i, s:i, s:I, s:b}", "memory_bytes",
                               (json_int_t)(512LL << 20), "pids", 256, "cpus", 1.5, "disk_bytes",
                               (json_int_t)(3LL << 30), "open_files", 1024, "timeout_seconds", 60,
                               "output_bytes", (json_int_t)(4 << 20), "network", 1);
    sandbox_limits read = limits_from_json(record);
    CHECK(read.timeout_seconds == 60);
    CHECK(limits_equal(&read, &sample, LIMITS_ALL));
    json_decref(record);
}

static void test_equality_over_the_chosen_limits(void)
{
    sandbox_limits other = sample;
    other.timeout_seconds = 5;
    other.network = false;
    CHECK(!limits_equal(&other, &sample, LIMITS_ALL));
    CHECK(limits_equal(&other, &sample, LIMITS_OF_CGROUP_AND_VOLUME));
    CHECK(!limits_equal(&other, &sample, LIMITS_NETWORK));
    other = sample;
    other.disk_bytes++;
    CHECK(!limits_equal(&other, &sample, LIMITS_OF_CGROUP_AND_VOLUME));
    CHECK(limits_equal(&other, &sample, LIMITS_ALL & ~LIMITS_DISK));
}

int main(void)
{
    RUN(test_written_in_the_documented_spelling);
    RUN(test_read_back_whole);
    RUN(test_an_earlier_daemons_record_is_read);
    RUN(test_equality_over_the_chosen_limits);
    return check_summary("limits_json");
}
