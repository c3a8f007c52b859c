/* cellboxd's options (daemon/config.c config_parse): defaults, a JSON config file, CELLBOX_*
   environment variables and flags in that order of precedence, each value checked against its
   type and range, and every refusal naming the option, where it came from and what it takes. */
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "daemon/config.h"

#define ARGC(argv) ((int)(sizeof(argv) / sizeof *(argv)))

static char why[512];

/* Parses argv (argv[0] included) with no CELLBOX_* variable set but those the test sets. */
static config_outcome parse(config *cfg, int argc, char **argv)
{
    why[0] = '\0';
    return config_parse(cfg, argc, argv, why, sizeof why);
}

/* The refusal for one bad flag, with its message checked. */
static void check_refused(const char *flag, const char *expected_why)
{
    config cfg;
    char *argv[] = {"cellboxd", (char *)flag};
    CHECK(parse(&cfg, ARGC(argv), argv) == CONFIG_INVALID);
    CHECK_STR(why, expected_why);
    config_free(&cfg);
}

static void test_defaults_without_options(void)
{
    config cfg;
    char *argv[] = {"cellboxd"};
    CHECK(parse(&cfg, ARGC(argv), argv) == CONFIG_READY);
    CHECK_STR(cfg.ip, "127.0.0.1");
    CHECK(cfg.port == 8888);
    CHECK(cfg.token == NULL); /* generated at start */
    CHECK(cfg.list_kernels);
    CHECK(cfg.cull_interval == 300);
    CHECK(cfg.memory_limit == 1LL << 30);
    CHECK(cfg.max_queued_bytes == 512LL << 20);
    CHECK(cfg.cpu_limit == 1.0);
    CHECK(cfg.zygote);
    CHECK(cfg.pool_size == 2);
    CHECK_STR(cfg.workspace_fs, "ext4");
    CHECK(cfg.data_dir != NULL);
    config_free(&cfg);
}

static void test_flags_of_every_type(void)
{
    config cfg;
    char *argv[] = {
        "cellboxd",    "--port=9000",      "--ip", "127.0.0.2",       "--list-kernels=false",
        "--cull-busy", "--memory-limit",   "512M", "--cpu-limit=0.5", "--max_pids_limit=100",
        "--token=",    "--data-dir=/tmp/x"};
    CHECK(parse(&cfg, ARGC(argv), argv) == CONFIG_READY);
    CHECK(cfg.port == 9000);
    CHECK_STR(cfg.ip, "127.0.0.2");
    CHECK(!cfg.list_kernels);
    CHECK(cfg.cull_busy); /* a bool flag without a value is true */
    CHECK(cfg.memory_limit == 512LL << 20);
    CHECK(cfg.cpu_limit == 0.5);
    CHECK(cfg.max_pids_limit == 100); /* '_' is '-' in a name */
    CHECK_STR(cfg.token, "");         /* empty: auth off, not "generate one" */
    CHECK_STR(cfg.data_dir, "/tmp/x");
    config_free(&cfg);
}

static void test_booleans_in_their_spellings(void)
{
    const char *const yes[] = {"true", "1", "yes", "on"}, *const no[] = {"false", "0", "no", "off"};
    for (size_t i = 0; i < 4; i++) {
        config cfg;
        char flag_yes[64], flag_no[64];
        snprintf(flag_yes, sizeof flag_yes, "--cull-connected=%s", yes[i]);
        snprintf(flag_no, sizeof flag_no, "--zygote=%s", no[i]);
        char *argv[] = {"cellboxd", flag_yes, flag_no};
        CHECK(parse(&cfg, ARGC(argv), argv) == CONFIG_READY);
        CHECK(cfg.cull_connected);
        CHECK(!cfg.zygote);
        config_free(&cfg);
    }
}

static void test_invalid_values_are_refused_with_the_reason(void)
{
    check_refused("--port=65536", "command line: --port takes 0 to 65535, not '65536'");
    check_refused("--port=-1", "command line: --port takes a whole number >= 0, not '-1'");
    check_refused("--pool-size=1000000001",
                  "command line: --pool-size takes a whole number >= 0, not '1000000001'");
    check_refused("--max-kernels=3x",
                  "command line: --max-kernels takes a whole number >= 0, not '3x'");
    check_refused("--zygote=maybe", "command line: --zygote takes true or false, not 'maybe'");
    check_refused(
        "--memory-limit=lots",
        "command line: --memory-limit takes a size like 512M, 1G or a number of bytes, not 'lots'");
    check_refused(
        "--memory-limit=0",
        "command line: --memory-limit takes a size like 512M, 1G or a number of bytes, not '0'");
    check_refused("--cpu-limit=-0.5", "command line: --cpu-limit takes a number >= 0, not '-0.5'");
    check_refused("--no-such-option", "unknown option '--no-such-option' (see cellboxd --help)");
    check_refused("stray", "unexpected argument 'stray' (see cellboxd --help)");
    check_refused("--port", "option --port needs a value");
}

static void test_ranges_at_their_edges(void)
{
    config cfg;
    char *argv[] = {"cellboxd", "--port=65535", "--max-memory-limit=0", "--pool-size=1000000000",
                    "--max-cpu-limit=0"};
    CHECK(parse(&cfg, ARGC(argv), argv) == CONFIG_READY);
    CHECK(cfg.port == 65535);
    CHECK(cfg.max_memory_limit == 0); /* a max-* size may be 0: unbounded */
    CHECK(cfg.pool_size == 1000000000);
    config_free(&cfg);
}

static void test_help_and_version_are_reported_not_printed(void)
{
    config cfg;
    char *help[] = {"cellboxd", "--port=1", "-h"};
    CHECK(parse(&cfg, ARGC(help), help) == CONFIG_HELP_ASKED);
    config_free(&cfg);
    char *version[] = {"cellboxd", "--version"};
    CHECK(parse(&cfg, ARGC(version), version) == CONFIG_VERSION_ASKED);
    config_free(&cfg);
    char *refused_first[] = {"cellboxd", "--port=x", "--help"}; /* read in order */
    CHECK(parse(&cfg, ARGC(refused_first), refused_first) == CONFIG_INVALID);
    config_free(&cfg);
}

/* Writes `text` to a temporary config file; its path goes in `path` (removed by the caller). */
static void write_config_file(char path[64], const char *text)
{
    snprintf(path, 64, "/tmp/cellbox-test-config-XXXXXX");
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    close(fd);
}

static void test_precedence_flags_then_environment_then_file(void)
{
    char path[64], config_flag[80];
    write_config_file(path, "{\"port\": 7000, \"cull_interval\": 60, \"ip\": \"127.0.0.3\","
                            " \"list_kernels\": false, \"cpu_limit\": 1.5}");
    snprintf(config_flag, sizeof config_flag, "--config=%s", path);
    setenv("CELLBOX_PORT", "7001", 1);
    setenv("CELLBOX_CULL_INTERVAL", "61", 1);
    config cfg;
    char *argv[] = {"cellboxd", config_flag, "--port=7002"};
    CHECK(parse(&cfg, ARGC(argv), argv) == CONFIG_READY);
    CHECK(cfg.port == 7002);        /* flag over environment and file */
    CHECK(cfg.cull_interval == 61); /* environment over file */
    CHECK_STR(cfg.ip, "127.0.0.3"); /* file over default */
    CHECK(!cfg.list_kernels);       /* a JSON boolean */
    CHECK(cfg.cpu_limit == 1.5);    /* a JSON real */
    config_free(&cfg);
    unsetenv("CELLBOX_PORT");
    unsetenv("CELLBOX_CULL_INTERVAL");

    setenv("CELLBOX_CONFIG", path, 1); /* the file named by the environment */
    char *bare[] = {"cellboxd"};
    CHECK(parse(&cfg, ARGC(bare), bare) == CONFIG_READY);
    CHECK(cfg.port == 7000);
    config_free(&cfg);
    unsetenv("CELLBOX_CONFIG");
    unlink(path);
}

static void test_a_bad_environment_variable_is_named(void)
{
    setenv("CELLBOX_MAX_KERNELS", "many", 1);
    config cfg;
    char *argv[] = {"cellboxd"};
    CHECK(parse(&cfg, ARGC(argv), argv) == CONFIG_INVALID);
    CHECK_STR(why, "CELLBOX_MAX_KERNELS: --max-kernels takes a whole number >= 0, not 'many'");
    config_free(&cfg);
    unsetenv("CELLBOX_MAX_KERNELS");
}

static void test_bad_config_files_are_refused_with_the_reason(void)
{
    static const struct {
        const char *text;
        const char *why_after_path; /* the message, after "config file PATH" */
    } cases[] = {
        {"[1, 2]", " must hold a JSON object"},
        {"{\"no_such\": 1}", ": unknown option 'no_such' (see cellboxd --help)"},
        {"{\"port\": [1]}", ": 'port' must be a string, number or boolean"},
        {"{\"port\": 70000}", ": --port takes 0 to 65535, not '70000'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char path[64], config_flag[80], expected[256];
        write_config_file(path, cases[i].text);
        snprintf(config_flag, sizeof config_flag, "--config=%s", path);
        /* a value's refusal names the file as its source, the rest say "config file" */
        snprintf(expected, sizeof expected, "%s%s%s",
                 strstr(cases[i].why_after_path, "--port") ? "" : "config file ", path,
                 cases[i].why_after_path);
        config cfg;
        char *argv[] = {"cellboxd", config_flag};
        CHECK(parse(&cfg, ARGC(argv), argv) == CONFIG_INVALID);
        CHECK_STR(why, expected);
        config_free(&cfg);
        unlink(path);
    }
    /* not JSON: jansson's words (they vary by version) after the path, then the line */
    char path[64], config_flag[80], prefix[128];
    write_config_file(path, "{\"port\": 1,\n");
    snprintf(config_flag, sizeof config_flag, "--config=%s", path);
    snprintf(prefix, sizeof prefix, "config file %s: ", path);
    config cfg;
    char *not_json[] = {"cellboxd", config_flag};
    CHECK(parse(&cfg, ARGC(not_json), not_json) == CONFIG_INVALID);
    CHECK(strncmp(why, prefix, strlen(prefix)) == 0);
    CHECK(strstr(why, "(line ") != NULL);
    config_free(&cfg);
    unlink(path);

    char *missing[] = {"cellboxd", "--config", "/nonexistent/cellbox.json"};
    CHECK(parse(&cfg, ARGC(missing), missing) == CONFIG_INVALID);
    CHECK(strncmp(why, "config file /nonexistent/cellbox.json: unable to open", 52) == 0);
    config_free(&cfg);
}

int main(void)
{
    /* the tests' own environment must not leak into the options */
    extern char **environ;
    for (char **variable = environ; *variable;) {
        if (strncmp(*variable, "CELLBOX_", 8) == 0) {
            char name[128];
            snprintf(name, sizeof name, "%.*s", (int)strcspn(*variable, "="), *variable);
            unsetenv(name); /* shifts the rest down: look at the same slot again */
        } else {
            variable++;
        }
    }
    RUN(test_defaults_without_options);
    RUN(test_flags_of_every_type);
    RUN(test_booleans_in_their_spellings);
    RUN(test_invalid_values_are_refused_with_the_reason);
    RUN(test_ranges_at_their_edges);
    RUN(test_help_and_version_are_reported_not_printed);
    RUN(test_precedence_flags_then_environment_then_file);
    RUN(test_a_bad_environment_variable_is_named);
    RUN(test_bad_config_files_are_refused_with_the_reason);
    return check_summary("config");
}
