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
 * A few slots' firewall parts (chain, sets, map entry) are made ahead, in the loop a moment after
 * each attach and detach, so an attach runs no nft script of its own: it makes the veth pair (its
 * sandbox end straight inside the sandbox's namespace) and configures both ends.
 *
 * Lifecycle: network_init once at start (after the uid block is claimed); network_attach once a
 * sandbox's pid 1 runs (a new one, or one adopted from a previous daemon); network_set_policy
 * whenever its allowOut/denyOut change; network_detach after it died; network_shutdown at stop. */
#ifndef CELLBOX_SANDBOX_NETWORK_H
#define CELLBOX_SANDBOX_NETWORK_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Called once at start: sweeps what a dead daemon of the same uid block left (its table and its
   cbx<block>-* links, nothing else), then makes the table (the always-denied destinations, the
   spoofing check, the host's input, NAT), makes the first slots ahead and turns on IPv4
   forwarding (remembering whether it was off). `range` is the sandboxes' IPv4 range
   (e.g. 10.88.0.0/16); `allowed_ranges` lists, comma-separated, the private ranges the operator
   lets sandboxes reach ("" = none). 0, or -1 with `why`. */
int network_init(int block, const char *range, const char *allowed_ranges, char *why,
                 size_t why_size);
/* What a dead daemon of `block` left (its table, its cbx<block>-* links), removed; for a daemon
   that hands out no network (network_init sweeps too). */
void network_sweep(int block);
/* Whether network_init succeeded (no network is handed out otherwise). */
bool network_ready(void);
/* The gateway's address as text (the sandboxes' resolver, for part N2's resolver), or NULL. */
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
/* Replaces the slot's allowOut/denyOut lists (IPv4 addresses or CIDRs), E2B's semantics: a
   destination in allowOut is reached even if denyOut covers it; one in denyOut is refused; any
   other is reached. The always-denied destinations stay denied whatever the lists say. Names
   (part N2) are admitted through the named sets sandbox_<slot>_allowed_names and
   sandbox_<slot>_denied_names, which this chain consults and a resolver fills. 0, or -1 with
   `why` naming the entry that is no IPv4 CIDR. */
int network_set_policy(int slot, const char *const *allow_out, size_t allow_count,
                       const char *const *deny_out, size_t deny_count, char *why, size_t why_size);
/* After the sandbox died (its namespace, and with it the veth pair, is gone or going): removes
   its chain and sets and frees its slot. */
void network_detach(int slot);
/* At stop: removes the table and every cbx<block>-* link, and turns IPv4 forwarding off again if
   network_init turned it on and no other cellbox daemon's table is left on the host. */
void network_shutdown(void);

#endif
