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
    char *allow_origin, *allow_headers, *allow_methods, *expose_headers;
    bool allow_credentials;
    int max_age;
    char *data_dir;
    bool keep_workspaces;
    long long max_body_size, max_message_size;
    char *log_level;
} config;

/* Fills `cfg` or exits with a message naming the bad option; handles --help and --version. */
void config_load(config *cfg, int argc, char **argv);

#endif
