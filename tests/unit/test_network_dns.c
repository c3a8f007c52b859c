/* The domain names sandbox/network_dns.c accepts in allowOut/denyOut, and the set each gets. */
#include "check.h"
#include "sandbox/network_dns.h"

static bool accepts(const char *text, const char *canonical)
{
    char out[NETWORK_DNS_DOMAIN_SIZE];
    return network_dns_is_domain(text, out) && strcmp(out, canonical) == 0;
}

static bool refuses(const char *text)
{
    char out[NETWORK_DNS_DOMAIN_SIZE];
    return !network_dns_is_domain(text, out);
}

static void test_names_and_wildcards_as_e2b_writes_them(void)
{
    CHECK(accepts("example.com", "example.com"));
    CHECK(accepts("API.Example.COM.", "api.example.com")); /* lower case, no final dot */
    CHECK(accepts("*.example.com", "*.example.com"));
    CHECK(accepts("a-b.example.com", "a-b.example.com"));
}

static void test_what_is_not_a_domain_is_refused(void)
{
    CHECK(refuses(""));
    CHECK(refuses("com"));                 /* one label would admit a whole top-level domain */
    CHECK(refuses("*.com"));
    CHECK(refuses("203.0.113.10"));        /* an address, not a name */
    CHECK(refuses("203.0.113.0/24"));
    CHECK(refuses("a..example.com"));
    CHECK(refuses("-a.example.com"));
    CHECK(refuses("a-.example.com"));
    CHECK(refuses("*.*.example.com"));     /* a wildcard only as the whole first label */
    CHECK(refuses("a*.example.com"));
    CHECK(refuses("exa mple.com"));
    CHECK(refuses("/example.com/"));       /* would break dnsmasq's nftset=/domain/ line */
    CHECK(refuses("example.com#4"));
    char long_label[80];
    memset(long_label, 'a', 64);
    strcpy(long_label + 64, ".com");
    CHECK(refuses(long_label));            /* a label is 63 characters at most */
    char long_name[300] = "";
    for (int i = 0; i < 55; i++) strcat(long_name, "abcd."); /* 278 characters with "com" */
    strcat(long_name, "com");
    CHECK(refuses(long_name));             /* a name is 253 characters at most */
}

static void test_each_domain_has_one_stable_set_name(void)
{
    char first[NETWORK_DNS_SET_NAME_SIZE], again[NETWORK_DNS_SET_NAME_SIZE], other[NETWORK_DNS_SET_NAME_SIZE];
    network_dns_set_name("example.com", first);
    network_dns_set_name("example.com", again);
    network_dns_set_name("*.example.com", other);
    CHECK_STR(first, again);
    CHECK(strcmp(first, other) != 0);
    CHECK(strncmp(first, "dns_", 4) == 0 && strlen(first) == 20);
}

int main(void)
{
    RUN(test_names_and_wildcards_as_e2b_writes_them);
    RUN(test_what_is_not_a_domain_is_refused);
    RUN(test_each_domain_has_one_stable_set_name);
    return check_summary("network_dns");
}
