/* Request limits (sandbox/limits.c) from hostile text: numbers past long long and NaN, found by
   the body fuzzer (tests/fuzz/), are malformed instead of undefined behaviour. */
#include "check.h"
#include "sandbox/limits.h"

static void test_sizes_past_the_range_are_malformed(void)
{
    CHECK(limits_parse_size("512M") == 512LL << 20);
    CHECK(limits_parse_size("1.5k") == 1536);
    /* each of these was converted to long long out of range (undefined behaviour) */
    CHECK(limits_parse_size("2511111111111111111111111111111111111111116M") == -1);
    CHECK(limits_parse_size("9223372036854775808") == -1); /* 2^63 */
    CHECK(limits_parse_size("nan") == -1);
    CHECK(limits_parse_size("inf") == -1);
    CHECK(limits_parse_size("1e300T") == -1);
}

static void test_non_finite_limits_are_refused(void)
{
    sandbox_limits defaults = {.memory_bytes = 1LL << 30,
                               .pids = 64,
                               .cpus = 1,
                               .disk_bytes = 1LL << 30,
                               .open_files = 256,
                               .timeout_seconds = 30,
                               .output_bytes = 1 << 20};
    sandbox_limits maxima = {0}, out;
    failure_kind refusal;
    char why[256];
    const char *const values[] = {"nan", "inf", "-nan", "1e999"};
    for (size_t i = 0; i < sizeof values / sizeof *values; i++) {
        json_t *env = json_pack("{s:s}", "KERNEL_CELLBOX_PIDS", values[i]);
        CHECK(limits_from_request(NULL, NULL, env, &defaults, &maxima, false, &out, &refusal, why,
                                  sizeof why) < 0);
        json_decref(env);
    }
    /* no maximum set (as --max-execution-timeout 0): an int past INT_MAX is still refused */
    json_t *limits = json_pack("{s:f}", "timeout", 1e12);
    CHECK(limits_from_request(limits, NULL, NULL, &defaults, &maxima, false, &out, &refusal, why, sizeof why) < 0);
    json_decref(limits);
    limits = json_pack("{s:i}", "timeout", 3600);
    CHECK(limits_from_request(limits, NULL, NULL, &defaults, &maxima, false, &out, &refusal, why, sizeof why) == 0);
    CHECK(out.timeout_seconds == 3600);
    json_decref(limits);
    json_t *env = json_pack("{s:s}", "KERNEL_CELLBOX_MEMORY", "1e90G");
    CHECK(limits_from_request(NULL, NULL, env, &defaults, &maxima, false, &out, &refusal, why, sizeof why) <
          0);
    json_decref(env);
}

int main(void)
{
    RUN(test_sizes_past_the_range_are_malformed);
    RUN(test_non_finite_limits_are_refused);
    return check_summary("limits");
}
