/* E2B's sandbox hosts (api/ports.c): which Host values name a sandbox's port, and which do not
   (a Host is the client's to choose: nothing in it may route a request elsewhere). */
#include "check.h"
#include "api/ports.h"

static void test_default_domain_is_localhost_with_the_port(void)
{
    ports_init("", 8888, "tok");
    CHECK_STR(ports_domain(), "localhost:8888");
    ports_address a;
    CHECK(ports_parse_host("8000-abc-123.localhost:8888", &a));
    CHECK(a.port == 8000);
    CHECK_STR(a.sandbox_id, "abc-123");
    CHECK(ports_parse_host("8000-abc.LOCALHOST:8888", &a));  /* names ignore case */
    CHECK(ports_parse_host("8000-abc.localhost", &a));       /* a proxy in front dropped the port */
    CHECK(!ports_parse_host("8000-abc.localhost:9999", &a)); /* another daemon's port */
    CHECK(!ports_parse_host("localhost:8888", &a));          /* the daemon itself */
    CHECK(!ports_parse_host("127.0.0.1:8888", &a));
}

static void test_ports_and_ids_are_checked(void)
{
    ports_init("sandbox.example.test", 8888, "tok");
    ports_address a;
    CHECK(ports_parse_host("1-x.sandbox.example.test", &a) && a.port == 1);
    CHECK(ports_parse_host("65535-x.sandbox.example.test", &a) && a.port == 65535);
    CHECK(ports_parse_host("49983-x.sandbox.example.test:443", &a)); /* the domain says no port */
    CHECK(!ports_parse_host("0-x.sandbox.example.test", &a));
    CHECK(!ports_parse_host("65536-x.sandbox.example.test", &a));
    CHECK(!ports_parse_host("008000-x.sandbox.example.test", &a)); /* more than five digits */
    CHECK(!ports_parse_host("-1-x.sandbox.example.test", &a));
    CHECK(!ports_parse_host("8000x.sandbox.example.test", &a));
    CHECK(!ports_parse_host("8000-.sandbox.example.test", &a));    /* no id */
    CHECK(!ports_parse_host("8000-a/b.sandbox.example.test", &a)); /* not an id's character */
    CHECK(!ports_parse_host("8000-a%2e.sandbox.example.test", &a));
    CHECK(!ports_parse_host("8000-x.example.test", &a));           /* a parent of the domain */
    CHECK(!ports_parse_host("8000-x.evil.sandbox.example.test", &a)); /* a name below it */
    CHECK(!ports_parse_host("8000-x.sandbox.example.test.evil", &a));
    CHECK(!ports_parse_host("8000-x", &a));
    CHECK(!ports_parse_host("", &a));
    CHECK(!ports_parse_host(NULL, &a));
    char long_id[200];
    snprintf(long_id, sizeof long_id, "8000-%0100d.sandbox.example.test", 0);
    CHECK(!ports_parse_host(long_id, &a)); /* longer than any id */
}

int main(void)
{
    RUN(test_default_domain_is_localhost_with_the_port);
    RUN(test_ports_and_ids_are_checked);
    return check_summary("ports_host");
}
