/* config — cellboxd's options from defaults, a JSON config file, CELLBOX_* environment variables
 * and command-line flags, in that order of precedence (flags win). Names follow Kernel Gateway's
 * where it has one. */
#ifndef CELLBOX_DAEMON_CONFIG_H
#define CELLBOX_DAEMON_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

typedef struct config {
    char *ip;
    int port;
    char *base_url;
    char *token;            /* NULL = generate one */
    bool list_kernels;
    int max_kernels;
    char *default_kernel;
    int cull_idle_timeout, cull_interval;
    bool cull_connected, cull_busy;
    int hibernate_idle;     /* seconds idle before a sandbox hibernates; 0 = never */
    char *allow_origin, *allow_headers, *allow_methods, *expose_headers;
    bool allow_credentials;
    int max_age;
    char *data_dir;
    bool keep_workspaces;
    bool keep_sandboxes;    /* a stop leaves the sandboxes to the next daemon */
    long long max_body_size, max_message_size;
    long long max_queued_bytes;     /* output waiting on slow clients, all connections together */
    int max_connections, max_connections_per_ip;
    char *log_level;
    /* per-sandbox defaults and the most a request may ask for (0 = unbounded) */
    long long memory_limit, max_memory_limit;
    int pids_limit, max_pids_limit;
    double cpu_limit, max_cpu_limit;
    long long disk_limit, max_disk_limit;
    int open_files_limit, max_open_files_limit;
    int execution_timeout, max_execution_timeout;
    long long output_limit, max_output_limit;
    bool allow_network;
    char *network_range;        /* the sandboxes' addresses */
    char *network_allow_ranges; /* private CIDRs the operator lets them reach, comma-separated */
    char *network_dns_upstream; /* the resolver's upstream servers; "" = /etc/resolv.conf's */
    char *network_dns_rebind_ok; /* domains whose answers may point at private space */
    char *network_deny_out;     /* CIDRs and domains denied to every sandbox, comma-separated */
    int network_max_connections;    /* per sandbox at once; 0 = no limit */
    long long network_bandwidth;    /* bytes/s per sandbox each way; 0 = no limit */
    bool zygote;
    char *preload;
    char *templates;
    char *kernelspec_path; /* where host Jupyter kernels' kernel.json are, ':'-separated */
    char *language_pools;  /* "javascript:1,bash:1": warm pools of other languages */
    bool huge_code_pages;
    bool template_zygotes; /* zygotes for templates with files: runs their code as root */
    int pool_size;
    char *workspace_fs;
    char *e2b_domain;       /* "" = localhost:<port> */
} config;

typedef enum config_outcome {
    CONFIG_READY,         /* cfg holds every option */
    CONFIG_INVALID,       /* `why` names the option, the value and what it takes */
    CONFIG_HELP_ASKED,    /* --help or -h */
    CONFIG_VERSION_ASKED, /* --version */
} config_outcome;

/* Fills `cfg` from defaults, the config file, the environment and argv, and says how that went;
   prints nothing and never exits. Release `cfg` with config_free whatever the outcome. */
config_outcome config_parse(config *cfg, int argc, char **argv, char *why, size_t why_size);
/* config_parse for cellboxd's start: exits with a message naming the bad option, or after
   printing --help or --version. */
void config_load(config *cfg, int argc, char **argv);
void config_free(config *cfg);

#endif
