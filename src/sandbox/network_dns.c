/* network_dns — the sandboxes' resolver (dnsmasq) and the nftables sets of their domains.
 * See network_dns.h for the design; this file follows it top to bottom: names and sets, the
 * configuration, starting and supervising dnsmasq, then the verbs. */
#include "sandbox/network_dns.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <nftables/libnftables.h>
#include <openssl/sha.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/loop.h"
#include "common/log.h"

#define DNSMASQ_DEFAULT_PATH "/usr/sbin/dnsmasq"
#define START_WAIT_MS 2000        /* how long a start may take before it counts as failed */
#define STOP_WAIT_MS 2000         /* how long SIGTERM is given before SIGKILL */
#define RESTART_DELAY_MIN_MS 100  /* after a death: first retry, doubled per quick death */
#define RESTART_DELAY_MAX_MS 5000
#define QUICK_DEATH_S 30          /* a resolver that lived less than this died "quickly" */

typedef struct sandbox_domains {
    char id[64];
    size_t count;
    char (*domains)[NETWORK_DNS_DOMAIN_SIZE];
} sandbox_domains;

static struct {
    bool started;
    char table[64];
    char listen_address[INET_ADDRSTRLEN];
    char upstream[512];
    char dnsmasq_path[256];
    char rebind_allowed[1024];    /* "/a.test/b.test/" or "" */
    char config_path[512];
    char pid_path[512];
    pid_t pid;                    /* 0 while not running */
    int pidfd;
    loop_watch exit_watch;
    loop_timer_id restart_timer;
    int restart_delay_ms;
    time_t started_at;
    sandbox_domains *sandboxes;   /* those that list at least one domain */
    size_t sandbox_count;
    char (*sets)[NETWORK_DNS_DOMAIN_SIZE]; /* domains whose set this module made and holds */
    size_t set_count;
} resolver = {.pidfd = -1, .exit_watch = {.fd = -1}};

/* ---- names ---- */

bool network_dns_is_domain(const char *text, char *canonical)
{
    size_t length = strlen(text);
    if (length > 0 && text[length - 1] == '.') length--;
    if (length == 0 || length >= NETWORK_DNS_DOMAIN_SIZE - 1) return false;
    size_t start = 0, labels = 0;
    bool last_label_numeric = true;
    if (length > 2 && text[0] == '*' && text[1] == '.') start = 2;
    for (size_t i = start, label_start = start; i <= length; i++) {
        if (i == length || text[i] == '.') {
            size_t label_length = i - label_start;
            if (label_length == 0 || label_length > 63) return false;
            if (text[label_start] == '-' || text[i - 1] == '-') return false;
            labels++;
            last_label_numeric = true;
            for (size_t k = label_start; k < i; k++)
                if (!isdigit((unsigned char)text[k])) last_label_numeric = false;
            label_start = i + 1;
            continue;
        }
        char c = text[i];
        if (!isalnum((unsigned char)c) && c != '-') return false;
    }
    /* An address is not a domain; nor is a single label (a suffix like "com" would admit the
       whole of a top-level domain). */
    if (labels < 2 || last_label_numeric) return false;
    for (size_t i = 0; i < length; i++) canonical[i] = (char)tolower((unsigned char)text[i]);
    canonical[length] = '\0';
    return true;
}

void network_dns_set_name(const char *domain, char out[NETWORK_DNS_SET_NAME_SIZE])
{
    unsigned char digest[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)domain, strlen(domain), digest);
    int written = snprintf(out, NETWORK_DNS_SET_NAME_SIZE, "dns_");
    for (int i = 0; i < 8; i++)
        written += snprintf(out + written, NETWORK_DNS_SET_NAME_SIZE - (size_t)written, "%02x", digest[i]);
}

/* ---- nftables ---- */

/* Runs `commands` (one transaction) in the current network namespace; 0 or -1 with nft's
   message in `why`. */
static int nft_run(const char *commands, char *why, size_t why_size)
{
    struct nft_ctx *nft = nft_ctx_new(NFT_CTX_DEFAULT);
    if (!nft) {
        snprintf(why, why_size, "libnftables could not start");
        return -1;
    }
    nft_ctx_buffer_output(nft);
    nft_ctx_buffer_error(nft);
    int status = nft_run_cmd_from_buffer(nft, commands);
    if (status != 0) {
        const char *error = nft_ctx_get_error_buffer(nft);
        snprintf(why, why_size, "nftables refused the resolver's sets (%.*s); check that cellboxd "
                 "runs with CAP_NET_ADMIN and the kernel has nf_tables",
                 (int)strcspn(error ? error : "", "\n"), error ? error : "");
    }
    nft_ctx_free(nft);
    return status == 0 ? 0 : -1;
}

static bool list_has(char (*list)[NETWORK_DNS_DOMAIN_SIZE], size_t count, const char *domain)
{
    for (size_t i = 0; i < count; i++)
        if (strcmp(list[i], domain) == 0) return true;
    return false;
}

/* Every domain some sandbox lists, each once, into `out` (NETWORK_DNS_DOMAINS_TOTAL + 1 room);
   the sandbox `replaced_id`, if given, counts with `replacement` instead of its own list.
   Returns the count, or NETWORK_DNS_DOMAINS_TOTAL + 1 when over. */
static size_t listed_domains(char (*out)[NETWORK_DNS_DOMAIN_SIZE], const char *replaced_id,
                             char (*replacement)[NETWORK_DNS_DOMAIN_SIZE], size_t replacement_count)
{
    size_t count = 0;
    for (size_t s = 0; s <= resolver.sandbox_count; s++) {
        char (*domains)[NETWORK_DNS_DOMAIN_SIZE];
        size_t domain_count;
        if (s == resolver.sandbox_count) {
            domains = replacement;
            domain_count = replacement_count;
        } else if (replaced_id && strcmp(resolver.sandboxes[s].id, replaced_id) == 0) {
            continue;
        } else {
            domains = resolver.sandboxes[s].domains;
            domain_count = resolver.sandboxes[s].count;
        }
        for (size_t d = 0; d < domain_count; d++) {
            if (list_has(out, count, domains[d])) continue;
            if (count == NETWORK_DNS_DOMAINS_TOTAL) return count + 1;
            memcpy(out[count++], domains[d], NETWORK_DNS_DOMAIN_SIZE);
        }
    }
    return count;
}

/* Makes the sets of `domains` that do not exist yet, in one transaction. */
static int make_sets(char (*domains)[NETWORK_DNS_DOMAIN_SIZE], size_t count, char *why, size_t why_size)
{
    size_t room = 256 + count * 160, used = 0;
    char *commands = malloc(room);
    if (!commands) {
        snprintf(why, why_size, "out of memory making the resolver's sets");
        return -1;
    }
    used += (size_t)snprintf(commands + used, room - used, "add table inet %s\n", resolver.table);
    size_t made = 0;
    for (size_t i = 0; i < count; i++) {
        if (list_has(resolver.sets, resolver.set_count, domains[i])) continue;
        char name[NETWORK_DNS_SET_NAME_SIZE];
        network_dns_set_name(domains[i], name);
        used += (size_t)snprintf(commands + used, room - used,
                                 "add set inet %s %s { type ipv4_addr; flags timeout; timeout %ds; size %d; }\n",
                                 resolver.table, name, NETWORK_DNS_ELEMENT_TIMEOUT_S, NETWORK_DNS_SET_SIZE);
        made++;
    }
    int result = made == 0 ? 0 : nft_run(commands, why, why_size);
    free(commands);
    if (result != 0) return -1;
    for (size_t i = 0; i < count; i++)
        if (!list_has(resolver.sets, resolver.set_count, domains[i]))
            memcpy(resolver.sets[resolver.set_count++], domains[i], NETWORK_DNS_DOMAIN_SIZE);
    return 0;
}

/* Deletes the sets of domains no longer in `listed`. A set the caller's chain still refers to
   cannot be deleted: it stays, is logged, and is tried again at the next change or at stop. */
static void delete_unlisted_sets(char (*listed)[NETWORK_DNS_DOMAIN_SIZE], size_t listed_count)
{
    size_t kept = 0;
    for (size_t i = 0; i < resolver.set_count; i++) {
        char name[NETWORK_DNS_SET_NAME_SIZE], command[256], why[512];
        bool still_listed = listed && list_has(listed, listed_count, resolver.sets[i]);
        if (!still_listed) {
            network_dns_set_name(resolver.sets[i], name);
            snprintf(command, sizeof command, "delete set inet %s %s\n", resolver.table, name);
            if (nft_run(command, why, sizeof why) == 0) continue;
            /* The usual case on a change of lists: the sandbox's chain still refers to the set
               until it is rewritten; network_dns_delete_unused_sets() comes after that. */
            log_debug("network_dns: set %s of %s not deleted yet: %s", name, resolver.sets[i], why);
        }
        if (kept != i) memcpy(resolver.sets[kept], resolver.sets[i], NETWORK_DNS_DOMAIN_SIZE);
        kept++;
    }
    resolver.set_count = kept;
}

/* ---- configuration ---- */

/* dnsmasq's --nftset matches a domain and every name under it, and takes no wildcard (a "*."
   pattern fills nothing): "example.com" and "*.example.com" both fill their set with the answers
   for example.com and the names under it. */
static const char *nftset_pattern(const char *domain)
{
    return strncmp(domain, "*.", 2) == 0 ? domain + 2 : domain;
}

/* Whether answers for names under `pattern` belong in the set of a domain whose pattern is
   `outer`: the same pattern, or `pattern` lies under it. */
static bool pattern_within(const char *pattern, const char *outer)
{
    size_t length = strlen(pattern), outer_length = strlen(outer);
    if (length == outer_length)
        return strcmp(pattern, outer) == 0;
    return length > outer_length && pattern[length - outer_length - 1] == '.' &&
           strcmp(pattern + length - outer_length, outer) == 0;
}

/* One nftset line for domains[index]'s pattern, naming the set of every listed domain whose
   pattern covers it: dnsmasq fills only the sets of the most specific matching line, so without
   this a sandbox's "*.example.com" would miss www.example.com's answers as soon as another
   sandbox listed "www.example.com". A pattern written by an earlier domain is not written again. */
static void write_nftset_line(FILE *file, char (*domains)[NETWORK_DNS_DOMAIN_SIZE], size_t count,
                              size_t index)
{
    const char *pattern = nftset_pattern(domains[index]);
    for (size_t earlier = 0; earlier < index; earlier++)
        if (strcmp(nftset_pattern(domains[earlier]), pattern) == 0)
            return;
    fprintf(file, "nftset=/%s/", pattern);
    const char *separator = "";
    for (size_t i = 0; i < count; i++) {
        if (!pattern_within(pattern, nftset_pattern(domains[i])))
            continue;
        char name[NETWORK_DNS_SET_NAME_SIZE];
        network_dns_set_name(domains[i], name);
        fprintf(file, "%s4#inet#%s#%s", separator, resolver.table, name);
        separator = ",";
    }
    fprintf(file, "\n");
}

static int write_config(char (*domains)[NETWORK_DNS_DOMAIN_SIZE], size_t count, char *why, size_t why_size)
{
    char temporary[sizeof resolver.config_path + 8];
    snprintf(temporary, sizeof temporary, "%s.new", resolver.config_path);
    FILE *file = fopen(temporary, "we");
    if (!file) {
        snprintf(why, why_size, "cannot write the resolver's configuration %s: %s", temporary, strerror(errno));
        return -1;
    }
    /* Each line says which attack or leak it closes: only the gateway answers (not the host's
       other addresses), no hosts file (the host's names stay the host's), no DHCP, answers that
       point at private, loopback or link-local space refused (a name must not lead a sandbox to
       the host or its network), no AAAA (sandboxes have IPv4 only, and the sets are IPv4), short
       TTLs and no negative cache (a change of the upstream's answers reaches sandboxes soon). */
    fprintf(file, "# written by cellboxd (sandbox/network_dns.c) for table %s; rewritten at each change\n"
                  "listen-address=%s\nbind-interfaces\nport=53\nno-hosts\nno-dhcp-interface=\n"
                  "stop-dns-rebind\nfilter-AAAA\nno-negcache\nmax-ttl=%d\nmax-cache-ttl=%d\n"
                  "cache-size=1000\ndns-forward-max=150\npid-file=\nlog-facility=-\n",
            resolver.table, resolver.listen_address, NETWORK_DNS_MAX_TTL_S, NETWORK_DNS_MAX_TTL_S);
    if (resolver.rebind_allowed[0] != '\0') fprintf(file, "rebind-domain-ok=%s\n", resolver.rebind_allowed);
    if (resolver.upstream[0] == '\0') {
        fprintf(file, "resolv-file=/etc/resolv.conf\n");
    } else {
        fprintf(file, "no-resolv\n");
        char upstream[sizeof resolver.upstream];
        snprintf(upstream, sizeof upstream, "%s", resolver.upstream);
        char *saved = NULL;
        for (char *server = strtok_r(upstream, ",", &saved); server; server = strtok_r(NULL, ",", &saved))
            fprintf(file, "server=%s\n", server);
    }
    for (size_t i = 0; i < count; i++)
        write_nftset_line(file, domains, count, i);
    if (fclose(file) != 0 || rename(temporary, resolver.config_path) != 0) {
        snprintf(why, why_size, "cannot write the resolver's configuration %s: %s", resolver.config_path, strerror(errno));
        unlink(temporary);
        return -1;
    }
    return 0;
}

/* ---- the dnsmasq process ---- */

/* True once dnsmasq has bound the gateway's UDP port 53: read from /proc/net/udp of our own
   namespace, since a probe bind of our own could take the port from it. */
static bool resolver_listening(void)
{
    struct in_addr address;
    inet_pton(AF_INET, resolver.listen_address, &address);
    char wanted[32];
    snprintf(wanted, sizeof wanted, "%08X:0035", address.s_addr);
    FILE *file = fopen("/proc/net/udp", "re");
    if (!file) return false;
    char line[512];
    bool found = false;
    while (!found && fgets(line, sizeof line, file))
        found = strstr(line, wanted) != NULL;
    fclose(file);
    return found;
}

/* Waits at most `timeout_ms` for `pidfd` to exit; true if it did (and reaps it if ours). */
static bool wait_exit(int pidfd, pid_t pid, int timeout_ms, bool reap)
{
    struct pollfd ready = {.fd = pidfd, .events = POLLIN};
    if (poll(&ready, 1, timeout_ms) <= 0) return false;
    if (reap) waitpid(pid, NULL, 0);
    return true;
}

static void resolver_exited(void *owner, uint32_t events);

/* Starts dnsmasq and waits until it listens (a few ms) so a sandbox created next finds it. */
static int spawn_resolver(char *why, size_t why_size)
{
    char config_option[sizeof resolver.config_path + 16];
    snprintf(config_option, sizeof config_option, "--conf-file=%s", resolver.config_path);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(why, why_size, "cannot start the resolver: fork: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        /* Its own process group: a terminal's ^C reaches the daemon, which stops it in order.
           Only stdio: no descriptor of the daemon (a client's socket, a sandbox's pidfd) is
           handed to a process that parses answers from the internet. */
        setpgid(0, 0);
        int null = open("/dev/null", O_RDONLY);
        if (null >= 0) dup2(null, STDIN_FILENO);
        syscall(SYS_close_range, 3U, ~0U, 0);
        execl(resolver.dnsmasq_path, "dnsmasq", "--keep-in-foreground", config_option, (char *)NULL);
        _exit(127);
    }
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (pidfd < 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        snprintf(why, why_size, "cannot watch the resolver: pidfd_open: %s", strerror(errno));
        return -1;
    }
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        if (wait_exit(pidfd, pid, 0, true)) {
            close(pidfd);
            snprintf(why, why_size, "the resolver (%s) exited at start: its reason is on cellboxd's "
                     "stderr (is %s an address of this host, and port 53 free on it?)",
                     resolver.dnsmasq_path, resolver.listen_address);
            return -1;
        }
        if (resolver_listening()) break;
        clock_gettime(CLOCK_MONOTONIC, &now);
        long elapsed_ms = (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
        if (elapsed_ms > START_WAIT_MS) {
            kill(pid, SIGKILL);
            wait_exit(pidfd, pid, -1, true);
            close(pidfd);
            snprintf(why, why_size, "the resolver did not listen on %s:53 within %d ms",
                     resolver.listen_address, START_WAIT_MS);
            return -1;
        }
        usleep(500);
    }
    resolver.pid = pid;
    resolver.pidfd = pidfd;
    resolver.started_at = time(NULL);
    loop_watch_add(&resolver.exit_watch, pidfd, EPOLLIN, resolver_exited, NULL);
    FILE *file = fopen(resolver.pid_path, "we");
    if (file) {
        fprintf(file, "%d\n", (int)pid);
        fclose(file);
    }
    return 0;
}

static void stop_resolver_process(void)
{
    if (resolver.pid <= 0) return;
    loop_watch_remove(&resolver.exit_watch);
    kill(resolver.pid, SIGTERM);
    if (!wait_exit(resolver.pidfd, resolver.pid, STOP_WAIT_MS, true)) {
        kill(resolver.pid, SIGKILL);
        wait_exit(resolver.pidfd, resolver.pid, -1, true);
    }
    close(resolver.pidfd);
    resolver.pidfd = -1;
    resolver.pid = 0;
}

static void restart_after_death(void *arg)
{
    resolver.restart_timer = 0;
    char why[512];
    if (spawn_resolver(why, sizeof why) == 0) {
        log_info("network_dns: resolver started again (pid %d)", (int)resolver.pid);
        return;
    }
    resolver.restart_delay_ms = resolver.restart_delay_ms * 2 > RESTART_DELAY_MAX_MS
                                    ? RESTART_DELAY_MAX_MS : resolver.restart_delay_ms * 2;
    log_warn("network_dns: %s; trying again in %d ms", why, resolver.restart_delay_ms);
    resolver.restart_timer = loop_timer_add(resolver.restart_delay_ms, restart_after_death, NULL);
}

static void resolver_exited(void *owner, uint32_t events)
{
    int status = 0;
    waitpid(resolver.pid, &status, 0);
    loop_watch_remove(&resolver.exit_watch);
    close(resolver.pidfd);
    resolver.pidfd = -1;
    log_warn("network_dns: the resolver (pid %d) died (%s %d); starting it again", (int)resolver.pid,
             WIFSIGNALED(status) ? "signal" : "status", WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    resolver.pid = 0;
    bool quick = time(NULL) - resolver.started_at < QUICK_DEATH_S;
    resolver.restart_delay_ms = quick ? resolver.restart_delay_ms : RESTART_DELAY_MIN_MS;
    resolver.restart_timer = loop_timer_add(resolver.restart_delay_ms, restart_after_death, NULL);
}

/* A resolver of a dead daemon of the same table: the pid in our pid file, if (and only if) it is
   a dnsmasq whose command line names our configuration file. */
static void sweep_stale_resolver(void)
{
    FILE *file = fopen(resolver.pid_path, "re");
    if (!file) return;
    int pid = 0;
    bool pid_read = fscanf(file, "%d", &pid) == 1;
    fclose(file);
    unlink(resolver.pid_path);
    if (!pid_read || pid <= 1) return;
    char path[64], command_line[1024] = {0};
    snprintf(path, sizeof path, "/proc/%d/cmdline", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ssize_t length = read(fd, command_line, sizeof command_line - 1);
    close(fd);
    if (length <= 0) return;
    char expected[sizeof resolver.config_path + 16];
    snprintf(expected, sizeof expected, "--conf-file=%s", resolver.config_path);
    bool ours = false;
    if (strcmp(command_line, "dnsmasq") == 0)
        for (ssize_t at = 0; !ours && at < length; at += (ssize_t)strlen(command_line + at) + 1)
            ours = strcmp(command_line + at, expected) == 0;
    if (!ours) return;
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (pidfd < 0) return;
    log_info("network_dns: stopping the resolver (pid %d) a previous cellboxd left", pid);
    syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
    wait_exit(pidfd, pid, STOP_WAIT_MS, false);
    close(pidfd);
}

/* ---- the verbs ---- */

/* "a.test,b.test" into dnsmasq's "/a.test/b.test/" in resolver.rebind_allowed. */
static int rebind_allowed_pattern(const char *domains, char *why, size_t why_size)
{
    resolver.rebind_allowed[0] = '\0';
    if (!domains || !*domains) return 0;
    char copy[sizeof resolver.rebind_allowed], *saved = NULL;
    size_t used = (size_t)snprintf(resolver.rebind_allowed, sizeof resolver.rebind_allowed, "/");
    snprintf(copy, sizeof copy, "%s", domains);
    for (char *domain = strtok_r(copy, ",", &saved); domain; domain = strtok_r(NULL, ",", &saved)) {
        /* A top-level domain is accepted here ("test": a test world's whole namespace), unlike
           in allowOut/denyOut: it widens what may be answered, never what a sandbox reaches. It
           is checked as a label under it would be. */
        char canonical[NETWORK_DNS_DOMAIN_SIZE], probe[NETWORK_DNS_DOMAIN_SIZE + 8];
        bool top_level = strchr(domain, '.') == NULL;
        snprintf(probe, sizeof probe, "%s%s", top_level ? "a." : "", domain);
        bool valid = network_dns_is_domain(probe, canonical);
        if (valid && top_level)
            memmove(canonical, canonical + 2, strlen(canonical + 2) + 1);
        if (!valid ||
            used + strlen(canonical) + 2 > sizeof resolver.rebind_allowed) {
            snprintf(why, why_size, "rebind-allowed domain \"%.200s\" is not a domain name, or the list is "
                     "over %zu characters", domain, sizeof resolver.rebind_allowed - 2);
            resolver.rebind_allowed[0] = '\0';
            return -1;
        }
        used += (size_t)snprintf(resolver.rebind_allowed + used, sizeof resolver.rebind_allowed - used, "%s/", canonical);
    }
    return 0;
}

int network_dns_start(const network_dns_options *options, char *why, size_t why_size)
{
    struct in_addr address;
    if (resolver.started) {
        snprintf(why, why_size, "the resolver is started already");
        return -1;
    }
    if (!options->table || !options->listen_address || !options->state_dir ||
        inet_pton(AF_INET, options->listen_address, &address) != 1) {
        snprintf(why, why_size, "the resolver needs a table, an IPv4 listen address and a state directory");
        return -1;
    }
    for (const char *c = options->table; *c; c++)
        if (!isalnum((unsigned char)*c) && *c != '_') {
            snprintf(why, why_size, "table name %s: letters, digits and _ only", options->table);
            return -1;
        }
    const char *upstream = options->upstream ? options->upstream : "";
    for (const char *c = upstream; *c; c++)
        if (!isxdigit((unsigned char)*c) && !strchr(".:#,", *c)) {
            snprintf(why, why_size, "resolver upstream \"%s\": give servers as IP[#port], separated by commas", upstream);
            return -1;
        }
    if (rebind_allowed_pattern(options->rebind_allowed, why, why_size) != 0) return -1;
    snprintf(resolver.table, sizeof resolver.table, "%s", options->table);
    snprintf(resolver.listen_address, sizeof resolver.listen_address, "%s", options->listen_address);
    snprintf(resolver.upstream, sizeof resolver.upstream, "%s", upstream);
    snprintf(resolver.dnsmasq_path, sizeof resolver.dnsmasq_path, "%s",
             options->dnsmasq_path ? options->dnsmasq_path : DNSMASQ_DEFAULT_PATH);
    snprintf(resolver.config_path, sizeof resolver.config_path, "%s/resolver-%s.conf", options->state_dir, options->table);
    snprintf(resolver.pid_path, sizeof resolver.pid_path, "%s/resolver-%s.pid", options->state_dir, options->table);
    if (access(resolver.dnsmasq_path, X_OK) != 0) {
        snprintf(why, why_size, "the sandboxes' resolver %s is missing: install Debian's dnsmasq-base "
                 "(scripts/install-deps.sh run)", resolver.dnsmasq_path);
        return -1;
    }
    resolver.sets = calloc(NETWORK_DNS_DOMAINS_TOTAL + 1, NETWORK_DNS_DOMAIN_SIZE);
    if (!resolver.sets) {
        snprintf(why, why_size, "out of memory starting the resolver");
        return -1;
    }
    sweep_stale_resolver();
    resolver.restart_delay_ms = RESTART_DELAY_MIN_MS;
    if (write_config(NULL, 0, why, why_size) != 0 || spawn_resolver(why, why_size) != 0) {
        free(resolver.sets);
        resolver.sets = NULL;
        return -1;
    }
    resolver.started = true;
    return 0;
}

static sandbox_domains *find_sandbox(const char *id)
{
    for (size_t i = 0; i < resolver.sandbox_count; i++)
        if (strcmp(resolver.sandboxes[i].id, id) == 0) return &resolver.sandboxes[i];
    return NULL;
}

/* Replaces (or adds, or with count 0 removes) the record of one sandbox's domains; takes
   `domains`. */
static void record_sandbox(const char *id, char (*domains)[NETWORK_DNS_DOMAIN_SIZE], size_t count)
{
    sandbox_domains *record = find_sandbox(id);
    if (record) {
        free(record->domains);
        if (count == 0) {
            *record = resolver.sandboxes[--resolver.sandbox_count];
            free(domains);
            return;
        }
    } else {
        if (count == 0) {
            free(domains);
            return;
        }
        sandbox_domains *grown = realloc(resolver.sandboxes, (resolver.sandbox_count + 1) * sizeof *grown);
        if (!grown) die("out of memory recording a sandbox's domains");
        resolver.sandboxes = grown;
        record = &resolver.sandboxes[resolver.sandbox_count++];
        snprintf(record->id, sizeof record->id, "%s", id);
    }
    record->domains = domains;
    record->count = count;
}

/* dnsmasq reads its nftset lines only at start: rewrite them and start it again. The sandbox's
   lists are recorded whatever happens here; a failed start is retried from the loop, and reads
   the configuration again. */
static void restart_with(char (*listed)[NETWORK_DNS_DOMAIN_SIZE], size_t listed_count)
{
    char why[512];
    stop_resolver_process();
    loop_timer_cancel(resolver.restart_timer);
    resolver.restart_timer = 0;
    if (write_config(listed, listed_count, why, sizeof why) == 0 && spawn_resolver(why, sizeof why) == 0) return;
    log_error("network_dns: %s; trying again in %d ms", why, resolver.restart_delay_ms);
    resolver.restart_timer = loop_timer_add(resolver.restart_delay_ms, restart_after_death, NULL);
}

static int apply_domains(const char *sandbox_id, char (*domains)[NETWORK_DNS_DOMAIN_SIZE], size_t count,
                         char *why, size_t why_size)
{
    char (*listed)[NETWORK_DNS_DOMAIN_SIZE] = calloc(NETWORK_DNS_DOMAINS_TOTAL + 1, NETWORK_DNS_DOMAIN_SIZE);
    char (*before)[NETWORK_DNS_DOMAIN_SIZE] = calloc(NETWORK_DNS_DOMAINS_TOTAL + 1, NETWORK_DNS_DOMAIN_SIZE);
    if (!listed || !before) die("out of memory listing the sandboxes' domains");
    size_t listed_count = listed_domains(listed, sandbox_id, domains, count);
    size_t before_count = listed_domains(before, NULL, NULL, 0);
    int result = -1;
    if (listed_count > NETWORK_DNS_DOMAINS_TOTAL) {
        snprintf(why, why_size, "the sandboxes of this daemon would list more than %d distinct domains: "
                 "remove some from sandboxes' allowOut/denyOut, or use CIDRs", NETWORK_DNS_DOMAINS_TOTAL);
    } else if (make_sets(listed, listed_count, why, why_size) == 0) {
        bool changed = listed_count != before_count;
        for (size_t i = 0; !changed && i < listed_count; i++) changed = !list_has(before, before_count, listed[i]);
        record_sandbox(sandbox_id, domains, count);
        domains = NULL;
        result = 0;
        if (changed) restart_with(listed, listed_count);
        delete_unlisted_sets(listed, listed_count);
    }
    free(domains);
    free(listed);
    free(before);
    return result;
}

int network_dns_set_domains(const char *sandbox_id, const char *const *domains, size_t count,
                            char *why, size_t why_size)
{
    if (!resolver.started) {
        snprintf(why, why_size, "domain names need the sandboxes' resolver, which is not started");
        return -1;
    }
    if (count > NETWORK_DNS_DOMAINS_PER_SANDBOX) {
        snprintf(why, why_size, "allowOut and denyOut name %zu domains together; at most %d: use fewer, "
                 "a wildcard (*.example.com) or CIDRs", count, NETWORK_DNS_DOMAINS_PER_SANDBOX);
        return -1;
    }
    char (*canonical)[NETWORK_DNS_DOMAIN_SIZE] = calloc(count ? count : 1, NETWORK_DNS_DOMAIN_SIZE);
    if (!canonical) die("out of memory reading a sandbox's domains");
    size_t unique = 0;
    for (size_t i = 0; i < count; i++) {
        char domain[NETWORK_DNS_DOMAIN_SIZE];
        if (!network_dns_is_domain(domains[i], domain)) {
            snprintf(why, why_size, "\"%.200s\" is not a domain name: write example.com or *.example.com "
                     "(two labels or more, letters, digits and hyphens)", domains[i]);
            free(canonical);
            return -1;
        }
        if (!list_has(canonical, unique, domain)) memcpy(canonical[unique++], domain, sizeof domain);
    }
    return apply_domains(sandbox_id, canonical, unique, why, why_size);
}

void network_dns_delete_unused_sets(void)
{
    if (!resolver.started)
        return;
    char (*listed)[NETWORK_DNS_DOMAIN_SIZE] = calloc(NETWORK_DNS_DOMAINS_TOTAL + 1, NETWORK_DNS_DOMAIN_SIZE);
    if (!listed)
        die("out of memory listing the sandboxes' domains");
    size_t listed_count = listed_domains(listed, NULL, NULL, 0);
    delete_unlisted_sets(listed, listed_count);
    free(listed);
}

void network_dns_sweep(const char *state_dir, const char *table)
{
    if (resolver.started)
        return;
    snprintf(resolver.config_path, sizeof resolver.config_path, "%s/resolver-%s.conf", state_dir, table);
    snprintf(resolver.pid_path, sizeof resolver.pid_path, "%s/resolver-%s.pid", state_dir, table);
    sweep_stale_resolver();
    unlink(resolver.config_path);
}

pid_t network_dns_pid(void)
{
    return resolver.pid;
}

void network_dns_stop(void)
{
    if (!resolver.started) return;
    loop_timer_cancel(resolver.restart_timer);
    resolver.restart_timer = 0;
    stop_resolver_process();
    delete_unlisted_sets(NULL, 0);
    for (size_t i = 0; i < resolver.sandbox_count; i++) free(resolver.sandboxes[i].domains);
    free(resolver.sandboxes);
    resolver.sandboxes = NULL;
    resolver.sandbox_count = 0;
    free(resolver.sets);
    resolver.sets = NULL;
    resolver.set_count = 0;
    unlink(resolver.config_path);
    unlink(resolver.pid_path);
    resolver.started = false;
}
