/* Where the daemon's own cgroup is, read from /proc/self/cgroup's text: v1 (a line per
   hierarchy), v2 (one "0::" line, also at the root, as in a VM or container without systemd),
   and hybrid hosts that have both. */
#include "check.h"
#include "sandbox/cgroup.h"

static void test_v2_root(void)
{
    char path[256] = "unchanged";
    CHECK(cgroup_parse_own_path("0::/\n", NULL, path, sizeof path));
    CHECK_STR(path, "");
}

static void test_v2_nested_without_newline(void)
{
    char path[256];
    CHECK(cgroup_parse_own_path("0::/system.slice/cellbox.service", NULL, path, sizeof path));
    CHECK_STR(path, "/system.slice/cellbox.service");
}

static void test_v1_controllers(void)
{
    const char *text = "12:pids:/user.slice\n"
                       "5:cpu,cpuacct:/work\n"
                       "4:memory:/process_api/abc\n"
                       "1:name=systemd:/user.slice/session-1.scope\n";
    char path[256];
    CHECK(cgroup_parse_own_path(text, "memory", path, sizeof path));
    CHECK_STR(path, "/process_api/abc");
    CHECK(cgroup_parse_own_path(text, "cpuacct", path, sizeof path));
    CHECK_STR(path, "/work");
    CHECK(cgroup_parse_own_path(text, "pids", path, sizeof path));
    CHECK_STR(path, "/user.slice");
    CHECK(!cgroup_parse_own_path(text, "freezer", path, sizeof path));
    CHECK(!cgroup_parse_own_path(text, NULL, path, sizeof path)); /* no unified line */
}

static void test_hybrid_finds_both(void)
{
    const char *text = "4:memory:/a\n0::/b\n";
    char path[256];
    CHECK(cgroup_parse_own_path(text, NULL, path, sizeof path));
    CHECK_STR(path, "/b");
    CHECK(cgroup_parse_own_path(text, "memory", path, sizeof path));
    CHECK_STR(path, "/a");
}

static void test_malformed_lines_are_skipped(void)
{
    char path[256];
    CHECK(!cgroup_parse_own_path("", NULL, path, sizeof path));
    CHECK(!cgroup_parse_own_path("garbage\n0:\n", NULL, path, sizeof path));
    CHECK(cgroup_parse_own_path("garbage\n0::/x\n", NULL, path, sizeof path));
    CHECK_STR(path, "/x");
}

int main(void)
{
    RUN(test_v2_root);
    RUN(test_v2_nested_without_newline);
    RUN(test_v1_controllers);
    RUN(test_hybrid_finds_both);
    RUN(test_malformed_lines_are_skipped);
    return check_summary("cgroup_path");
}
