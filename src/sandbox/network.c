#include "sandbox/network.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netlink/netlink.h>
#include <netlink/route/addr.h>
#include <netlink/route/link.h>
#include <netlink/route/link/bridge.h>
#include <netlink/route/link/veth.h>
#include <netlink/route/route.h>
#include <nftables/libnftables.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/loop.h"
#include "sandbox/network_dns.h"

#define SCRIPT_SIZE 8192
#define LINK_NAME_SIZE 32                /* names are at most 13 (cbx1023-65535), under IFNAMSIZ */
#define GATEWAY_LINK_SUFFIX "gw"         /* cbx<block>-gw: the gateway's home from start to stop */
#define OPERATOR_ID "--network-deny-out" /* whose domains the operator's deny list names */
/* Slots whose firewall part (chain, sets, map entry) is made ahead, like the prepared volumes
   and cgroups: enough for the creates of a moment; a burst beyond them makes its slots on the
   spot. */
#define PREPARED_SLOTS 2
/* After an attach or a detach, the next slot is made this much later: not in the middle of the
   create that took one (its kernel's first result), but long before the next create is likely. */
#define PREPARE_DELAY_MS 100

/* A slot's life: free; prepared (its chain and map entry made, for an interface that does not
   exist yet: no packet can match them, and nothing is routed to its address); in use by one
   sandbox, whose veth pair is made at attach. */
enum slot_state { SLOT_FREE, SLOT_PREPARED, SLOT_IN_USE };

static struct {
    bool ready;
    int block;
    char table[32];       /* cellbox_<block> */
    char link_prefix[12]; /* cbx<block>- : every host end of ours */
    uint32_t base;        /* the range's network address, host order */
    int prefix_length;
    int slot_count; /* host numbers in the range: 2 (after the gateway) .. */
    char gateway[INET_ADDRSTRLEN];
    unsigned char *state; /* slot -> enum slot_state */
    int prepared_count;
    loop_timer_id prepare_timer;
    struct nft_ctx *nft;
    struct nl_sock *route;   /* kept open: one socket per attach cost a connect and a bind */
    bool forwarding_was_off; /* ip_forward was 0 before network_init turned it on */
} net;

/* Runs an nft script; on failure `why` gets nft's own message. */
static int run_nft(const char *script, char *why, size_t why_size)
{
    if (nft_run_cmd_from_buffer(net.nft, script) == 0)
        return 0;
    const char *error = nft_ctx_get_error_buffer(net.nft);
    snprintf(why, why_size, "nftables refused the sandbox firewall: %s", error ? error : "?");
    /* nft's message ends in a newline and a caret line: keep the first line only. */
    char *newline = strchr(why, '\n');
    if (newline)
        *newline = '\0';
    return -1;
}

static void address_text(uint32_t host_order, char *out, size_t out_size)
{
    struct in_addr address = {.s_addr = htonl(host_order)};
    inet_ntop(AF_INET, &address, out, (socklen_t)out_size);
}

void network_address(int slot, char *out, size_t out_size)
{
    address_text(net.base + (uint32_t)slot, out, out_size);
}

static void host_link_name(int slot, char *out, size_t out_size)
{
    snprintf(out, out_size, "%s%d", net.link_prefix, slot);
}

/* "a.b.c.d/n" -> network address (host order) and n; -1 if it is no IPv4 CIDR. */
static int parse_cidr(const char *text, uint32_t *network, int *length)
{
    char address[INET_ADDRSTRLEN];
    const char *slash = strchr(text, '/');
    size_t address_length = slash ? (size_t)(slash - text) : strlen(text);
    if (address_length >= sizeof address)
        return -1;
    memcpy(address, text, address_length);
    address[address_length] = '\0';
    struct in_addr parsed;
    if (inet_pton(AF_INET, address, &parsed) != 1)
        return -1;
    int bits = 32;
    if (slash) {
        char *end;
        long value = strtol(slash + 1, &end, 10);
        if (*end || end == slash + 1 || value < 0 || value > 32)
            return -1;
        bits = (int)value;
    }
    uint32_t mask = bits == 0 ? 0 : 0xffffffffu << (32 - bits);
    *network = ntohl(parsed.s_addr) & mask;
    *length = bits;
    return 0;
}

bool network_is_cidr(const char *text)
{
    uint32_t network;
    int length;
    return text && parse_cidr(text, &network, &length) == 0;
}

/* Appends the comma-separated CIDRs of `list` to `out` as nft elements, each checked. */
static int append_cidr_elements(const char *list, char *out, size_t out_size, char *why,
                                size_t why_size)
{
    char *copy = strdup(list), *save = NULL;
    int rc = 0;
    for (char *item = strtok_r(copy, ", ", &save); item; item = strtok_r(NULL, ", ", &save)) {
        uint32_t network;
        int length;
        if (parse_cidr(item, &network, &length) < 0) {
            snprintf(why, why_size, "'%s' is no IPv4 address or CIDR (e.g. 192.168.1.0/24)", item);
            rc = -1;
            break;
        }
        size_t used = strlen(out);
        snprintf(out + used, out_size - used, "%s%s", used && out[used - 1] != '{' ? ", " : "",
                 item);
    }
    free(copy);
    return rc;
}

/* ---- links, addresses and routes (libnl-route-3) ---- */

static struct nl_sock *route_socket(void)
{
    struct nl_sock *sock = nl_socket_alloc();
    if (sock && nl_connect(sock, NETLINK_ROUTE) < 0) {
        nl_socket_free(sock);
        return NULL;
    }
    return sock;
}

/* Deletes every link whose name starts with `prefix` in the caller's namespace. */
static void delete_links_named(struct nl_sock *sock, const char *prefix)
{
    struct nl_cache *links;
    if (rtnl_link_alloc_cache(sock, AF_UNSPEC, &links) < 0)
        return;
    size_t prefix_length = strlen(prefix);
    for (struct nl_object *object = nl_cache_get_first(links); object;
         object = nl_cache_get_next(object)) {
        struct rtnl_link *link = (struct rtnl_link *)object;
        const char *name = rtnl_link_get_name(link);
        if (name && strncmp(name, prefix, prefix_length) == 0)
            rtnl_link_delete(sock, link);
    }
    nl_cache_free(links);
}

/* A point-to-point address: `local` on the link, with a route to `peer` alone. */
static int add_address(struct nl_sock *sock, int ifindex, const char *local, const char *peer)
{
    struct rtnl_addr *address = rtnl_addr_alloc();
    struct nl_addr *local_address = NULL, *peer_address = NULL;
    int rc = -NLE_NOMEM;
    if (address && nl_addr_parse(local, AF_INET, &local_address) == 0 &&
        nl_addr_parse(peer, AF_INET, &peer_address) == 0) {
        rtnl_addr_set_ifindex(address, ifindex);
        rtnl_addr_set_local(address, local_address);
        rtnl_addr_set_peer(address, peer_address);
        rc = rtnl_addr_add(sock, address, 0);
    }
    nl_addr_put(local_address);
    nl_addr_put(peer_address);
    rtnl_addr_put(address);
    return rc;
}

/* Brings the link up; its index through *ifindex. */
static int bring_up(struct nl_sock *sock, const char *name, int *ifindex)
{
    struct rtnl_link *link = NULL, *change = rtnl_link_alloc();
    int rc = rtnl_link_get_kernel(sock, 0, name, &link);
    if (rc == 0 && change) {
        *ifindex = rtnl_link_get_ifindex(link);
        rtnl_link_set_flags(change, IFF_UP);
        rc = rtnl_link_change(sock, link, change, 0);
    }
    rtnl_link_put(change);
    rtnl_link_put(link);
    return rc;
}

static int add_default_route(struct nl_sock *sock, int ifindex, const char *gateway)
{
    struct rtnl_route *route = rtnl_route_alloc();
    struct rtnl_nexthop *hop = rtnl_route_nh_alloc();
    struct nl_addr *anywhere = NULL, *via = NULL;
    int rc = -NLE_NOMEM;
    if (route && hop && nl_addr_parse("0.0.0.0/0", AF_INET, &anywhere) == 0 &&
        nl_addr_parse(gateway, AF_INET, &via) == 0) {
        rtnl_route_set_family(route, AF_INET);
        rtnl_route_set_dst(route, anywhere);
        rtnl_route_nh_set_ifindex(hop, ifindex);
        rtnl_route_nh_set_gateway(hop, via);
        rtnl_route_add_nexthop(route, hop);
        hop = NULL; /* the route owns it now */
        rc = rtnl_route_add(sock, route, 0);
    }
    if (hop)
        rtnl_route_nh_free(hop);
    nl_addr_put(anywhere);
    nl_addr_put(via);
    rtnl_route_put(route);
    return rc;
}

static int write_sysctl(const char *path, const char *value)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t written = write(fd, value, strlen(value));
    close(fd);
    return written == (ssize_t)strlen(value) ? 0 : -1;
}

typedef struct inside_job {
    int supervisor_pidfd;
    char address[INET_ADDRSTRLEN];
    char failure[256]; /* the step that failed and why, or "" */
} inside_job;

/* In a thread of its own, which alone enters the sandbox's network namespace (setns changes the
   calling thread only; the loop's thread never leaves the host's): IPv6 is turned off there
   before eth0 comes up, so nothing leaves but what the IPv4 policy sees; eth0 gets the address
   with a route to the gateway and the default route through it. The sandbox cannot change any
   of it: it runs without CAP_NET_ADMIN. */
static void *configure_inside(void *argument)
{
    inside_job *job = argument;
    char *failure = job->failure;
    size_t size = sizeof job->failure;
    if (setns(job->supervisor_pidfd, CLONE_NEWNET) < 0) {
        snprintf(failure, size, "enter the sandbox's network namespace: %s", strerror(errno));
        return NULL;
    }
    if (write_sysctl("/proc/sys/net/ipv6/conf/all/disable_ipv6", "1") < 0 ||
        write_sysctl("/proc/sys/net/ipv6/conf/default/disable_ipv6", "1") < 0) {
        snprintf(failure, size, "turn IPv6 off in the sandbox: %s", strerror(errno));
        return NULL;
    }
    struct nl_sock *sock = route_socket();
    int ifindex = 0, rc = 0;
    if (!sock)
        snprintf(failure, size, "open a netlink socket in the sandbox");
    else if ((rc = bring_up(sock, "eth0", &ifindex)) < 0)
        snprintf(failure, size, "bring up the sandbox's eth0: %s", nl_geterror(rc));
    else if ((rc = add_address(sock, ifindex, job->address, net.gateway)) < 0)
        snprintf(failure, size, "give the sandbox its address: %s", nl_geterror(rc));
    else if ((rc = add_default_route(sock, ifindex, net.gateway)) < 0)
        snprintf(failure, size, "give the sandbox its default route: %s", nl_geterror(rc));
    nl_socket_free(sock);
    return NULL;
}

static void delete_link(const char *name)
{
    struct rtnl_link *link = NULL;
    if (net.route && rtnl_link_get_kernel(net.route, 0, name, &link) == 0)
        rtnl_link_delete(net.route, link);
    rtnl_link_put(link);
}

/* The veth pair in one netlink request: the host end made up, the sandbox's end made straight
   inside the namespace of `pid` as eth0 (moving a link between namespaces after it was made
   costs an RCU grace period, ~20 ms here: pairs are not made ahead for that reason). */
static int add_veth_pair(const char *host_name, pid_t pid)
{
    struct rtnl_link *link = rtnl_link_veth_alloc();
    if (!link)
        return -NLE_NOMEM;
    struct rtnl_link *peer = rtnl_link_veth_get_peer(link);
    rtnl_link_set_name(link, host_name);
    rtnl_link_set_flags(link, IFF_UP);
    rtnl_link_set_name(peer, "eth0");
    rtnl_link_set_ns_pid(peer, pid);
    int rc = rtnl_link_add(net.route, link, NLM_F_CREATE | NLM_F_EXCL);
    rtnl_link_put(peer);
    rtnl_link_veth_release(link);
    return rc;
}

/* The veth pair, the host end's gateway address with its route to the sandbox's one address,
   then the inside. On failure the pair is deleted again. */
static int make_interface(pid_t pid, int supervisor_pidfd, int slot, char *why, size_t why_size)
{
    char host_name[LINK_NAME_SIZE];
    host_link_name(slot, host_name, sizeof host_name);
    inside_job job = {.supervisor_pidfd = supervisor_pidfd};
    network_address(slot, job.address, sizeof job.address);
    int ifindex = 0, rc;
    const char *step = NULL;
    if ((rc = add_veth_pair(host_name, pid)) < 0)
        step = "create the veth pair";
    else if ((ifindex = (int)if_nametoindex(host_name)) == 0)
        step = "find the host's end", rc = -NLE_OBJ_NOTFOUND;
    else if ((rc = add_address(net.route, ifindex, net.gateway, job.address)) < 0)
        step = "give the host's end the gateway address";
    if (step) {
        snprintf(why, why_size, "cannot %s (%s): %s", step, host_name, nl_geterror(rc));
    } else {
        pthread_t thread;
        int error = pthread_create(&thread, NULL, configure_inside, &job);
        if (error != 0)
            snprintf(why, why_size, "cannot start a thread to enter the sandbox's network: %s",
                     strerror(error));
        else
            pthread_join(thread, NULL);
        if (error == 0 && !job.failure[0])
            return 0;
        if (error == 0)
            snprintf(why, why_size, "cannot %s", job.failure);
    }
    delete_link(host_name);
    return -1;
}

/* The gateway's home from start to stop: an empty bridge, cbx<block>-gw, up, carrying the gateway
   address as a /32 (a local address and no route: nothing is ever sent through it). Without it
   the address would exist only while some sandbox's host end carries it, and the resolver could
   not listen on it before the first networked sandbox or after the last. A bridge because it is
   a link that needs no peer and no module beyond what veths need (this kernel may lack the dummy
   driver); no port is ever added to it. IPv6 is off on it, so it has no link-local address. */
static bool is_host_address(const char *text)
{
    struct ifaddrs *addresses;
    struct in_addr wanted;
    bool found = false;
    if (inet_pton(AF_INET, text, &wanted) != 1 || getifaddrs(&addresses) < 0)
        return false;
    for (struct ifaddrs *a = addresses; a && !found; a = a->ifa_next)
        found = a->ifa_addr && a->ifa_addr->sa_family == AF_INET &&
                ((struct sockaddr_in *)a->ifa_addr)->sin_addr.s_addr == wanted.s_addr;
    freeifaddrs(addresses);
    return found;
}

static int make_gateway_link(char *why, size_t why_size)
{
    /* Another daemon's range (or any interface) holding the gateway would take the sandboxes'
       DNS and routes: refused, after this block's own leftovers were swept. */
    if (is_host_address(net.gateway)) {
        snprintf(why, why_size,
                 "--network-range: its gateway %s is already an address of this host (another "
                 "cellboxd's range, or an interface of the host's): give this daemon a range of "
                 "its own",
                 net.gateway);
        return -1;
    }
    char name[LINK_NAME_SIZE], path[128], gateway[INET_ADDRSTRLEN + 4];
    snprintf(name, sizeof name, "%s%s", net.link_prefix, GATEWAY_LINK_SUFFIX);
    snprintf(gateway, sizeof gateway, "%s/32", net.gateway);
    struct nl_sock *sock = route_socket();
    if (!sock) {
        snprintf(why, why_size, "cannot open a netlink socket: out of memory or descriptors");
        return -1;
    }
    struct rtnl_addr *address = rtnl_addr_alloc();
    struct nl_addr *local = NULL;
    int ifindex = 0, rc;
    const char *step = NULL;
    if ((rc = rtnl_link_bridge_add(sock, name)) < 0)
        step = "create the gateway's link";
    snprintf(path, sizeof path, "/proc/sys/net/ipv6/conf/%s/disable_ipv6", name);
    if (!step)
        write_sysctl(path, "1"); /* a host without IPv6 has no such file, and nothing to turn off */
    if (!step && (rc = bring_up(sock, name, &ifindex)) < 0)
        step = "bring up the gateway's link";
    if (!step && (!address || (rc = nl_addr_parse(gateway, AF_INET, &local)) < 0)) {
        rc = address ? rc : -NLE_NOMEM;
        step = "parse the gateway address";
    }
    if (!step) {
        rtnl_addr_set_ifindex(address, ifindex);
        rtnl_addr_set_local(address, local);
        if ((rc = rtnl_addr_add(sock, address, 0)) < 0)
            step = "give the gateway's link the gateway address";
    }
    nl_addr_put(local);
    rtnl_addr_put(address);
    nl_socket_free(sock);
    if (!step)
        return 0;
    snprintf(why, why_size, "cannot %s (%s, %s): %s", step, name, gateway, nl_geterror(rc));
    delete_link(name);
    return -1;
}

/* ---- the firewall (nftables) ---- */

/* The table, top to bottom in the order a sandbox's packet meets it. Every base chain's drop is
   final whatever other tables on the host accept (nftables: a drop anywhere ends the packet).
   - input (to the host itself, every address of it: the gateway, its other interfaces, its
     loopback, cellboxd's port): from a sandbox only DNS to the gateway (part N2's resolver) and
     replies to what the host began; IPv6 and spoofed sources dropped.
   - forward: from a sandbox through from_sandbox; to a sandbox only replies (no connection is
     ever opened into one from outside: ports in go through cellboxd, in its namespace).
   - from_sandbox: never another sandbox, the host (fib daddr type local: any host address
     routed), the always-denied set (loopback, link-local and cloud metadata 169.254/16, this
     network, multicast and reserved), the private ranges unless the operator allowed one, the
     operator's deny list (operator_denied, filled by network_start_resolver: its CIDRs and the
     sets of its domains, before any sandbox's allowOut can accept); then the (interface,
     source) pair picks the sandbox's own chain: a pair not in the map is a spoofed source and
     is dropped (checked first too, so the per-sandbox limits below key on real sources only).
   - limits_out, limits_in: the operator's per-sandbox connection and bandwidth limits
     (network_limit_sandboxes), out of the sandbox and into it; empty without them.
   - output: the host opens nothing to a sandbox's address (its ports are reached inside).
   - postrouting: masquerade what leaves for the uplink. */
static int make_table(const char *range, const char *allowed, char *why, size_t why_size)
{
    char *script = malloc(SCRIPT_SIZE);
    if (!script)
        return -1;
    const char *t = net.table, *p = net.link_prefix;
    snprintf(script, SCRIPT_SIZE,
             "add table inet %s\n"
             "delete table inet %s\n"
             "table inet %s {\n"
             "  set sources { type ifname . ipv4_addr; }\n"
             "  map sandboxes { type ifname . ipv4_addr : verdict; }\n"
             "  set always_denied { type ipv4_addr; flags interval; elements = { 0.0.0.0/8, "
             "127.0.0.0/8, 169.254.0.0/16, 224.0.0.0/3 }; }\n"
             "  set private { type ipv4_addr; flags interval; elements = { 10.0.0.0/8, "
             "100.64.0.0/10, 172.16.0.0/12, 192.168.0.0/16 }; }\n"
             "  set operator_allowed { type ipv4_addr; flags interval; %s%s%s }\n"
             "  chain input { type filter hook input priority filter - 5; policy accept;\n"
             "    iifname \"%s*\" jump from_sandbox_to_host\n  }\n"
             "  chain from_sandbox_to_host {\n"
             "    meta nfproto != ipv4 drop\n"
             "    iifname . ip saddr != @sources drop\n"
             "    ct state established,related accept\n"
             "    ip daddr %s udp dport 53 accept\n"
             "    ip daddr %s tcp dport 53 accept\n"
             "    drop\n  }\n"
             "  chain forward { type filter hook forward priority filter - 5; policy accept;\n"
             "    iifname \"%s*\" jump from_sandbox\n"
             "    oifname \"%s*\" jump limits_in\n"
             "    oifname \"%s*\" ct state established,related accept\n"
             "    oifname \"%s*\" drop\n  }\n"
             "  chain from_sandbox {\n"
             "    meta nfproto != ipv4 drop\n"
             "    iifname . ip saddr != @sources drop\n"
             "    oifname \"%s*\" drop\n"
             "    ip daddr %s drop\n"
             "    fib daddr type local drop\n"
             "    ip daddr @always_denied drop\n"
             "    ip daddr @private ip daddr != @operator_allowed drop\n"
             "    jump operator_denied\n"
             "    jump limits_out\n"
             "    iifname . ip saddr vmap @sandboxes\n"
             "    drop\n  }\n"
             "  chain operator_denied {\n  }\n"
             "  chain limits_out {\n  }\n"
             "  chain limits_in {\n  }\n"
             "  chain output { type filter hook output priority filter - 5; policy accept;\n"
             "    oifname \"%s*\" ct state established,related accept\n"
             "    oifname \"%s*\" drop\n  }\n"
             "  chain postrouting { type nat hook postrouting priority srcnat; policy accept;\n"
             "    ip saddr %s oifname != \"%s*\" masquerade\n  }\n"
             "}\n",
             t, t, t, *allowed ? "elements = { " : "", allowed, *allowed ? " };" : "", p,
             net.gateway, net.gateway, p, p, p, p, p, range, p, p, range, p);
    int rc = run_nft(script, why, why_size);
    free(script);
    return rc;
}

void network_sweep(int block)
{
    char prefix[sizeof net.link_prefix], script[128];
    snprintf(prefix, sizeof prefix, "cbx%d-", block);
    struct nl_sock *sock = route_socket();
    if (sock)
        delete_links_named(sock, prefix);
    nl_socket_free(sock);
    struct nft_ctx *nft = nft_ctx_new(NFT_CTX_DEFAULT);
    if (!nft)
        return;
    nft_ctx_buffer_output(nft);
    nft_ctx_buffer_error(nft);
    snprintf(script, sizeof script, "add table inet cellbox_%d\ndelete table inet cellbox_%d\n",
             block, block);
    nft_run_cmd_from_buffer(nft, script);
    nft_ctx_free(nft);
}

static void prepare_ahead(void *arg);

/* A route of the host's that lies inside the range (a prefix as long as the range's or longer):
   another daemon's sandboxes or gateway, or a network of the host's, already routed there. Two
   daemons on one range would each route the other's sandbox addresses, and replies (which the
   tables accept as established) would reach the wrong sandbox. A wider route (a LAN of 10/8 around
   10.88/16) is no conflict: the sandboxes' /32 routes are more specific. Its text into `found`. */
static bool range_is_routed(uint32_t base, int length, char *found, size_t found_size)
{
    struct nl_cache *routes;
    if (rtnl_route_alloc_cache(net.route, AF_INET, 0, &routes) < 0)
        return false; /* unknown: the start goes on, as it did before this check */
    uint32_t mask = 0xffffffffu << (32 - length);
    bool routed = false;
    for (struct nl_object *object = nl_cache_get_first(routes); object && !routed;
         object = nl_cache_get_next(object)) {
        struct rtnl_route *route = (struct rtnl_route *)object;
        struct nl_addr *destination = rtnl_route_get_dst(route);
        if (!destination || nl_addr_get_family(destination) != AF_INET ||
            (int)nl_addr_get_prefixlen(destination) < length)
            continue;
        uint32_t address;
        memcpy(&address, nl_addr_get_binary_addr(destination), sizeof address);
        if ((ntohl(address) & mask) != base)
            continue;
        char text[64], device[IF_NAMESIZE] = "?";
        struct rtnl_nexthop *hop = rtnl_route_nexthop_n(route, 0);
        if (hop)
            if_indextoname((unsigned)rtnl_route_nh_get_ifindex(hop), device);
        snprintf(found, found_size, "%s (dev %s)", nl_addr2str(destination, text, sizeof text),
                 device);
        routed = true;
    }
    nl_cache_free(routes);
    return routed;
}

/* Whether net.ipv4.ip_forward reads 0 (a daemon that cannot read it does not restore it). */
static bool forwarding_is_off(void)
{
    char value[4] = "";
    int fd = open("/proc/sys/net/ipv4/ip_forward", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t got = read(fd, value, sizeof value - 1);
    close(fd);
    return got > 0 && value[0] == '0';
}

int network_init(int block, const char *range, const char *allowed_ranges, char *why,
                 size_t why_size)
{
    uint32_t base;
    int length;
    if (parse_cidr(range, &base, &length) < 0 || length < 16 || length > 29) {
        snprintf(why, why_size,
                 "--network-range takes an IPv4 range from /16 to /29 (e.g. "
                 "10.88.0.0/16), not '%s'",
                 range);
        return -1;
    }
    char allowed[1024] = "";
    if (append_cidr_elements(allowed_ranges, allowed, sizeof allowed, why, why_size) < 0) {
        char reason[256];
        snprintf(reason, sizeof reason, "%s", why);
        snprintf(why, why_size, "--network-allow-ranges: %s", reason);
        return -1;
    }
    net.block = block;
    net.base = base;
    net.prefix_length = length;
    net.slot_count = (int)((1u << (32 - length)) - 1); /* the last is the broadcast address */
    snprintf(net.table, sizeof net.table, "cellbox_%d", block);
    snprintf(net.link_prefix, sizeof net.link_prefix, "cbx%d-", block);
    address_text(base + 1, net.gateway, sizeof net.gateway);
    net.state = calloc((size_t)net.slot_count, 1);
    net.nft = nft_ctx_new(NFT_CTX_DEFAULT);
    net.route = route_socket();
    if (!net.state || !net.nft || !net.route) {
        snprintf(why, why_size, "cannot set up the sandbox network: out of memory");
        return -1;
    }
    nft_ctx_buffer_output(net.nft);
    nft_ctx_buffer_error(net.nft);
    /* What a dead daemon of this block left: its host ends (their sandboxes' ends go with them)
       and its table. Only names of this block are touched. */
    network_sweep(block);
    char routed[128];
    if (range_is_routed(base, length, routed, sizeof routed)) {
        snprintf(why, why_size,
                 "--network-range %s is in use on this host: %s is routed inside it (another "
                 "cellbox daemon's sandboxes, or a network of the host's); give this daemon a "
                 "range no route lies in, e.g. --network-range 10.89.0.0/16",
                 range, routed);
        return -1;
    }
    if (make_table(range, allowed, why, why_size) < 0 || make_gateway_link(why, why_size) < 0) {
        network_sweep(block); /* a daemon that cannot start leaves nothing of its network */
        return -1;
    }
    net.forwarding_was_off = forwarding_is_off();
    if (write_sysctl("/proc/sys/net/ipv4/ip_forward", "1") < 0) {
        snprintf(why, why_size,
                 "cannot turn on IPv4 forwarding (/proc/sys/net/ipv4/ip_forward): "
                 "%s",
                 strerror(errno));
        return -1;
    }
    net.ready = true;
    prepare_ahead(NULL);
    log_info("sandbox network: %s, gateway %s, nftables table inet %s, links %s*, %d slot(s) "
             "made ahead",
             range, net.gateway, net.table, net.link_prefix, net.prepared_count);
    return 0;
}

bool network_ready(void)
{
    return net.ready;
}

const char *network_gateway(void)
{
    return net.ready ? net.gateway : NULL;
}

/* A slot's chain (accepting until its first policy) and its (interface, address) pair in the set of known sources and in the map that sends its packets to
   its chain: one nft run, made ahead. The entries name an interface that does not exist until
   the attach makes it, so they match no packet before; and they hold before the sandbox's end of
   the pair exists, so no packet of it ever meets a table that would take it for a spoofer's. */
static int add_slot_rules(int slot, char *why, size_t why_size)
{
    char script[2048], link[LINK_NAME_SIZE], address[INET_ADDRSTRLEN];
    host_link_name(slot, link, sizeof link);
    network_address(slot, address, sizeof address);
    const char *t = net.table;
    snprintf(script, sizeof script,
             "add chain inet %s sandbox_%d\n"
             "add rule inet %s sandbox_%d accept\n"
             "add element inet %s sources { \"%s\" . %s }\n"
             "add element inet %s sandboxes { \"%s\" . %s : jump sandbox_%d }\n",
             t, slot, t, slot, t, link, address, t, link, address, slot);
    return run_nft(script, why, why_size);
}

static void remove_sandbox_rules(int slot)
{
    char script[2048], link[LINK_NAME_SIZE], address[INET_ADDRSTRLEN], why[512];
    host_link_name(slot, link, sizeof link);
    network_address(slot, address, sizeof address);
    const char *t = net.table;
    /* One element or chain missing (a half-made attach) must not keep the rest: one command a
       run. */
    const char *formats[] = {"delete element inet %s sandboxes { \"%s\" . %s }",
                             "delete element inet %s sources { \"%s\" . %s }"};
    for (size_t i = 0; i < 2; i++) {
        snprintf(script, sizeof script, formats[i], t, link, address);
        run_nft(script, why, sizeof why);
    }
    snprintf(script, sizeof script,
             "flush chain inet %s sandbox_%d\ndelete chain inet %s sandbox_%d\n", t, slot, t,
             slot);
    run_nft(script, why, sizeof why);
}

/* The slot's chain, sets and map entry, and its host end if it was in use (the sandbox's end
   goes with it: a veth pair dies whole). */
static void remove_slot(int slot)
{
    char link[LINK_NAME_SIZE];
    host_link_name(slot, link, sizeof link);
    if (net.state[slot] == SLOT_IN_USE)
        delete_link(link); /* gone with the sandbox's namespace already, unless it still runs */
    remove_sandbox_rules(slot);
    if (net.state[slot] == SLOT_PREPARED)
        net.prepared_count--;
    net.state[slot] = SLOT_FREE;
}

/* Chain, sets and map entry of a free slot; the slot, or -1 with `why`, nothing left half
   made. */
static int prepare_slot(char *why, size_t why_size)
{
    int slot = 2;
    while (slot < net.slot_count && net.state[slot] != SLOT_FREE)
        slot++;
    if (slot >= net.slot_count) {
        snprintf(why, why_size,
                 "every address of the sandbox network (%d) is taken: end a "
                 "networked sandbox, or restart cellboxd with a larger --network-range",
                 net.slot_count - 2);
        return -1;
    }
    /* Its chain accepts from the start (the policy of empty lists, what network_set_policy
       writes for them), so an attach without lists runs no nft script at all. */
    if (add_slot_rules(slot, why, why_size) < 0) {
        remove_slot(slot);
        return -1;
    }
    net.state[slot] = SLOT_PREPARED;
    net.prepared_count++;
    return slot;
}

static void prepare_ahead(void *arg)
{
    (void)arg;
    net.prepare_timer = 0;
    char why[512];
    while (net.ready && net.prepared_count < PREPARED_SLOTS)
        if (prepare_slot(why, sizeof why) < 0) {
            log_debug("sandbox network: no slot made ahead: %s", why);
            return; /* the next attach makes its own, and says why if it cannot */
        }
}

static void schedule_prepare_ahead(void)
{
    if (net.ready && !net.prepare_timer && net.prepared_count < PREPARED_SLOTS)
        net.prepare_timer = loop_timer_add(PREPARE_DELAY_MS, prepare_ahead, NULL);
}

/* A prepared slot, made now if none waits. */
static int take_prepared_slot(char *why, size_t why_size)
{
    for (int slot = 2; slot < net.slot_count; slot++)
        if (net.state[slot] == SLOT_PREPARED)
            return slot;
    return prepare_slot(why, why_size);
}

int network_attach(pid_t pid, int supervisor_pidfd, char *why, size_t why_size)
{
    if (!net.ready) {
        snprintf(why, why_size, "the sandbox network is not set up on this daemon");
        return -1;
    }
    int slot = take_prepared_slot(why, why_size);
    if (slot < 0)
        return -1;
    net.state[slot] = SLOT_IN_USE;
    net.prepared_count--;
    schedule_prepare_ahead();
    /* The slot's rules and map entry are there already: no packet ever leaves the interface
       before they hold. */
    if (make_interface(pid, supervisor_pidfd, slot, why, why_size) < 0) {
        network_detach(slot);
        return -1;
    }
    return slot;
}

/* An egress entry as the chain's rules match it: a CIDR as itself into `cidrs` (nft elements,
   comma-separated), a domain as its set (@dns_...) into `sets` (one per line) and, as written,
   into `domains`. false if it is neither. */
typedef struct egress_entries {
    char *cidrs, *sets;
    const char **domains;
    size_t domain_count;
} egress_entries;

static bool sort_egress_entry(const char *entry, egress_entries *into, size_t size)
{
    char canonical[NETWORK_DNS_DOMAIN_SIZE], set[NETWORK_DNS_SET_NAME_SIZE];
    if (network_is_cidr(entry)) {
        size_t used = strlen(into->cidrs);
        snprintf(into->cidrs + used, size - used, "%s%s", used ? ", " : "", entry);
        return true;
    }
    if (!network_dns_is_domain(entry, canonical))
        return false;
    network_dns_set_name(canonical, set);
    size_t used = strlen(into->sets);
    snprintf(into->sets + used, size - used, "%s\n", set);
    into->domains[into->domain_count++] = entry;
    return true;
}

/* The sandbox's chain from its sorted lists, in E2B's order: allowOut first (it wins over
   denyOut), CIDRs then the sets of its domains; then denyOut the same way; then everything
   else. One nft run: the chain changes atomically, a running sandbox never sees half a
   policy. */
static int write_policy_chain(int slot, const egress_entries *allow, const egress_entries *deny,
                              size_t size, char *why, size_t why_size)
{
    char *script = malloc(size);
    if (!script) {
        snprintf(why, why_size, "out of memory");
        return -1;
    }
    const char *t = net.table;
    size_t used = (size_t)snprintf(script, size, "flush chain inet %s sandbox_%d\n", t, slot);
    for (int pass = 0; pass < 2; pass++) {
        const egress_entries *list = pass == 0 ? allow : deny;
        const char *verdict = pass == 0 ? "accept" : "drop";
        if (*list->cidrs)
            used += (size_t)snprintf(script + used, size - used,
                                     "add rule inet %s sandbox_%d ip daddr { %s } %s\n", t, slot,
                                     list->cidrs, verdict);
        for (const char *set = list->sets; *set; set = strchr(set, '\n') + 1)
            used += (size_t)snprintf(script + used, size - used,
                                     "add rule inet %s sandbox_%d ip daddr @%.*s %s\n", t, slot,
                                     (int)strcspn(set, "\n"), set, verdict);
    }
    snprintf(script + used, size - used, "add rule inet %s sandbox_%d accept\n", t, slot);
    int rc = run_nft(script, why, why_size);
    free(script);
    return rc;
}

int network_set_policy(int slot, const char *sandbox_id, const char *const *allow_out,
                       size_t allow_count, const char *const *deny_out, size_t deny_count,
                       char *why, size_t why_size)
{
    size_t count = allow_count + deny_count, size = 1024 + 128 * count;
    egress_entries allow = {malloc(size), malloc(size), calloc(count + 1, sizeof(char *)), 0};
    egress_entries deny = {malloc(size), malloc(size), calloc(count + 1, sizeof(char *)), 0};
    const char **domains = calloc(count + 1, sizeof(char *));
    int rc = -1;
    if (!allow.cidrs || !allow.sets || !allow.domains || !deny.cidrs || !deny.sets ||
        !deny.domains || !domains) {
        snprintf(why, why_size, "out of memory");
        goto done;
    }
    allow.cidrs[0] = allow.sets[0] = deny.cidrs[0] = deny.sets[0] = '\0';
    for (size_t i = 0; i < count; i++) {
        bool allowing = i < allow_count;
        const char *entry = allowing ? allow_out[i] : deny_out[i - allow_count];
        if (!sort_egress_entry(entry, allowing ? &allow : &deny, size)) {
            snprintf(why, why_size,
                     "'%.200s' in %s is no IPv4 address, CIDR or domain name (e.g. "
                     "203.0.113.0/24, example.com, *.example.com)",
                     entry, allowing ? "allowOut" : "denyOut");
            goto done;
        }
    }
    /* The sets first (a chain cannot refer to a set that does not exist yet), then the chain,
       then the sets no chain refers to any more go. With no domain this only forgets what the
       sandbox listed before; a daemon without the resolver has nothing to forget. */
    size_t domain_count = 0;
    for (size_t i = 0; i < allow.domain_count; i++)
        domains[domain_count++] = allow.domains[i];
    for (size_t i = 0; i < deny.domain_count; i++)
        domains[domain_count++] = deny.domains[i];
    char dns_why[512];
    if (network_dns_set_domains(sandbox_id, domains, domain_count, dns_why, sizeof dns_why) < 0 &&
        domain_count > 0) {
        snprintf(why, why_size, "%s", dns_why);
        goto done;
    }
    rc = write_policy_chain(slot, &allow, &deny, size, why, why_size);
    network_dns_delete_unused_sets();
done:
    free(allow.cidrs);
    free(allow.sets);
    free(allow.domains);
    free(deny.cidrs);
    free(deny.sets);
    free(deny.domains);
    free(domains);
    return rc;
}

void network_forget_names(const char *sandbox_id)
{
    char why[512];
    network_dns_set_domains(sandbox_id, NULL, 0, why, sizeof why); /* no resolver: none to forget */
}

void network_detach(int slot)
{
    if (!net.ready || slot < 2 || slot >= net.slot_count || net.state[slot] != SLOT_IN_USE)
        return;
    remove_slot(slot);
    schedule_prepare_ahead();
}

/* Turns IPv4 forwarding off again if this daemon turned it on and no other cellbox daemon's
   table is left on the host (their sandboxes still need it). */
static void restore_forwarding(void)
{
    if (!net.forwarding_was_off || nft_run_cmd_from_buffer(net.nft, "list tables inet\n") != 0)
        return;
    const char *tables = nft_ctx_get_output_buffer(net.nft);
    if (tables && strstr(tables, "table inet cellbox_")) {
        log_info("sandbox network: IPv4 forwarding left on: another cellbox daemon's table is "
                 "there");
        return;
    }
    if (write_sysctl("/proc/sys/net/ipv4/ip_forward", "0") < 0)
        log_warn("cannot turn IPv4 forwarding off again: %s", strerror(errno));
}

int network_limit_sandboxes(int max_connections, long long bytes_per_second, char *why,
                            size_t why_size)
{
    if (!net.ready) {
        snprintf(why, why_size, "the sandbox network is not set up on this daemon");
        return -1;
    }
    if (max_connections <= 0 && bytes_per_second <= 0)
        return 0;
    /* Dynamic sets keyed by the sandbox's address (real: spoofed sources were dropped first),
       so one rule holds every sandbox to its own count and rate. A connection over the count is
       refused at once (admin-prohibited), not left to time out: the agent reads why. The rate
       is each way, its burst one second's worth. */
    char script[2048];
    const char *t = net.table;
    size_t used = 0;
    if (max_connections > 0)
        used += (size_t)snprintf(
            script + used, sizeof script - used,
            "add set inet %s connections { type ipv4_addr; size %d; flags dynamic; }\n"
            "add rule inet %s limits_out ct state new add @connections { ip saddr ct count over "
            "%d } reject with icmpx type admin-prohibited\n",
            t, net.slot_count, t, max_connections);
    if (bytes_per_second > 0)
        snprintf(script + used, sizeof script - used,
                 "add set inet %s upload { type ipv4_addr; size %d; flags dynamic,timeout; "
                 "timeout 60s; }\n"
                 "add set inet %s download { type ipv4_addr; size %d; flags dynamic,timeout; "
                 "timeout 60s; }\n"
                 "add rule inet %s limits_out update @upload { ip saddr limit rate over %lld "
                 "bytes/second burst %lld bytes } drop\n"
                 "add rule inet %s limits_in update @download { ip daddr limit rate over %lld "
                 "bytes/second burst %lld bytes } drop\n",
                 t, net.slot_count, t, net.slot_count, t, bytes_per_second, bytes_per_second, t,
                 bytes_per_second, bytes_per_second);
    if (run_nft(script, why, why_size) < 0)
        return -1;
    log_info("sandbox network: each sandbox at most %d connections, %lld bytes/s each way (0 = "
             "no limit)",
             max_connections, bytes_per_second);
    return 0;
}

/* The operator's deny list into the chain operator_denied, which every sandbox's packets pass
   before their own chain: its CIDRs, then the sets of its domains (made first, through the
   resolver, which fills them as any sandbox's). 0, or -1 with `why` naming the bad entry. */
static int apply_operator_deny_list(const char *list, char *why, size_t why_size)
{
    size_t count = 1;
    for (const char *c = list; *c; c++)
        count += *c == ',';
    size_t size = 1024 + 128 * count + strlen(list);
    egress_entries deny = {malloc(size), malloc(size), calloc(count + 1, sizeof(char *)), 0};
    char *copy = strdup(list), *script = malloc(size), *save = NULL;
    int rc = -1;
    if (!deny.cidrs || !deny.sets || !deny.domains || !copy || !script) {
        snprintf(why, why_size, "out of memory");
        goto done;
    }
    deny.cidrs[0] = deny.sets[0] = '\0';
    for (char *item = strtok_r(copy, ", ", &save); item; item = strtok_r(NULL, ", ", &save))
        if (!sort_egress_entry(item, &deny, size)) {
            snprintf(why, why_size,
                     "--network-deny-out: '%.200s' is no IPv4 address, CIDR or domain name (e.g. "
                     "203.0.113.0/24, example.com, *.example.com), comma-separated",
                     item);
            goto done;
        }
    if (deny.domain_count > 0) {
        char reason[512];
        if (network_dns_set_domains(OPERATOR_ID, deny.domains, deny.domain_count, reason,
                                    sizeof reason) < 0) {
            snprintf(why, why_size, "--network-deny-out: %s", reason);
            goto done;
        }
    }
    const char *t = net.table;
    size_t used = 0;
    if (*deny.cidrs)
        used += (size_t)snprintf(script + used, size - used,
                                 "add rule inet %s operator_denied ip daddr { %s } drop\n", t,
                                 deny.cidrs);
    for (const char *set = deny.sets; *set; set = strchr(set, '\n') + 1)
        used += (size_t)snprintf(script + used, size - used,
                                 "add rule inet %s operator_denied ip daddr @%.*s drop\n", t,
                                 (int)strcspn(set, "\n"), set);
    rc = used ? run_nft(script, why, why_size) : 0;
done:
    free(deny.cidrs);
    free(deny.sets);
    free(deny.domains);
    free(copy);
    free(script);
    return rc;
}

/* Whether every entry of the operator's list is a CIDR or a domain, checked before anything
   starts so a typo stops the daemon with nothing left running. */
static int check_operator_deny_list(const char *list, char *why, size_t why_size)
{
    char *copy = strdup(list), *save = NULL, canonical[NETWORK_DNS_DOMAIN_SIZE];
    int rc = copy ? 0 : -1;
    for (char *item = copy ? strtok_r(copy, ", ", &save) : NULL; item && rc == 0;
         item = strtok_r(NULL, ", ", &save))
        if (!network_is_cidr(item) && !network_dns_is_domain(item, canonical)) {
            snprintf(why, why_size,
                     "--network-deny-out: '%.200s' is no IPv4 address, CIDR or domain name (e.g. "
                     "203.0.113.0/24, example.com, *.example.com), comma-separated",
                     item);
            rc = -1;
        }
    if (!copy)
        snprintf(why, why_size, "out of memory");
    free(copy);
    return rc;
}

int network_start_resolver(const network_resolver_options *options, char *why, size_t why_size)
{
    const char *deny_out = options->deny_out ? options->deny_out : "";
    if (!net.ready) {
        snprintf(why, why_size, "the sandbox network is not set up on this daemon");
        return -1;
    }
    if (check_operator_deny_list(deny_out, why, why_size) < 0)
        return -1;
    char reason[512];
    if (network_dns_start(&(network_dns_options){.table = net.table,
                                                 .listen_address = net.gateway,
                                                 .upstream = options->upstream,
                                                 .state_dir = options->state_dir,
                                                 .rebind_allowed = options->rebind_allowed},
                          reason, sizeof reason) < 0) {
        snprintf(why, why_size, "the sandboxes' resolver: %s", reason);
        return -1;
    }
    if (apply_operator_deny_list(deny_out, why, why_size) < 0) {
        network_dns_stop();
        return -1;
    }
    log_info("sandbox network: resolver on %s:53 (dnsmasq pid %d, upstream %s)%s%s", net.gateway,
             (int)network_dns_pid(),
             options->upstream && *options->upstream ? options->upstream : "/etc/resolv.conf's",
             *deny_out ? ", denied to every sandbox: " : "", deny_out);
    return 0;
}

void network_sweep_resolver(int block, const char *state_dir)
{
    char table[32];
    snprintf(table, sizeof table, "cellbox_%d", block);
    network_dns_sweep(state_dir, table);
}

void network_shutdown(void)
{
    if (!net.ready)
        return;
    loop_timer_cancel(net.prepare_timer);
    char script[128], why[512];
    /* The resolver first: its sets live in the table, and it must not fill a table being
       removed. */
    network_dns_stop();
    snprintf(script, sizeof script, "delete table inet %s\n", net.table);
    if (run_nft(script, why, sizeof why) < 0)
        log_warn("%s", why);
    if (net.route)
        delete_links_named(net.route, net.link_prefix);
    restore_forwarding();
    nl_socket_free(net.route);
    nft_ctx_free(net.nft);
    free(net.state);
    net = (typeof(net)){0};
}
