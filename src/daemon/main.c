/* cellboxd — the flow: options, token, descriptors, data directory, event loop, kernels, HTTP API,
   run until a signal; main() calls the steps in the order they run. */
#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "api/channels.h"
#include "api/envd_access.h"
#include "api/jupyter.h"
#include "api/ports.h"
#include "sandbox/network.h"
#include "api/routes.h"
#include "api/v1_ready.h"
#include "api/v1.h"
#include "common/descriptors.h"
#include "common/heap.h"
#include "common/ids.h"
#include "common/log.h"
#include "common/loop.h"
#include "common/worker.h"
#include "daemon/config.h"
#include "daemon/data_dir.h"
#include "http/admission.h"
#include "http/outbound.h"
#include "http/server.h"
#include "kernel/kernelspec.h"
#include "model/templates.h"
#include "kernel/reaper.h"
#include "model/culling.h"
#include "model/manager.h"
#include "model/startup.h"
#include "model/template_build.h"
#include "model/volumes.h"
#include "kernel/zygote.h"
#include "sandbox/volume.h"
#include "sandbox/volume_worker.h"
#include "sandbox/cgroup.h"
#include "sandbox/limits.h"
#include "sandbox/sandbox.h"
#include "sandbox/seccomp_filter.h"
#include "sandbox/uid_block.h"

static loop_watch signal_watch;
static bool leave_sandboxes; /* SIGUSR2, or a stop with --keep-sandboxes */

static bool is_loopback(const char *ip)
{
    struct in_addr v4;
    struct in6_addr v6;
    if (inet_pton(AF_INET, ip, &v4) == 1)
        return (ntohl(v4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, ip, &v6) == 1)
        return IN6_IS_ADDR_LOOPBACK(&v6);
    return false;
}

/* A token protects everything; without one only this machine may connect. */
static void settle_token(config *cfg, bool *generated)
{
    *generated = false;
    if (!cfg->token) {
        char token[65];
        id_random_hex(token, 24);
        cfg->token = strdup(token);
        *generated = true;
    }
    if (!*cfg->token && !is_loopback(cfg->ip))
        die("refusing to listen on %s without a token: set --token (or CELLBOX_TOKEN), or listen "
            "on 127.0.0.1", cfg->ip);
}

/* Thousands of WebSockets and kernel channels need descriptors: take all we are allowed.
   Returns the limit now in force. */
static long raise_fd_limit(void)
{
    struct rlimit limit;
    if (getrlimit(RLIMIT_NOFILE, &limit) != 0)
        return 1024;
    rlim_t before = limit.rlim_cur;
    if (limit.rlim_cur < limit.rlim_max) {
        limit.rlim_cur = limit.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &limit) != 0)
            limit.rlim_cur = before;
    }
    long now = limit.rlim_cur == RLIM_INFINITY || limit.rlim_cur > 1 << 30 ? 1 << 30 : (long)limit.rlim_cur;
    log_info("open files: limit %ld (soft limit was %llu, hard limit %llu)", now,
             (unsigned long long)before, (unsigned long long)limit.rlim_max);
    return now;
}

/* Descriptors are shared out so that neither side can starve the other: client connections get
   at most a quarter of the limit (each may hold two: its socket and, while a response streams,
   a watch on it); sandboxes, their contexts and commands stop short of the rest
   (common/descriptors.c). */
static void share_descriptors(config *cfg, long fd_limit, int *sandbox_budget)
{
    long most_connections = fd_limit / 4 > (long)ADMISSION_HEADROOM ? fd_limit / 4 - ADMISSION_HEADROOM : 1;
    if (cfg->max_connections == 0 || cfg->max_connections > most_connections) {
        if (cfg->max_connections > most_connections)
            log_warn("--max-connections %d lowered to %ld: the open-file limit is %ld (raise it "
                     "with ulimit -n or LimitNOFILE= for more)", cfg->max_connections,
                     most_connections, fd_limit);
        cfg->max_connections = (int)most_connections;
    }
    if (cfg->max_connections_per_ip > cfg->max_connections)
        cfg->max_connections_per_ip = cfg->max_connections;
    long for_connections = 2L * (cfg->max_connections + ADMISSION_HEADROOM);
    long left = fd_limit - for_connections - 32; /* 32: logs, listen socket, zygotes */
    if (left < 64)
        log_warn("the open-file limit %ld leaves sandboxes %ld descriptors: few or no sandboxes "
                 "will start (raise it with ulimit -n or LimitNOFILE=)", fd_limit, left);
    *sandbox_budget = left > 1 ? (int)left : 1; /* 0 would mean no budget at all */
    log_info("connections: at most %d (%d per address); sandboxes may bring open files to %d",
             cfg->max_connections, cfg->max_connections_per_ip, *sandbox_budget);
}

static void on_signal(void *owner, uint32_t events)
{
    struct signalfd_siginfo info;
    if (read(signal_watch.fd, &info, sizeof info) == sizeof info) {
        /* SIGUSR2: a restart (an upgrade): the sandboxes wait for the next daemon. */
        if (info.ssi_signo == SIGUSR2)
            leave_sandboxes = true;
        log_info("received %s; %s", strsignal((int)info.ssi_signo),
                 leave_sandboxes ? "stopping, leaving every sandbox to the next cellboxd"
                                 : "shutting down");
        loop_stop();
    }
}

static void watch_signals(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGUSR2);
    sigprocmask(SIG_BLOCK, &set, NULL);
    int fd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    if (fd < 0)
        die("signalfd: %s", strerror(errno));
    loop_watch_add(&signal_watch, fd, EPOLLIN, on_signal, NULL);
    signal(SIGPIPE, SIG_IGN);
}

static void print_banner(const config *cfg, int port, bool generated_token)
{
    const char *host = cfg->ip;
    bool v6 = strchr(host, ':') != NULL;
    char url[256];
    snprintf(url, sizeof url, "http://%s%s%s:%d%s", v6 ? "[" : "", host, v6 ? "]" : "", port,
             http_base_url());
    fprintf(stderr, "cellboxd listening on %s\n", url);
    if (*cfg->token) {
        fprintf(stderr, "  token: %s%s\n", cfg->token, generated_token ? " (generated; set --token or CELLBOX_TOKEN to choose one)" : "");
        fprintf(stderr, "  try:   curl -H 'Authorization: token %s' %sapi/kernelspecs\n", cfg->token, url);
    } else {
        fprintf(stderr, "  authentication is off (--token '')\n");
    }
    fflush(stderr);
}

/* ---- the steps of main(), in the order they run ---- */

static void set_log_level(const config *cfg)
{
    enum log_level level;
    if (log_parse_level(cfg->log_level, &level) < 0)
        die("--log-level takes debug, info, warn or error, not '%s'", cfg->log_level);
    log_set_level(level);
}

static void check_memory_floor(const config *cfg)
{
    if (cfg->memory_limit < LIMITS_MIN_MEMORY_BYTES ||
        cfg->max_memory_limit < LIMITS_MIN_MEMORY_BYTES)
        die("--memory-limit and --max-memory-limit must be at least %lld MiB (what a kernel needs "
            "to start)", LIMITS_MIN_MEMORY_BYTES >> 20);
}

static void set_descriptor_limits(config *cfg)
{
    long fd_limit = raise_fd_limit();
    int sandbox_descriptor_budget;
    share_descriptors(cfg, fd_limit, &sandbox_descriptor_budget);
    descriptors_set_budget(sandbox_descriptor_budget);
    outbound_set_ceiling((size_t)cfg->max_queued_bytes);
}

/* Before anything is made in the data directory or handed out: one daemon per data directory,
   and sandbox uids no other daemon on the host uses. */
static uid_block claim_data_dir(const config *cfg)
{
    char why[512];
    if (sandbox_check_privileges(why, sizeof why) < 0)
        die("%s", why);
    if (data_dir_lock(cfg->data_dir, why, sizeof why) < 0)
        die("%s", why);
    uid_block uids;
    if (uid_block_claim(cfg->data_dir, &uids, why, sizeof why) < 0)
        die("%s", why);
    if (uids.previous >= 0 && !uids.same_as_before)
        log_warn("uid block %d (this data directory's last) is taken by another daemon or used by "
                 "running processes: sandboxes get block %d now", uids.previous, uids.number);
    return uids;
}

static volume_kind prepare_sandboxing(const config *cfg)
{
    char why[512];
    if (cgroup_init(why, sizeof why) < 0)
        die("%s", why);
    /* Once here, not in each helper forked to join a sandbox. */
    int seccomp_rc = seccomp_filter_prepare();
    if (seccomp_rc < 0)
        die("cannot compile the sandbox's seccomp filter: %s", strerror(-seccomp_rc));
    volume_kind workspace_kind;
    if (volume_parse_kind(cfg->workspace_fs, &workspace_kind) < 0)
        die("--workspace-fs takes ext4 or tmpfs, not '%s'", cfg->workspace_fs);
    return workspace_kind;
}

/* The sandboxes' network (its table, NAT, forwarding) when they may have one; either way what a
   dead daemon of this uid block left is swept. */
static void prepare_network(const config *cfg, const uid_block *uids)
{
    char why[512];
    if (!cfg->allow_network) {
        network_sweep(uids->number);
        return;
    }
    if (network_init(uids->number, cfg->network_range, cfg->network_allow_ranges, why,
                     sizeof why) < 0)
        die("%s", why);
    if (network_limit_sandboxes(cfg->network_max_connections, cfg->network_bandwidth, why,
                                sizeof why) < 0) {
        network_shutdown();
        die("%s", why);
    }
}

/* The sandboxes' resolver on their gateway and the operator's deny list (its domains are sets
   the resolver fills), once the loop runs: the resolver is supervised from it. Without network,
   a resolver a dead daemon of this block left is stopped. */
static void start_network_resolver(const config *cfg, const uid_block *uids)
{
    char why[512];
    if (!cfg->allow_network) {
        network_sweep_resolver(uids->number, cfg->data_dir);
        return;
    }
    if (network_start_resolver(&(network_resolver_options){.state_dir = cfg->data_dir,
                                                           .upstream = cfg->network_dns_upstream,
                                                           .rebind_allowed =
                                                               cfg->network_dns_rebind_ok,
                                                           .deny_out = cfg->network_deny_out},
                               why, sizeof why) < 0) {
        network_shutdown(); /* a daemon that cannot start leaves nothing of its network */
        die("%s", why);
    }
}

static void load_kernelspecs(const config *cfg)
{
    char why[512];
    kernelspec_init(cfg->preload, cfg->pool_size);
    if (kernelspec_add_templates(cfg->templates, why, sizeof why) < 0)
        die("--templates: %s", why);
    if (kernelspec_add_languages(cfg->kernelspec_path, cfg->language_pools, why, sizeof why) < 0)
        die("--language-pools: %s", why);
}

/* The model (startup_run: the records, the keeper, what a previous daemon left, the warm pools),
   then the culling of idle sandboxes. */
static void start_sandboxes(const config *cfg, volume_kind workspace_kind, const uid_block *uids)
{
    startup_run(&(manager_options){
        .data_dir = cfg->data_dir,
        .default_kernel = cfg->default_kernel,
        .max_kernels = cfg->max_kernels,
        .keep_workspaces = cfg->keep_workspaces,
        .default_limits = {.memory_bytes = cfg->memory_limit,
                           .pids = cfg->pids_limit,
                           .cpus = cfg->cpu_limit,
                           .disk_bytes = cfg->disk_limit,
                           .open_files = cfg->open_files_limit,
                           .timeout_seconds = cfg->execution_timeout,
                           .output_bytes = cfg->output_limit},
        .max_limits = {.memory_bytes = cfg->max_memory_limit,
                       .pids = cfg->max_pids_limit,
                       .cpus = cfg->max_cpu_limit,
                       .disk_bytes = cfg->max_disk_limit,
                       .open_files = cfg->max_open_files_limit,
                       .timeout_seconds = cfg->max_execution_timeout,
                       .output_bytes = cfg->max_output_limit},
        .allow_network = cfg->allow_network,
        .workspace_kind = workspace_kind,
        .first_uid = uids->first,
        .hibernate_idle = cfg->hibernate_idle,
    });
    culling_start(&(culling_options){.idle_timeout = cfg->cull_idle_timeout,
                                     .interval = cfg->cull_interval,
                                     .cull_connected = cfg->cull_connected,
                                     .cull_busy = cfg->cull_busy});
}

static void check_default_kernel(const config *cfg)
{
    if (!kernelspec_find(cfg->default_kernel))
        die("--default-kernel %s is not a known kernelspec (python3 is, the names of "
            "--templates, and javascript, typescript, bash and the host's Jupyter kernels)",
            cfg->default_kernel);
}

/* One zygote per kernelspec (templates with files included), each with its own cache of
   preloaded pages in the data directory. */
static void start_zygotes(const config *cfg)
{
    kernelspec_start_zygotes(&(kernelspec_zygotes){.data_dir = cfg->data_dir,
                                                   .enabled = cfg->zygote,
                                                   .huge_code_pages = cfg->huge_code_pages,
                                                   .for_templates_with_files =
                                                       cfg->template_zygotes});
}

/* The APIs, then the server that routes to them. Returns the port it listens on. */
static int start_http(const config *cfg)
{
    channels_init((size_t)cfg->max_message_size);
    jupyter_init(&(jupyter_options){.list_kernels = cfg->list_kernels});
    v1_init();
    v1_ready_set_dispatch(routes_dispatch); /* a woken sandbox's held request goes round again */
    envd_access_init(cfg->token);
    return http_server_start(
        &(http_server_options){
            .ip = cfg->ip,
            .port = cfg->port,
            .base_url = cfg->base_url,
            .token = cfg->token,
            .max_body_size = (size_t)cfg->max_body_size,
            .max_connections = (unsigned)cfg->max_connections,
            .max_connections_per_ip = (unsigned)cfg->max_connections_per_ip,
            .streams_body = routes_streams_body,
            .admits = envd_access_admits,
            .cors = {.allow_origin = cfg->allow_origin,
                     .allow_headers = cfg->allow_headers,
                     .allow_methods = cfg->allow_methods,
                     .expose_headers = cfg->expose_headers,
                     .allow_credentials = cfg->allow_credentials,
                     .max_age = cfg->max_age},
        },
        routes_dispatch);
}

static void log_sandbox_settings(const config *cfg, const uid_block *uids)
{
    log_info(
        "sandboxes: cgroup %s, workspaces on %s, zygote %s, warm pool of %d, uids %u-%u (block %d)",
        cgroup_version_name(), cfg->workspace_fs, cfg->zygote ? "on" : "off", cfg->pool_size,
        (unsigned)uids->first, (unsigned)(uids->first + UID_BLOCK_SIZE - 1), uids->number);
    for (size_t i = 1; i < kernelspec_count(); i++) {
        const kernelspec *spec = kernelspec_at(i);
        if (spec->argv)
            log_info("kernelspec %s (%s): %s, warm pool of %d", spec->name, spec->language,
                     spec->resource_dir ? spec->resource_dir : "cellbox's own", spec->pool_size);
        else
            log_info("template %s: preloads '%s', warm pool of %d", spec->name, spec->preload,
                     spec->pool_size);
    }
}

/* The sandboxes end, or stay for the next daemon (SIGUSR2, or --keep-sandboxes); then the
   volume helper, the zygotes, cgroups, volumes and the server stop, and what the loop deferred is
   freed. */
static void shut_down_or_detach(void)
{
    template_build_abandon_all(); /* a build never outlives its daemon, detached or not */
    if (leave_sandboxes)
        manager_detach_all();
    else {
        manager_shutdown_all();
        volumes_unmount_all(); /* detached sandboxes still bind them: left for the next daemon */
    }
    reaper_wait_all();
    worker_stop(); /* a snapshot's copy under way ends before exit's handlers run */
    volume_worker_stop(); /* after the last removal was sent: it finishes them first */
    kernelspec_stop_zygotes();
    /* A detached sandbox keeps its own binds of its template's view: the next daemon mounts the
       views again. */
    templates_unmount_all();
    cgroup_shutdown();
    if (!leave_sandboxes) /* detached sandboxes keep their interfaces until the next start */
        network_shutdown();
    volume_shutdown();
    ports_stop();
    http_server_stop();
    loop_run_deferred();
}

/* One step per stage, in the order they depend on each other: nothing is made in the data
   directory before it is locked (claim_data_dir), sandboxes start only once the cgroups and the
   seccomp filter are ready, and the API serves only once the model and the zygotes are. */
int main(int argc, char **argv)
{
    heap_init();
    config cfg;
    config_load(&cfg, argc, argv);
    set_log_level(&cfg);
    check_memory_floor(&cfg);
    bool generated_token;
    settle_token(&cfg, &generated_token);
    set_descriptor_limits(&cfg);
    uid_block uids = claim_data_dir(&cfg);
    volume_kind workspace_kind = prepare_sandboxing(&cfg);
    prepare_network(&cfg, &uids);
    loop_init();
    watch_signals();
    start_network_resolver(&cfg, &uids);
    leave_sandboxes = cfg.keep_sandboxes;
    load_kernelspecs(&cfg);
    start_sandboxes(&cfg, workspace_kind, &uids);
    check_default_kernel(&cfg);
    start_zygotes(&cfg);
    int port = start_http(&cfg);
    ports_init(cfg.e2b_domain, port, cfg.token);
    print_banner(&cfg, port, generated_token);
    log_sandbox_settings(&cfg, &uids);

    loop_run();

    shut_down_or_detach();
    log_info("stopped");
    config_free(&cfg);
    return 0;
}
