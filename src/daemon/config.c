#include "daemon/config.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/version.h"
#include "sandbox/limits.h"

typedef enum option_type { OPT_STRING, OPT_INT, OPT_BOOL, OPT_SIZE, OPT_NUMBER } option_type;

typedef struct option_spec {
    const char *name;   /* flag --name, env CELLBOX_NAME, config key name with '_' */
    option_type type;
    size_t offset;      /* into struct config */
    const char *fallback;
    const char *help;
} option_spec;

#define FIELD(f) offsetof(config, f)

static const option_spec options[] = {
    {"ip", OPT_STRING, FIELD(ip), "127.0.0.1", "address to listen on (a non-loopback address requires a token)"},
    {"port", OPT_INT, FIELD(port), "8888", "port to listen on (0 = any free port)"},
    {"base-url", OPT_STRING, FIELD(base_url), "/", "URL prefix of every route"},
    {"token", OPT_STRING, FIELD(token), NULL, "token clients must send; generated and printed when absent; '' disables auth (loopback only)"},
    {"list-kernels", OPT_BOOL, FIELD(list_kernels), "true", "allow GET /api/kernels (false = 403, as Kernel Gateway's default)"},
    {"max-kernels", OPT_INT, FIELD(max_kernels), "0", "most kernels at once; 0 = no limit"},
    {"default-kernel", OPT_STRING, FIELD(default_kernel), "python3", "kernelspec used when a request names none"},
    {"cull-idle-timeout", OPT_INT, FIELD(cull_idle_timeout), "0", "seconds without execute activity before a kernel is culled; 0 = never"},
    {"cull-interval", OPT_INT, FIELD(cull_interval), "300", "seconds between culling passes"},
    {"cull-connected", OPT_BOOL, FIELD(cull_connected), "false", "also cull idle kernels that have open WebSockets"},
    {"cull-busy", OPT_BOOL, FIELD(cull_busy), "false", "also cull kernels that are busy"},
    {"hibernate-idle", OPT_INT, FIELD(hibernate_idle), "0", "seconds a sandbox's contexts are idle (no client connected) before it hibernates: its memory to a snapshot on disk, woken by its next request; 0 = never"},
    {"allow-origin", OPT_STRING, FIELD(allow_origin), "", "CORS Access-Control-Allow-Origin"},
    {"allow-headers", OPT_STRING, FIELD(allow_headers), "", "CORS Access-Control-Allow-Headers"},
    {"allow-methods", OPT_STRING, FIELD(allow_methods), "", "CORS Access-Control-Allow-Methods"},
    {"allow-credentials", OPT_BOOL, FIELD(allow_credentials), "false", "CORS Access-Control-Allow-Credentials"},
    {"expose-headers", OPT_STRING, FIELD(expose_headers), "", "CORS Access-Control-Expose-Headers"},
    {"max-age", OPT_INT, FIELD(max_age), "0", "CORS Access-Control-Max-Age in seconds"},
    {"data-dir", OPT_STRING, FIELD(data_dir), NULL, "where workspaces live (default /var/lib/cellbox as root, else ~/.local/share/cellbox)"},
    {"keep-workspaces", OPT_BOOL, FIELD(keep_workspaces), "false", "keep a kernel's files after it is deleted"},
    {"keep-sandboxes", OPT_BOOL, FIELD(keep_sandboxes), "false", "a stop (SIGINT, SIGTERM) leaves every sandbox running for the next cellboxd on the data directory, as SIGUSR2 always does"},
    {"max-body-size", OPT_SIZE, FIELD(max_body_size), "16777216", "largest request body in bytes (413 beyond)"},
    {"max-message-size", OPT_SIZE, FIELD(max_message_size), "67108864", "largest WebSocket message in bytes (closed with 1009 beyond)"},
    {"max-queued-bytes", OPT_SIZE, FIELD(max_queued_bytes), "512M", "output waiting on clients that do not read, all connections together; past it the connection queuing the most is closed (WebSocket 1008, an error line ending an NDJSON stream); 0 = no ceiling (each WebSocket still has its own 256 MiB)"},
    {"max-connections", OPT_INT, FIELD(max_connections), "4096", "client connections at once (WebSockets included); one more is answered 503; lowered at start to a quarter of the open-file limit; 0 = that quarter"},
    {"max-connections-per-ip", OPT_INT, FIELD(max_connections_per_ip), "512", "client connections at once from one address; one more is answered 429; 0 = no limit"},
    {"log-level", OPT_STRING, FIELD(log_level), "info", "debug, info, warn or error"},
    {"memory-limit", OPT_SIZE, FIELD(memory_limit), "1G", "memory per sandbox, no swap (a request may ask for other limits up to the max-* options)"},
    {"max-memory-limit", OPT_SIZE, FIELD(max_memory_limit), "8G", "most memory a sandbox may ask for"},
    {"pids-limit", OPT_INT, FIELD(pids_limit), "256", "processes and threads per sandbox"},
    {"max-pids-limit", OPT_INT, FIELD(max_pids_limit), "4096", "most pids a sandbox may ask for"},
    {"cpu-limit", OPT_NUMBER, FIELD(cpu_limit), "1", "CPU cores per sandbox"},
    {"max-cpu-limit", OPT_NUMBER, FIELD(max_cpu_limit), "0", "most cores a sandbox may ask for; 0 = all"},
    {"disk-limit", OPT_SIZE, FIELD(disk_limit), "1G", "size of /workspace (an ext4 volume), of /tmp, and of the largest file"},
    {"max-disk-limit", OPT_SIZE, FIELD(max_disk_limit), "16G", "most disk a sandbox may ask for"},
    {"open-files-limit", OPT_INT, FIELD(open_files_limit), "1024", "open files per process in a sandbox"},
    {"max-open-files-limit", OPT_INT, FIELD(max_open_files_limit), "65536", "most open files a sandbox may ask for"},
    {"execution-timeout", OPT_INT, FIELD(execution_timeout), "0", "seconds a cell may run before it is interrupted; 0 = no limit"},
    {"max-execution-timeout", OPT_INT, FIELD(max_execution_timeout), "0", "longest timeout a sandbox may ask for; 0 = any"},
    {"output-limit", OPT_SIZE, FIELD(output_limit), "1M", "output bytes per execution (stream text, rich output) before the rest is dropped"},
    {"max-output-limit", OPT_SIZE, FIELD(max_output_limit), "256M", "most output a sandbox may ask for"},
    {"zygote", OPT_BOOL, FIELD(zygote), "true", "start Python kernels by cloning a preloaded interpreter (false = exec each one)"},
    {"preload", OPT_STRING, FIELD(preload), "numpy,pandas,matplotlib,IPython", "modules the python3 template's zygote imports once for every kernel"},
    {"templates", OPT_STRING, FIELD(templates), "", "more templates beside python3, each a kernelspec with its own zygote and warm pool: NAME:MODULES[:POOL] separated by ';', e.g. 'light::1;data:numpy,pandas:0' (every zygote has IPython)"},
    {"kernelspec-path", OPT_STRING, FIELD(kernelspec_path), "/usr/local/share/jupyter/kernels:/usr/share/jupyter/kernels", "directories (':'-separated) whose NAME/kernel.json Jupyter kernels are offered beside python3, javascript, typescript and bash, each run sandboxed (its program must be under /usr; python3 is cellbox's own)"},
    {"language-pools", OPT_STRING, FIELD(language_pools), "", "warm pools of the other languages' kernels: NAME:SIZE separated by ',', e.g. 'javascript:1,bash:1' (python3's is --pool-size)"},
    {"huge-code-pages", OPT_BOOL, FIELD(huge_code_pages), "false", "map the library code every kernel runs with 2 MiB pages shared by all kernels, from the hugetlb pool where it has pages free, else transparent ones (faster starts where a page's first touch traps; see docs/performance.md for when it costs more)"},
    {"template-zygotes", OPT_BOOL, FIELD(template_zygotes), "false", "give each template with files of its own (built or imported) a zygote running in its view, so its kernels start as fast as python3's; the zygote is a root process on the host that loads the template's libraries and packages (their .pth files and imports run in it), so turn it on only where every template is built from trusted Dockerfiles and tarballs; off, their kernels start by exec, inside the sandbox"},
    {"pool-size", OPT_INT, FIELD(pool_size), "2", "python3 kernels kept started ahead of time, handed out by POST /api/kernels (default limits)"},
    {"workspace-fs", OPT_STRING, FIELD(workspace_fs), "ext4", "what /workspace is: ext4 (an image on disk, kept with --keep-workspaces) or tmpfs (memory, counted against the sandbox's memory limit; fastest)"},
    {"e2b-domain", OPT_STRING, FIELD(e2b_domain), "", "the domain of E2B's sandbox hosts: <port>-<sandboxId>.<domain> reaches a server in a sandbox (getHost); '' = localhost with the daemon's port (localhost:8888)"},
    {"allow-network", OPT_BOOL, FIELD(allow_network), "false", "let a sandbox ask for network access (\"network\": true): its own interface, NAT to the host's uplink, the host and other sandboxes out of reach; off = no sandbox ever has it"},
    {"network-range", OPT_STRING, FIELD(network_range), "10.88.0.0/16", "the IPv4 range networked sandboxes take their addresses from (/16 to /29; its first address is their gateway)"},
    {"network-dns-upstream", OPT_STRING, FIELD(network_dns_upstream), "", "the DNS servers the sandboxes' resolver (dnsmasq on their gateway) asks, IP[#port] comma-separated; '' = the servers of the host's /etc/resolv.conf"},
    {"network-dns-rebind-ok", OPT_STRING, FIELD(network_dns_rebind_ok), "", "domains, comma-separated, whose DNS answers may point at private or documentation addresses (the resolver refuses such answers for any other name); the firewall's denials still hold for the addresses they name"},
    {"network-deny-out", OPT_STRING, FIELD(network_deny_out), "", "destinations every sandbox is denied whatever its allowOut says: IPv4 addresses, CIDRs and domain names (example.com, *.example.com), comma-separated"},
    {"network-max-connections", OPT_INT, FIELD(network_max_connections), "0", "connections (flows) each networked sandbox may have open at once; one more is refused; 0 = no limit"},
    {"network-bandwidth", OPT_SIZE, FIELD(network_bandwidth), "0", "bytes a second each networked sandbox may send, and receive, like 10M; 0 = no limit"},
    {"network-allow-ranges", OPT_STRING, FIELD(network_allow_ranges), "", "private ranges (10/8, 172.16/12, 192.168/16, 100.64/10) sandboxes may reach after all, comma-separated CIDRs; '' = none"},
};
#define OPTION_COUNT (sizeof options / sizeof options[0])

static void print_help(void)
{
    printf("Usage: cellboxd [OPTION]...\n"
           "Jupyter Kernel Gateway-compatible server running stateful, isolated Python kernels.\n\n"
           "Every option can also be set as an environment variable CELLBOX_<NAME> (upper case,\n"
           "'-' as '_', e.g. CELLBOX_TOKEN) or as a key in a JSON config file given with\n"
           "--config FILE (or CELLBOX_CONFIG), e.g. {\"port\": 8888, \"list_kernels\": false}.\n"
           "Precedence: flags, then environment, then the config file, then defaults.\n\n");
    for (size_t i = 0; i < OPTION_COUNT; i++) {
        char flag[64];
        snprintf(flag, sizeof flag, "--%s%s", options[i].name,
                 options[i].type == OPT_BOOL ? "[=BOOL]" : "=VALUE");
        printf("  %-28s %s", flag, options[i].help);
        if (options[i].fallback && *options[i].fallback)
            printf(" [default: %s]", options[i].fallback);
        printf("\n");
    }
    printf("  %-28s %s\n  %-28s %s\n  %-28s %s\n", "--config=FILE", "read options from a JSON file",
           "--help", "show this help", "--version", "show the version");
}

static bool parse_bool(const char *text, bool *out)
{
    if (!strcmp(text, "true") || !strcmp(text, "1") || !strcmp(text, "yes") || !strcmp(text, "on"))
        *out = true;
    else if (!strcmp(text, "false") || !strcmp(text, "0") || !strcmp(text, "no") || !strcmp(text, "off"))
        *out = false;
    else
        return false;
    return true;
}

/* Writes the reason into `why` and returns false, for `return fail(...)` at each refusal. */
static bool fail(char *why, size_t why_size, const char *format, ...)
    __attribute__((format(printf, 3, 4)));
static bool fail(char *why, size_t why_size, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    vsnprintf(why, why_size, format, args);
    va_end(args);
    return false;
}

static bool set_option(config *cfg, const option_spec *opt, const char *value, const char *source,
                       char *why, size_t why_size)
{
    char *field = (char *)cfg + opt->offset;
    char *end;
    switch (opt->type) {
    case OPT_STRING:
        free(*(char **)field);
        *(char **)field = value ? strdup(value) : NULL;
        return true;
    case OPT_BOOL:
        if (!parse_bool(value, (bool *)field))
            return fail(why, why_size, "%s: --%s takes true or false, not '%s'", source, opt->name,
                        value);
        return true;
    case OPT_INT: {
        errno = 0;
        long number = strtol(value, &end, 10);
        if (errno || *end || end == value || number < 0 || number > 1000000000)
            return fail(why, why_size, "%s: --%s takes a whole number >= 0, not '%s'", source,
                        opt->name, value);
        if (strcmp(opt->name, "port") == 0 && number > 65535)
            return fail(why, why_size, "%s: --port takes 0 to 65535, not '%s'", source, value);
        *(int *)field = (int)number;
        return true;
    }
    case OPT_SIZE: {
        long long number = limits_parse_size(value);
        /* 0 is "no limit" for the max-* options and for those whose default is 0. */
        bool zero_allowed = strncmp(opt->name, "max-", 4) == 0 ||
                            (opt->fallback && strcmp(opt->fallback, "0") == 0);
        if (number < 0 || (number == 0 && !zero_allowed))
            return fail(why, why_size,
                        "%s: --%s takes a size like 512M, 1G or a number of bytes, not '%s'", source,
                        opt->name, value);
        *(long long *)field = number;
        return true;
    }
    case OPT_NUMBER: {
        errno = 0;
        double number = strtod(value, &end);
        if (errno || *end || end == value || number < 0)
            return fail(why, why_size, "%s: --%s takes a number >= 0, not '%s'", source, opt->name,
                        value);
        *(double *)field = number;
        return true;
    }
    }
    return true;
}

static const option_spec *find_option(const char *name, size_t length)
{
    for (size_t i = 0; i < OPTION_COUNT; i++) {
        if (strlen(options[i].name) != length)
            continue;
        bool same = true;
        for (size_t j = 0; j < length && same; j++) /* '-' and '_' are the same letter here */
            same = options[i].name[j] == name[j] || (options[i].name[j] == '-' && name[j] == '_');
        if (same)
            return &options[i];
    }
    return NULL;
}

static bool load_config_file(config *cfg, const char *path, char *why, size_t why_size)
{
    json_error_t error;
    json_t *root = json_load_file(path, 0, &error);
    if (!root)
        return fail(why, why_size, "config file %s: %s (line %d)", path, error.text, error.line);
    if (!json_is_object(root)) {
        json_decref(root);
        return fail(why, why_size, "config file %s must hold a JSON object", path);
    }
    bool loaded = true;
    const char *key;
    json_t *value;
    json_object_foreach(root, key, value)
    {
        const option_spec *opt = find_option(key, strlen(key));
        char text[64];
        if (!opt)
            loaded = fail(why, why_size, "config file %s: unknown option '%s' (see cellboxd --help)",
                          path, key);
        else if (json_is_string(value))
            loaded = set_option(cfg, opt, json_string_value(value), path, why, why_size);
        else if (json_is_boolean(value))
            loaded = set_option(cfg, opt, json_is_true(value) ? "true" : "false", path, why, why_size);
        else if (json_is_integer(value) && snprintf(text, sizeof text, "%lld", (long long)json_integer_value(value)) > 0)
            loaded = set_option(cfg, opt, text, path, why, why_size);
        else if (json_is_real(value) && snprintf(text, sizeof text, "%g", json_real_value(value)) > 0)
            loaded = set_option(cfg, opt, text, path, why, why_size);
        else
            loaded = fail(why, why_size, "config file %s: '%s' must be a string, number or boolean",
                          path, key);
        if (!loaded)
            break;
    }
    json_decref(root);
    return loaded;
}

static bool load_environment(config *cfg, char *why, size_t why_size)
{
    for (size_t i = 0; i < OPTION_COUNT; i++) {
        char name[64] = "CELLBOX_";
        for (size_t j = 0; options[i].name[j] && j + 9 < sizeof name; j++)
            name[8 + j] = options[i].name[j] == '-' ? '_' : (char)toupper(options[i].name[j]);
        const char *value = getenv(name);
        if (value && !set_option(cfg, &options[i], value, name, why, why_size))
            return false;
    }
    return true;
}

static const char *config_file_from_args(int argc, char **argv)
{
    const char *path = getenv("CELLBOX_CONFIG");
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "--config=", 9) == 0)
            path = argv[i] + 9;
        else if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
            path = argv[++i];
    }
    return path;
}

static config_outcome load_flags(config *cfg, int argc, char **argv, char *why, size_t why_size)
{
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h"))
            return CONFIG_HELP_ASKED;
        if (!strcmp(arg, "--version"))
            return CONFIG_VERSION_ASKED;
        if (!strncmp(arg, "--config", 8)) {
            if (arg[8] == '\0')
                i++;
            continue;
        }
        if (strncmp(arg, "--", 2) != 0) {
            fail(why, why_size, "unexpected argument '%s' (see cellboxd --help)", arg);
            return CONFIG_INVALID;
        }
        const char *name = arg + 2;
        const char *equals = strchr(name, '=');
        const option_spec *opt = find_option(name, equals ? (size_t)(equals - name) : strlen(name));
        if (!opt) {
            fail(why, why_size, "unknown option '%s' (see cellboxd --help)", arg);
            return CONFIG_INVALID;
        }
        const char *value = equals ? equals + 1 : NULL;
        if (!value && opt->type == OPT_BOOL)
            value = "true";
        else if (!value && i + 1 < argc)
            value = argv[++i];
        else if (!value) {
            fail(why, why_size, "option --%s needs a value", opt->name);
            return CONFIG_INVALID;
        }
        if (!set_option(cfg, opt, value, "command line", why, why_size))
            return CONFIG_INVALID;
    }
    return CONFIG_READY;
}

static char *default_data_dir(void)
{
    char *path;
    const char *home = getenv("HOME");
    if (geteuid() == 0 || !home)
        return strdup("/var/lib/cellbox");
    if (asprintf(&path, "%s/.local/share/cellbox", home) < 0)
        die("out of memory");
    return path;
}

config_outcome config_parse(config *cfg, int argc, char **argv, char *why, size_t why_size)
{
    memset(cfg, 0, sizeof *cfg);
    for (size_t i = 0; i < OPTION_COUNT; i++)
        if (options[i].fallback && !set_option(cfg, &options[i], options[i].fallback, "default",
                                               why, why_size))
            return CONFIG_INVALID;
    const char *file = config_file_from_args(argc, argv);
    if (file && !load_config_file(cfg, file, why, why_size))
        return CONFIG_INVALID;
    if (!load_environment(cfg, why, why_size))
        return CONFIG_INVALID;
    config_outcome outcome = load_flags(cfg, argc, argv, why, why_size);
    if (outcome == CONFIG_READY && !cfg->data_dir)
        cfg->data_dir = default_data_dir();
    return outcome;
}

void config_load(config *cfg, int argc, char **argv)
{
    char why[512];
    switch (config_parse(cfg, argc, argv, why, sizeof why)) {
    case CONFIG_READY:
        return;
    case CONFIG_HELP_ASKED:
        print_help();
        exit(0);
    case CONFIG_VERSION_ASKED:
        printf("cellboxd %s\n", CELLBOX_VERSION);
        exit(0);
    case CONFIG_INVALID:
        die("%s", why);
    }
}

void config_free(config *cfg)
{
    for (size_t i = 0; i < OPTION_COUNT; i++)
        if (options[i].type == OPT_STRING)
            free(*(char **)((char *)cfg + options[i].offset));
}
