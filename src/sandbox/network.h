/* network — a sandbox's own interface to the outside, and the firewall that keeps the host and
 * the other sandboxes out of its reach.
 *
 * Every sandbox has a network namespace of its own. One with network gets a veth pair: the
 * sandbox's end is its eth0, with one address from the daemon's range (--network-range) and a
 * default route to the gateway; the host's end, cbx<block>-<slot>, carries the gateway address
 * (the range's first host) and a route to that one address. Sandboxes are routed one by one, not
 * bridged: a packet's input interface then names the sandbox it came from, which is what the
 * spoofing check and the per-sandbox policy key on. IPv6 is off inside.
 *
 * The policy lives in one nftables table of the daemon's own, inet cellbox_<block> (the uid
 * block makes it unique on the host), written as nft scripts through libnftables; links,
 * addresses and routes are made through libnl-route-3.
 *
 * The gateway address also lives, from start to stop, on an empty bridge cbx<block>-gw: the
 * sandboxes' resolver (sandbox/network_dns.c, one dnsmasq) listens there, and domain names in a
 * sandbox's lists become nftables sets the resolver fills with what it answered.
 *
 * A few slots' firewall parts (chain, map entry) are made ahead, in the loop a moment after each
 * attach and detach, so an attach runs no nft script of its own: it makes the veth pair (its
 * sandbox end straight inside the sandbox's namespace) and configures both ends.
 *
 * Lifecycle: network_init once at start (after the uid block is claimed); network_start_resolver
 * once the loop runs; network_attach once a sandbox's pid 1 runs (a new one, or one adopted from
 * a previous daemon); network_set_policy whenever its allowOut/denyOut change; network_detach
 * after it died, then network_forget_names; network_shutdown at stop. */
#ifndef CELLBOX_SANDBOX_NETWORK_H
#define CELLBOX_SANDBOX_NETWORK_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Called once at start: sweeps what a dead daemon of the same uid block left (its table and its
   cbx<block>-* links, nothing else), then makes the table (the always-denied destinations, the
   spoofing check, the host's input, NAT) and the gateway's link, makes the first slots ahead
   and turns on IPv4 forwarding (remembering whether it was off). `range` is the sandboxes' IPv4
   range (e.g. 10.88.0.0/16); `allowed_ranges` lists, comma-separated, the private ranges the
   operator lets sandboxes reach ("" = none). 0, or -1 with `why`. */
int network_init(int block, const char *range, const char *allowed_ranges, char *why,
                 size_t why_size);
/* What a dead daemon of `block` left (its table, its cbx<block>-* links), removed; for a daemon
   that hands out no network (network_init sweeps too). */
void network_sweep(int block);

typedef struct network_resolver_options {
    const char *state_dir;      /* the data directory: the resolver's configuration, pid file */
    const char *upstream;       /* "IP[#port],..."; NULL or "": /etc/resolv.conf's servers */
    const char *rebind_allowed; /* domains whose answers may point at private or documentation
                                   space (test worlds); NULL or "": none */
    const char *deny_out;       /* the operator's deny list: CIDRs and domains, comma-separated,
                                   denied to every sandbox whatever its allowOut says */
} network_resolver_options;

/* Called once at start after network_init, once the loop runs (the resolver is supervised from
   it): starts the sandboxes' resolver on the gateway (sweeping one a dead daemon left, by the pid
   file in state_dir) and puts the operator's deny list in force. 0, or -1 with `why` (a bad
   entry named, dnsmasq missing or not listening); nothing of the resolver is left running. */
int network_start_resolver(const network_resolver_options *options, char *why, size_t why_size);
/* Called once at start after network_init: holds every sandbox to at most `max_connections`
   connections (flows) at once, a new one over it refused, and `bytes_per_second` each way
   (packets over it dropped); 0 = no limit. 0, or -1 with `why` (nftables refused). */
int network_limit_sandboxes(int max_connections, long long bytes_per_second, char *why,
                            size_t why_size);
/* For a daemon that starts no resolver: stops one a dead daemon of `block` left in `state_dir`. */
void network_sweep_resolver(int block, const char *state_dir);
/* Whether network_init succeeded (no network is handed out otherwise). */
bool network_ready(void);
/* The gateway's address as text (the sandboxes' resolver: their resolv.conf names it), or NULL. */
const char *network_gateway(void);

/* Gives the running sandbox behind `supervisor_pidfd` its interface, address, route and policy
   chain, which holds the policy of empty lists (everything but the always-denied) until
   network_set_policy: a sandbox without lists needs no call of it. Returns its slot (>= 0), or -1
   with `why` (the range is full, or a step failed: nothing is left half made). */
int network_attach(pid_t pid, int supervisor_pidfd, char *why, size_t why_size);
/* The sandbox's address as text, for `slot`. */
void network_address(int slot, char *out, size_t out_size);
/* Whether `text` is an IPv4 address or CIDR (a.b.c.d or a.b.c.d/n). */
bool network_is_cidr(const char *text);
/* Replaces the slot's allowOut/denyOut lists, E2B's semantics: a destination in allowOut is
   reached even if denyOut covers it; one in denyOut is refused; any other is reached. The
   always-denied destinations and the operator's deny list stay denied whatever the lists say.
   An entry is an IPv4 address, a CIDR, or a domain name ("example.com": it and every name under
   it; "*.example.com": the same): a domain matches the addresses the resolver answered for it
   (to any sandbox) in the last NETWORK_DNS_ELEMENT_TIMEOUT_S, through its set; `sandbox_id` is
   whose domains they are (network_dns_set_domains). 0, or -1 with `why` naming the entry that is
   neither, or a limit of the resolver's (NETWORK_DNS_DOMAINS_PER_SANDBOX domains), with the
   chain unchanged. */
int network_set_policy(int slot, const char *sandbox_id, const char *const *allow_out,
                       size_t allow_count, const char *const *deny_out, size_t deny_count,
                       char *why, size_t why_size);
/* After network_detach (its chain no longer refers to them): the sandbox's domains forgotten,
   their sets deleted where no other sandbox lists them. */
void network_forget_names(const char *sandbox_id);
/* After the sandbox died (its namespace, and with it the veth pair, is gone or going): removes
   its chain and sets and frees its slot. */
void network_detach(int slot);
/* At stop: stops the resolver (its sets and files go), removes the table and every
   cbx<block>-* link, and turns IPv4 forwarding off again if network_init turned it on and no
   other cellbox daemon's table is left on the host. */
void network_shutdown(void);

#endif
