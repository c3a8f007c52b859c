/* limits — what one sandbox may use, how a request asks for it, and how it is said in words.
 *
 * Defaults and maxima come from the daemon's options; a request may ask for other values within
 * the maxima, as a "limits" object ({"memory": "512M", "pids": 64, "cpus": 0.5, "disk": "2G",
 * "open_files": 256, "timeout": 30, "output": "4M"}, plus "network": true) or, for Jupyter
 * clients that can only pass environment variables, as KERNEL_CELLBOX_MEMORY and friends. */
#ifndef CELLBOX_SANDBOX_LIMITS_H
#define CELLBOX_SANDBOX_LIMITS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/failure.h"

typedef struct sandbox_limits {
    long long memory_bytes;  /* cgroup memory, no swap */
    int pids;                /* cgroup pids.max */
    double cpus;             /* cores of CPU time */
    long long disk_bytes;    /* /workspace size; also /tmp's and the largest file */
    int open_files;          /* RLIMIT_NOFILE */
    int timeout_seconds;     /* per execution; 0 = none */
    long long output_bytes;  /* stream output per execution before truncation */
    bool network;            /* reach outside (only if the daemon allows it) */
} sandbox_limits;

/* The least memory a sandbox may have. A kernel's start alone charges ~10 MiB to it, and the
   zygote's clone of it charges the kernel's hot pages (runtime/hot_pages.h: up to 32 MiB) and
   page tables while pid 1 still shares the zygote's memory: an out-of-memory kill in that window
   would take the zygote with it. */
#define LIMITS_MIN_MEMORY_BYTES (64LL << 20)

/* "1G", "512M", "64k", "1048576" → bytes; -1 if malformed. */
long long limits_parse_size(const char *text);
/* "1 GiB", "512 MiB", "300 KiB", "17 bytes" */
void limits_format_size(long long bytes, char *out, size_t size);

/* Reads the request's limits and env over `defaults`, refusing values past `maxima` (a max of 0
   means unbounded), memory below LIMITS_MIN_MEMORY_BYTES, and network when `network_allowed` is
   false. 0, or -1 with `why` naming the field, the value and the maximum, and `refusal`:
   FAILURE_FORBIDDEN for network the daemon does not allow, FAILURE_INVALID for the rest. */
int limits_from_request(json_t *limits, json_t *network, json_t *env,
                        const sandbox_limits *defaults, const sandbox_limits *maxima,
                        bool network_allowed, sandbox_limits *out, failure_kind *refusal,
                        char *why, size_t why_size);

/* The limits as the daemon writes them out, one spelling everywhere: {"memory_bytes", "pids",
   "cpus", "disk_bytes", "open_files", "timeout_s", "output_bytes", "network"} (GET
   /v1/sandboxes' "limits", and each sandbox's record in the registry). limits_from_json reads
   them back (a missing field is 0). */
json_t *limits_to_json(const sandbox_limits *limits);
sandbox_limits limits_from_json(json_t *object);
/* The limits as a creation asks for them (limits_from_request's names: "memory", "pids", ...),
   those that are set (> 0): a fork's or a restore's request for its source's limits. */
json_t *limits_to_request(const sandbox_limits *limits);

/* Which limits limits_equal compares. */
typedef enum limits_field {
    LIMITS_MEMORY = 1 << 0,
    LIMITS_PIDS = 1 << 1,
    LIMITS_CPUS = 1 << 2,
    LIMITS_DISK = 1 << 3,
    LIMITS_OPEN_FILES = 1 << 4,
    LIMITS_TIMEOUT = 1 << 5,
    LIMITS_OUTPUT = 1 << 6,
    LIMITS_NETWORK = 1 << 7,
    LIMITS_ALL = (1 << 8) - 1,
    /* what a sandbox's cgroup and workspace volume are made from (model/prepared.h) */
    LIMITS_OF_CGROUP_AND_VOLUME = LIMITS_MEMORY | LIMITS_PIDS | LIMITS_CPUS | LIMITS_DISK,
} limits_field;

/* True if a and b agree on every limit in `which` (limits_field flags). */
bool limits_equal(const sandbox_limits *a, const sandbox_limits *b, unsigned which);

#endif
