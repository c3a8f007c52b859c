/* network_dns — the resolver of a daemon's networked sandboxes, and the nftables sets their
 * domain names fill.
 *
 * One Debian dnsmasq per daemon answers every sandbox of the daemon. It listens only on the
 * address given (the sandboxes' bridge gateway), forwards to the upstream given (default: the
 * servers of the host's /etc/resolv.conf), refuses answers that point at private, loopback or
 * link-local addresses (--stop-dns-rebind: a name must not lead a sandbox to the host or its
 * network), answers no AAAA (sandboxes have IPv4 only), keeps no negative answers and caps every
 * TTL it hands out, serves no DHCP and no hosts file.
 *
 * Domain names in a sandbox's allowOut/denyOut become nftables sets in the daemon's table (inet
 * family): one set per listed domain, named by network_dns_set_name() and shared by every
 * sandbox that lists that domain; dnsmasq adds each IPv4 address it answers for the domain (or,
 * for "example.com", any name under it) to that set with --nftset. The caller's per-sandbox chain
 * refers to the sets of the domains the sandbox lists (`ip daddr @<set> accept` or `drop`); this
 * module never writes a rule. A set lives while some sandbox lists its domain; its elements
 * expire NETWORK_DNS_ELEMENT_TIMEOUT_S after they were added.
 *
 * dnsmasq reads its domain list only at start, so a change of any sandbox's list rewrites the
 * configuration and restarts it (a few milliseconds in which a query is refused; a resolver
 * client's retry finds the new one). If dnsmasq dies it is started again from the loop.
 *
 * Lifecycle, in order: network_dns_start() once the table exists (at daemon start, or when the
 * first networked sandbox is made); network_dns_set_domains() when a sandbox is created with
 * domain names, when its lists change, and with no domains when it is deleted;
 * network_dns_stop() at daemon stop. Everything runs on the daemon's loop (common/loop.h). */
#ifndef CELLBOX_SANDBOX_NETWORK_DNS_H
#define CELLBOX_SANDBOX_NETWORK_DNS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define NETWORK_DNS_DOMAINS_PER_SANDBOX 64   /* domain names in one sandbox's lists together */
#define NETWORK_DNS_DOMAINS_TOTAL 1024       /* distinct domains (= sets) of the whole daemon */
#define NETWORK_DNS_SET_SIZE 4096            /* addresses one domain's set holds at most */
#define NETWORK_DNS_ELEMENT_TIMEOUT_S 3600   /* how long an answered address stays in a set */
#define NETWORK_DNS_MAX_TTL_S 60             /* the longest TTL a sandbox is told */
#define NETWORK_DNS_SET_NAME_SIZE 24         /* "dns_" + 16 hex digits + NUL, rounded up */

typedef struct network_dns_options {
    const char *table;          /* the daemon's nftables table (family inet), e.g. cellbox_3;
                                   created here if it does not exist yet */
    const char *listen_address; /* IPv4 the resolver answers on: the bridge's gateway */
    const char *upstream;       /* "IP[#port]" servers, comma-separated; NULL or "": the servers
                                   of the host's /etc/resolv.conf */
    const char *state_dir;      /* the daemon's own directory: the resolver's configuration and
                                   pid file live in it, named for `table` */
    const char *dnsmasq_path;   /* NULL: /usr/sbin/dnsmasq */
    const char *rebind_allowed; /* NULL in production. Domains (comma-separated) whose answers
                                   may point anywhere, the host included: dnsmasq counts the
                                   documentation ranges (192.0.2.0/24, 198.51.100.0/24,
                                   203.0.113.0/24) as private, so a test world whose outside
                                   hosts live there names its outside domains here */
} network_dns_options;

/* Sweeps a resolver a dead daemon of the same table left (by the pid file in state_dir, and only
   if that pid is a dnsmasq running this table's configuration), writes the configuration and
   starts dnsmasq, supervised from the loop. 0, or -1 with `why` (a bad option, dnsmasq missing,
   the address not local, the sets not made). */
int network_dns_start(const network_dns_options *options, char *why, size_t why_size);

/* A domain as E2B writes it in allowOut/denyOut ("example.com", "*.example.com"; at most 253
   characters, two labels or more, a wildcard only as the whole first label): true if it is one,
   and `canonical` (NETWORK_DNS_DOMAIN_SIZE) gets it in lower case without a final dot. An
   address or CIDR is not a domain. */
#define NETWORK_DNS_DOMAIN_SIZE 256
bool network_dns_is_domain(const char *text, char *canonical);

/* The set that holds the answers for `domain` (canonical): "dns_" and 16 hex digits of its
   SHA-256, the same in every daemon and across restarts. */
void network_dns_set_name(const char *domain, char out[NETWORK_DNS_SET_NAME_SIZE]);

/* Makes `domains` (count of them, each network_dns_is_domain) the domains sandbox `sandbox_id`
   lists, in allowOut and denyOut together; count 0 forgets the sandbox. Creates the sets of
   domains no sandbox listed before, deletes those no sandbox lists any more, and restarts the
   resolver if the set of domains changed. 0, or -1 with `why` (over a limit, named with it; a
   set not made) and nothing changed. */
int network_dns_set_domains(const char *sandbox_id, const char *const *domains, size_t count,
                            char *why, size_t why_size);

/* Deletes the sets of domains no sandbox lists any more that network_dns_set_domains() could not
   delete because a chain still referred to them: the caller calls it once its chains no longer
   do (after rewriting or removing them). */
void network_dns_delete_unused_sets(void);

/* For a daemon that starts no resolver: stops the resolver a dead daemon of the same table left
   in `state_dir` (as network_dns_start does) and removes its configuration. */
void network_dns_sweep(const char *state_dir, const char *table);

/* The resolver's pid, or 0 when it is not running (between a death and its restart). */
pid_t network_dns_pid(void);

/* Stops the resolver, deletes every set this module made and its files; the table stays (it is
   the caller's). Idempotent. */
void network_dns_stop(void);

#endif
