/* network-dns-driver — sandbox/network_dns.c on the daemon's loop, driven line by line from
 * stdin, for tests/integration/test_network_dns.py: the test runs it inside a network namespace
 * of its own (standing in for the bridge side) and reads one answer line per command.
 *   start TABLE LISTEN_ADDRESS UPSTREAM|- STATE_DIR [REBIND_ALLOWED]  -> ok PID | error WHY
 *   domains SANDBOX [DOMAIN...]                       -> ok | error WHY
 *   set-name DOMAIN                                   -> ok NAME
 *   pid                                               -> ok PID (0: not running)
 *   list TABLE                                        -> ok JSON of `nft -j list table inet TABLE`
 *   stop                                              -> ok
 *   quit (or end of input)                            -> stops the resolver and exits */
#include <nftables/libnftables.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "common/loop.h"
#include "sandbox/network_dns.h"

static char input[65536];
static size_t input_length;
static loop_watch stdin_watch = {.fd = -1};

static void list_table(const char *table)
{
    struct nft_ctx *nft = nft_ctx_new(NFT_CTX_DEFAULT);
    nft_ctx_output_set_flags(nft, NFT_CTX_OUTPUT_JSON);
    nft_ctx_buffer_output(nft);
    nft_ctx_buffer_error(nft);
    char command[256];
    snprintf(command, sizeof command, "list table inet %s", table);
    bool listed = nft_run_cmd_from_buffer(nft, command) == 0;
    const char *text = listed ? nft_ctx_get_output_buffer(nft) : nft_ctx_get_error_buffer(nft);
    /* One line per answer: the JSON is one line; an error's first line says it. */
    printf("%s %.*s\n", listed ? "ok" : "error", (int)strcspn(text ? text : "", "\n"), text ? text : "");
    nft_ctx_free(nft);
}

static void run_command(char *line)
{
    char *words[NETWORK_DNS_DOMAINS_PER_SANDBOX + 8], why[1024];
    size_t count = 0;
    for (char *saved = NULL, *word = strtok_r(line, " \t", &saved); word && count < sizeof words / sizeof *words;
         word = strtok_r(NULL, " \t", &saved))
        words[count++] = word;
    if (count == 0) return;
    if (strcmp(words[0], "start") == 0 && (count == 5 || count == 6)) {
        network_dns_options options = {.table = words[1], .listen_address = words[2],
                                       .upstream = strcmp(words[3], "-") == 0 ? NULL : words[3],
                                       .state_dir = words[4], .rebind_allowed = count == 6 ? words[5] : NULL};
        if (network_dns_start(&options, why, sizeof why) == 0) printf("ok %d\n", (int)network_dns_pid());
        else printf("error %s\n", why);
    } else if (strcmp(words[0], "domains") == 0 && count >= 2) {
        if (network_dns_set_domains(words[1], (const char *const *)words + 2, count - 2, why, sizeof why) == 0)
            printf("ok\n");
        else
            printf("error %s\n", why);
    } else if (strcmp(words[0], "set-name") == 0 && count == 2) {
        char name[NETWORK_DNS_SET_NAME_SIZE], domain[NETWORK_DNS_DOMAIN_SIZE];
        if (!network_dns_is_domain(words[1], domain)) printf("error not a domain\n");
        else network_dns_set_name(domain, name), printf("ok %s\n", name);
    } else if (strcmp(words[0], "pid") == 0) {
        printf("ok %d\n", (int)network_dns_pid());
    } else if (strcmp(words[0], "list") == 0 && count == 2) {
        list_table(words[1]);
    } else if (strcmp(words[0], "stop") == 0) {
        network_dns_stop();
        printf("ok\n");
    } else if (strcmp(words[0], "quit") == 0) {
        loop_stop();
        return;
    } else {
        printf("error unknown command %s\n", words[0]);
    }
    fflush(stdout);
}

static void stdin_ready(void *owner, uint32_t events)
{
    ssize_t got = read(STDIN_FILENO, input + input_length, sizeof input - 1 - input_length);
    if (got <= 0) {
        loop_watch_remove(&stdin_watch);
        loop_stop();
        return;
    }
    input_length += (size_t)got;
    char *newline;
    while ((newline = memchr(input, '\n', input_length))) {
        *newline = '\0';
        run_command(input);
        size_t used = (size_t)(newline + 1 - input);
        memmove(input, newline + 1, input_length - used);
        input_length -= used;
    }
}

int main(void)
{
    loop_init();
    loop_watch_add(&stdin_watch, STDIN_FILENO, EPOLLIN, stdin_ready, NULL);
    loop_run();
    network_dns_stop();
    return 0;
}
