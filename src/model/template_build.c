#include "model/template_build.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/buffer.h"
#include "common/clock.h"
#include "common/ids.h"
#include "common/log.h"
#include "common/loop.h"
#include "common/text.h"
#include "kernel/reaper.h"
#include "model/dockerfile.h"
#include "model/sandbox_pieces.h"
#include "model/template_files.h"
#include "model/template_plan.h"
#include "model/template_views.h"
#include "model/templates.h"
#include "sandbox/network.h"
#include "sandbox/sandbox.h"

#define OUTPUT_TAIL_BYTES 4096   /* of a failed step's output, repeated in the error event */
#define OUTPUT_CHUNK_BYTES 65536 /* one output event at most */
#define BUILD_PIDS 1024
#define BUILD_CPUS 2.0
#define BUILD_OPEN_FILES 4096
#define BUILD_TMP_BYTES (1LL << 30)
#define MAX_EGRESS_ENTRIES 256

/* One program running in a build sandbox: a RUN step's, or the preload check's. */
typedef struct build_sandbox {
    bool running;
    char layer_key[TEMPLATES_LAYER_KEY_MAX]; /* the layer being written */
    bool layer_begun;
    char layer_path[PATH_MAX];
    char view_dir[PATH_MAX];
    bool view_mounted;
    sandbox_pieces pieces;
    int network_slot; /* -1: none */
    pid_t pid;
    int pidfd;
    loop_watch pid_watch;
    int output_fd; /* stdout and stderr, one pipe */
    loop_watch output_watch;
    int ready_fd; /* the program waits for a line here: its network is in place */
    loop_timer_id timeout;
    bool timed_out;
    buffer tail;           /* the last OUTPUT_TAIL_BYTES of output */
    long long output_sent; /* bytes of output read (sent up to TEMPLATE_BUILD_OUTPUT_BYTES) */
} build_sandbox;

struct template_build {
    template_build_request request; /* strings and JSON below are the build's own copies */
    char *name, *dockerfile_text, *context_dir, *preload;
    dockerfile *file;
    build_plan *plan;
    template_build_event on_event;
    void *arg;
    int current; /* the step running or next */
    int cached_steps;
    int64_t started_ms, step_started_ms;
    bool checking_preload;
    build_sandbox box;
    bool over; /* the last event went, or the client went away */
    template_build *next;
};

static template_build *running_builds;

static int running_count(void)
{
    int count = 0;
    for (template_build *b = running_builds; b; b = b->next)
        count++;
    return count;
}

static template_build *running_build_named(const char *name)
{
    for (template_build *b = running_builds; b; b = b->next)
        if (strcmp(b->name, name) == 0)
            return b;
    return NULL;
}

static double seconds_since(int64_t started_ms)
{
    return (double)(clock_monotonic_ms() - started_ms) / 1000.0;
}

/* ---- events ---- */

static void emit(template_build *b, json_t *event, bool last)
{
    if (b->over) {
        json_decref(event);
        return;
    }
    b->over = last;
    b->on_event(b->arg, event, last);
}

static const build_step *current_step(const template_build *b)
{
    return b->current < b->plan->step_count ? &b->plan->steps[b->current] : NULL;
}

static void emit_step(template_build *b, bool cached)
{
    const dockerfile_instruction *instruction = current_step(b)->instruction;
    emit(b,
         json_pack("{s:s, s:i, s:i, s:i, s:o, s:b}", "type", "step", "step", b->current + 1,
                   "steps", b->plan->step_count, "line", instruction->line, "instruction",
                   text_json_string(instruction->text), "cached", cached),
         false);
}

static void emit_step_done(template_build *b)
{
    emit(b,
         json_pack("{s:s, s:i, s:f}", "type", "step_done", "step", b->current + 1, "seconds",
                   seconds_since(b->step_started_ms)),
         false);
}

static void free_build(void *arg)
{
    template_build *b = arg;
    buffer_free(&b->box.tail);
    if (b->context_dir) {
        /* the context is the caller's: it removes it */
    }
    template_plan_free(b->plan);
    dockerfile_free(b->file);
    json_decref(b->request.allow_out);
    json_decref(b->request.deny_out);
    json_decref(b->request.build_args);
    free(b->name);
    free(b->dockerfile_text);
    free(b->context_dir);
    free(b->preload);
    free(b);
}

static void forget_build(template_build *b)
{
    for (template_build **p = &running_builds; *p; p = &(*p)->next)
        if (*p == b) {
            *p = b->next;
            break;
        }
    loop_defer(free_build, b);
}

/* ---- the build sandbox ---- */

/* Gives back everything the step's sandbox holds: the process (killed), its watches, network
   slot, uid and cgroup, the view; the layer itself is the caller's to commit or discard. */
static void end_sandbox(build_sandbox *box)
{
    if (box->timeout)
        loop_timer_cancel(box->timeout);
    box->timeout = 0;
    if (box->output_fd >= 0) {
        loop_watch_remove(&box->output_watch);
        close(box->output_fd);
        box->output_fd = -1;
    }
    if (box->ready_fd >= 0) {
        close(box->ready_fd);
        box->ready_fd = -1;
    }
    if (box->pidfd >= 0) {
        loop_watch_remove(&box->pid_watch);
        syscall(SYS_pidfd_send_signal, box->pidfd, SIGKILL, NULL, 0);
        reaper_take(box->pidfd);
        box->pidfd = -1;
    }
    if (box->network_slot >= 0) {
        network_detach(box->network_slot);
        network_forget_names(box->pieces.id);
        box->network_slot = -1;
    }
    if (box->pieces.uid_slot >= 0 || box->pieces.cgroup || box->pieces.id[0])
        sandbox_pieces_release(&box->pieces, NULL, false); /* kills what is left in the cgroup */
    if (box->view_mounted)
        templates_unmount_build_view(box->view_dir);
    box->view_mounted = false;
    box->running = false;
}

static void discard_layer(build_sandbox *box)
{
    if (box->layer_begun)
        templates_layer_discard(box->layer_key);
    box->layer_begun = false;
}

/* What a daemon killed during a build left under DATA_DIR/templates/builds: its step's view,
   still mounted. Swept before this daemon's first build mounts one (its staged layer was removed
   by templates_init). */
static void sweep_dead_build_views(void)
{
    static bool swept;
    if (swept)
        return;
    swept = true;
    char builds[PATH_MAX];
    snprintf(builds, sizeof builds, "%.3000s/builds", template_views_root());
    DIR *dir = opendir(builds);
    struct dirent *entry;
    while (dir && (entry = readdir(dir)) != NULL) {
        if (entry->d_name[0] == '.')
            continue;
        char path[PATH_MAX + 300];
        snprintf(path, sizeof path, "%s/%s", builds, entry->d_name);
        log_warn("template builds: unmounting %s, which a stopped daemon's build left", path);
        templates_unmount_build_view(path);
    }
    if (dir)
        closedir(dir);
}

/* DATA_DIR/templates/builds/<random>: where a step's view is mounted. */
static void build_view_dir(char *out, size_t size)
{
    char random[17];
    id_random_hex(random, 8);
    snprintf(out, size, "%.3000s/builds/%s", template_views_root(), random);
}

static void on_output(void *owner, uint32_t events);
static void on_exit_of_step(void *owner, uint32_t events);
static void on_step_timeout(void *arg);

static int attach_network(template_build *b, char *why, size_t why_size)
{
    build_sandbox *box = &b->box;
    box->network_slot = network_attach(box->pid, box->pidfd, why, why_size);
    if (box->network_slot < 0)
        return -1;
    const char *allow[MAX_EGRESS_ENTRIES], *deny[MAX_EGRESS_ENTRIES];
    size_t allow_count = json_array_size(b->request.allow_out);
    size_t deny_count = json_array_size(b->request.deny_out);
    for (size_t i = 0; i < allow_count && i < MAX_EGRESS_ENTRIES; i++)
        allow[i] = json_string_value(json_array_get(b->request.allow_out, i));
    for (size_t i = 0; i < deny_count && i < MAX_EGRESS_ENTRIES; i++)
        deny[i] = json_string_value(json_array_get(b->request.deny_out, i));
    if (!allow_count && !deny_count)
        return 0;
    return network_set_policy(
        box->network_slot, box->pieces.id, allow,
        allow_count < MAX_EGRESS_ENTRIES ? allow_count : MAX_EGRESS_ENTRIES, deny,
        deny_count < MAX_EGRESS_ENTRIES ? deny_count : MAX_EGRESS_ENTRIES, why, why_size);
}

/* The program waits for the daemon's word on its stdin before it runs: by then its network
   interface and egress policy are in place (a pip that started earlier would find no route).
   `exec "$@"` keeps the program's argv exactly as the Dockerfile wrote it. */
static char **waiting_argv(char *const *argv)
{
    int count = 0;
    while (argv[count])
        count++;
    char **wrapped = calloc((size_t)count + 5, sizeof *wrapped);
    if (!wrapped)
        die("out of memory");
    wrapped[0] = "/bin/sh";
    wrapped[1] = "-c";
    wrapped[2] = "read -r cellbox_ready; exec \"$@\"";
    wrapped[3] = "sh";
    for (int i = 0; i < count; i++)
        wrapped[4 + i] = argv[i];
    return wrapped;
}

/* The step's identity and cgroup (sandbox_pieces.h: a uid of the block, a record the next daemon
   cleans up after), then its view over the layers beneath it with its own as the upper. */
static int prepare_sandbox(template_build *b, char *why, size_t why_size)
{
    build_sandbox *box = &b->box;
    char id[UUID_STRING_LENGTH + 1];
    id_uuid4(id);
    sandbox_limits limits = {
        .memory_bytes = TEMPLATE_BUILD_MEMORY_BYTES, .pids = BUILD_PIDS, .cpus = BUILD_CPUS};
    if (sandbox_pieces_claim_identity(id, &box->pieces, why, why_size) < 0 ||
        sandbox_pieces_create_cgroup(id, &limits, &box->pieces, why, why_size) < 0)
        return -1;
    uid_t uid = sandbox_pieces_uid(&box->pieces);
    log_info("template build %s: step %d runs in build sandbox %s (uid %d)", b->name,
             b->current + 1, id, (int)uid);
    const char *lower[TEMPLATES_MAX_LAYERS];
    int lower_count = b->checking_preload ? b->plan->layer_count : current_step(b)->lower_count;
    for (int i = 0; i < lower_count; i++)
        lower[i] = b->plan->layers[i];
    build_view_dir(box->view_dir, sizeof box->view_dir);
    if (templates_mount_build_view(b->plan->base_template, lower, lower_count, box->layer_key,
                                   (const char *const *)b->plan->extra_dirs, uid, uid,
                                   box->view_dir, why, why_size) < 0)
        return -1;
    box->view_mounted = true;
    return 0;
}

/* Starts the program in the sandbox: stdin the "go" pipe, stdout and stderr one pipe. */
static int spawn_program(template_build *b, char *const *argv, char *const *envp, const char *cwd,
                         char *why, size_t why_size)
{
    build_sandbox *box = &b->box;
    uid_t uid = sandbox_pieces_uid(&box->pieces);
    char workspace[PATH_MAX + 16];
    snprintf(workspace, sizeof workspace, "%s/home/user", box->view_dir);
    kernel_sandbox base = {0};
    sandbox_pieces_base(&base);
    rootfs_template view = {.view = box->view_dir, .writable = true};
    int output[2], ready[2];
    if (pipe2(output, O_CLOEXEC) < 0) {
        snprintf(why, why_size, "cannot make the step's pipes: %s", strerror(errno));
        return -1;
    }
    if (pipe2(ready, O_CLOEXEC) < 0) {
        close(output[0]);
        close(output[1]);
        snprintf(why, why_size, "cannot make the step's pipes: %s", strerror(errno));
        return -1;
    }
    char **wrapped = waiting_argv(argv);
    sandbox_spec spec = {
        .root = {.mount_point = base.root_mount_point,
                 .workspace = workspace,
                 .runtime_dir = base.runtime_dir,
                 .uid = uid,
                 .gid = uid,
                 .tmp_bytes = BUILD_TMP_BYTES,
                 .nameserver = b->request.network ? network_gateway() : NULL,
                 .template = &view},
        .network = b->request.network,
        .open_files = BUILD_OPEN_FILES,
        .file_size = TEMPLATE_BUILD_FILE_BYTES,
        .argv = wrapped,
        .envp = envp,
        .fds = {ready[0], output[1], output[1], -1},
        .cwd = cwd,
    };
    cgroup_procs_files(box->pieces.cgroup, spec.cgroup_procs, SANDBOX_MAX_CGROUP_FILES);
    spec.memory_cgroup_procs = cgroup_memory_procs_file(box->pieces.cgroup);
    box->pid = sandbox_start(&spec, &box->pidfd, why, why_size);
    free(wrapped);
    close(output[1]);
    close(ready[0]);
    box->output_fd = output[0];
    box->ready_fd = ready[1];
    if (box->pid < 0) {
        box->pidfd = -1;
        return -1;
    }
    fcntl(box->output_fd, F_SETFL, O_NONBLOCK);
    loop_watch_add(&box->output_watch, box->output_fd, EPOLLIN, on_output, b);
    loop_watch_add(&box->pid_watch, box->pidfd, EPOLLIN, on_exit_of_step, b);
    box->running = true;
    return 0;
}

/* A step's program, in this order: its sandbox's pieces and view, the program (waiting), its
   network and egress lists, its time limit, then the word to go. */
static int start_program(template_build *b, char *const *argv, char *const *envp, const char *cwd,
                         char *why, size_t why_size)
{
    build_sandbox *box = &b->box;
    if (prepare_sandbox(b, why, why_size) < 0 ||
        spawn_program(b, argv, envp, cwd, why, why_size) < 0 ||
        (b->request.network && attach_network(b, why, why_size) < 0))
        return -1;
    int timeout_s = b->request.step_timeout_seconds ? b->request.step_timeout_seconds
                                                    : TEMPLATE_BUILD_STEP_TIMEOUT_S;
    box->timeout = loop_timer_add((int64_t)timeout_s * 1000, on_step_timeout, b);
    /* Go: the program reads its line, then stdin is at its end, as /dev/null would be. */
    if (write(box->ready_fd, "\n", 1) != 1)
        log_warn("template build %s: cannot start the step: %s", b->name, strerror(errno));
    close(box->ready_fd);
    box->ready_fd = -1;
    return 0;
}

/* ---- ending ---- */

static void fail_build(template_build *b, const char *message, int exit_code)
{
    const build_step *step = current_step(b);
    json_t *event =
        json_pack("{s:s, s:i, s:i, s:o, s:o, s:o}", "type", "error", "step", b->current + 1, "line",
                  step ? step->instruction->line : 0, "instruction",
                  text_json_string(step ? step->instruction->text : "preload check"), "message",
                  text_json_string(message), "output",
                  text_json_stringn(buffer_head(&b->box.tail) ? buffer_head(&b->box.tail) : "",
                                    buffer_size(&b->box.tail)));
    if (exit_code >= 0)
        json_object_set_new(event, "exit_code", json_integer(exit_code));
    end_sandbox(&b->box);
    discard_layer(&b->box);
    log_info("template build %s failed: %s", b->name, message);
    forget_build(b);
    emit(b, event, true);
}

static void register_template(template_build *b)
{
    build_plan *plan = b->plan;
    template_definition definition = {.name = b->name,
                                      .from = plan->from,
                                      .layer_count = plan->layer_count,
                                      .env_count = plan->env_count,
                                      .workdir = plan->workdir,
                                      .user = plan->user,
                                      .preload = plan->preload,
                                      .pool_size = plan->pool_size,
                                      .kind = "dockerfile",
                                      .dockerfile = b->dockerfile_text,
                                      .build_seconds = seconds_since(b->started_ms)};
    memcpy(definition.layers, plan->layers, sizeof definition.layers);
    for (int i = 0; i < plan->env_count; i++)
        definition.env[i] = plan->env[i];
    failure_kind failure;
    char why[1024];
    if (templates_register(&definition, b->request.replace, &failure, why, sizeof why) < 0) {
        b->current = plan->step_count;
        fail_build(b, why, -1);
        return;
    }
    json_t *model = templates_model(b->name);
    json_t *event =
        json_pack("{s:s, s:o, s:f, s:i}", "type", "done", "template", model ? model : json_null(),
                  "seconds", seconds_since(b->started_ms), "cached_steps", b->cached_steps);
    log_info("template %s built in %.1f s (%d steps cached)", b->name, seconds_since(b->started_ms),
             b->cached_steps);
    forget_build(b);
    emit(b, event, true);
}

/* ---- steps ---- */

static void run_steps(void *arg);

/* What a step that failed is told, with the limit it hit or what to do. */
static void describe_failure(template_build *b, int exit_code, int signal_number, char *out,
                             size_t size)
{
    cgroup_counters counters = {0};
    if (b->box.pieces.cgroup)
        cgroup_read_limit_events(b->box.pieces.cgroup, &counters);
    const build_step *step = current_step(b);
    const char *text = step ? step->instruction->text : "";
    if (b->box.timed_out) {
        int timeout_s = b->request.step_timeout_seconds ? b->request.step_timeout_seconds
                                                        : TEMPLATE_BUILD_STEP_TIMEOUT_S;
        snprintf(out, size,
                 "the step ran past its time limit of %d s and was stopped: make it shorter, or "
                 "ask for more with step_timeout_s",
                 timeout_s);
    } else if (counters.oom_kills > 0) {
        snprintf(out, size, "the step ran out of its memory limit of %lld GiB and was killed",
                 TEMPLATE_BUILD_MEMORY_BYTES >> 30);
    } else if (signal_number == SIGXFSZ || exit_code == 128 + SIGXFSZ) {
        snprintf(out, size, "the step wrote a file larger than the limit of %lld GiB",
                 TEMPLATE_BUILD_FILE_BYTES >> 30);
    } else if (strstr(text, "apt-get") || strstr(text, "apt install") ||
               strstr(text, "apt-get install")) {
        snprintf(out, size,
                 "the step exited with status %d: apt-get cannot run in a cellbox build (steps "
                 "run as the sandbox user, never root): install Debian packages on the host (the "
                 "base of every template), or use pip or npm in the RUN",
                 exit_code);
    } else if (exit_code == SANDBOX_SETUP_FAILED) {
        snprintf(out, size, "the build sandbox could not be set up (status 125): see the output");
    } else if (signal_number) {
        snprintf(out, size, "the step was killed by signal %d", signal_number);
    } else {
        snprintf(out, size, "the step exited with status %d", exit_code);
    }
}

static void keep_tail(buffer *tail, const char *data, size_t length)
{
    buffer_append(tail, data, length);
    if (buffer_size(tail) > OUTPUT_TAIL_BYTES)
        buffer_consume(tail, buffer_size(tail) - OUTPUT_TAIL_BYTES);
}

/* One output event; `length` 0: `text` is a C string. */
static void emit_output(template_build *b, const char *text, size_t length)
{
    emit(b,
         json_pack("{s:s, s:i, s:o}", "type", "output", "step", b->current + 1, "text",
                   text_json_stringn(text, length ? length : strlen(text))),
         false);
}

static void read_output(template_build *b)
{
    char chunk[OUTPUT_CHUNK_BYTES];
    for (int reads = 0; reads < 64 && b->box.output_fd >= 0; reads++) {
        ssize_t got = read(b->box.output_fd, chunk, sizeof chunk);
        if (got <= 0) {
            if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
                loop_watch_remove(&b->box.output_watch);
                close(b->box.output_fd);
                b->box.output_fd = -1;
            }
            return;
        }
        keep_tail(&b->box.tail, chunk, (size_t)got);
        if (b->checking_preload)
            continue;
        /* The stream to the client is not held back by a slow reader, so what it may queue is
           bounded here: past the limit a step's output is only kept for its error's tail. */
        long long before = b->box.output_sent;
        b->box.output_sent += got;
        if (before < TEMPLATE_BUILD_OUTPUT_BYTES)
            emit_output(b, chunk, (size_t)got);
        if (before < TEMPLATE_BUILD_OUTPUT_BYTES &&
            b->box.output_sent >= TEMPLATE_BUILD_OUTPUT_BYTES)
            emit_output(b, "\n[cellbox: this step's output past 8 MiB is not shown]\n", 0);
    }
}

static void on_output(void *owner, uint32_t events)
{
    (void)events;
    read_output(owner);
}

static void on_step_timeout(void *arg)
{
    template_build *b = arg;
    b->box.timeout = 0;
    b->box.timed_out = true;
    if (b->box.pieces.cgroup)
        cgroup_kill_all(b->box.pieces.cgroup);
    if (b->box.pidfd >= 0)
        syscall(SYS_pidfd_send_signal, b->box.pidfd, SIGKILL, NULL, 0);
}

static int commit_layer(template_build *b, char *why, size_t why_size)
{
    if (template_files_seal_layer(b->box.layer_path, why, why_size) < 0 ||
        templates_layer_commit(b->box.layer_key, why, why_size) < 0)
        return -1;
    b->box.layer_begun = false;
    return 0;
}

static void on_exit_of_step(void *owner, uint32_t events)
{
    (void)events;
    template_build *b = owner;
    siginfo_t info = {0};
    if (waitid(P_PIDFD, (id_t)b->box.pidfd, &info, WEXITED | WNOHANG) < 0 || info.si_pid == 0)
        return;
    loop_watch_remove(&b->box.pid_watch);
    close(b->box.pidfd);
    b->box.pidfd = -1;
    read_output(b);
    /* The supervisor exits with the program's status, or 128+N when a signal N ended it. */
    int exit_code = info.si_code == CLD_EXITED ? info.si_status : 128 + info.si_status;
    int signal_number = info.si_code == CLD_EXITED ? 0 : info.si_status;
    if (info.si_code == CLD_EXITED) {
        sandbox_decode_status(info.si_status, &exit_code, &signal_number);
        if (signal_number)
            exit_code = 128 + signal_number; /* as a shell reports it */
    }
    char why[1024];
    if (exit_code != 0 || b->box.timed_out) {
        describe_failure(b, exit_code, signal_number, why, sizeof why);
        fail_build(b, why, exit_code);
        return;
    }
    end_sandbox(&b->box);
    if (b->checking_preload) {
        discard_layer(&b->box);
        register_template(b);
        return;
    }
    if (commit_layer(b, why, sizeof why) < 0) {
        fail_build(b, why, -1);
        return;
    }
    emit_step_done(b);
    b->current++;
    run_steps(b);
}

static int begin_layer(template_build *b, const char *key, char *why, size_t why_size)
{
    snprintf(b->box.layer_key, sizeof b->box.layer_key, "%s", key);
    if (templates_layer_begin(key, b->box.layer_path, sizeof b->box.layer_path, why, why_size) < 0)
        return -1;
    b->box.layer_begun = true;
    buffer_truncate(&b->box.tail, 0);
    b->box.output_sent = 0;
    b->box.timed_out = false;
    return 0;
}

/* A layer made on the host, with no sandbox: COPY/ADD's files from the context, or the
   directory a WORKDIR names. */
static int copy_step(template_build *b, const build_step *step, char *why, size_t why_size)
{
    if (begin_layer(b, step->key, why, why_size) < 0)
        return -1;
    if (step->instruction->kind == DOCKERFILE_WORKDIR)
        return template_files_make_directory(b->box.layer_path, step->destination, why, why_size) <
                       0
                   ? -1
                   : commit_layer(b, why, why_size);
    if (template_files_copy(b->context_dir, step->sources, step->source_count, step->destination,
                            step->into_directory, step->instruction->kind == DOCKERFILE_ADD,
                            b->box.layer_path, why, why_size) < 0)
        return -1;
    if (step->instruction->chown_ignored)
        emit_output(b,
                    "note: --chown/--chmod ignored: a template's files belong to root, readable "
                    "by the sandbox user\n",
                    0);
    return commit_layer(b, why, why_size);
}

/* The last check: a sandbox over the final layers imports every preload module. */
static void check_preload(template_build *b)
{
    char why[1024], key[TEMPLATE_PLAN_KEY_HEX + 1];
    b->checking_preload = true;
    id_random_hex(key, TEMPLATE_PLAN_KEY_HEX / 2);
    static const char script[] = "import importlib, sys\n"
                                 "for name in sys.argv[1].split(','):\n"
                                 "    name = name.strip()\n"
                                 "    if not name:\n"
                                 "        continue\n"
                                 "    try:\n"
                                 "        importlib.import_module(name)\n"
                                 "    except BaseException as error:\n"
                                 "        print(f'preload: module {name} cannot be imported: "
                                 "{type(error).__name__}: {error}')\n"
                                 "        sys.exit(1)\n";
    char *argv[] = {"/usr/bin/python3", "-c", (char *)script, b->plan->preload, NULL};
    char *envp[] = {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/home/user", "LANG=C.UTF-8", NULL};
    if (begin_layer(b, key, why, sizeof why) < 0 ||
        start_program(b, argv, envp, "/home/user", why, sizeof why) < 0)
        fail_build(b, why, -1);
}

/* Runs the steps from b->current on until one has to wait (a RUN) or the build ends. */
static void run_steps(void *arg)
{
    template_build *b = arg;
    char why[1024];
    if (b->over)
        return; /* abandoned while this call waited in the loop */
    for (; b->current < b->plan->step_count; b->current++) {
        const build_step *step = current_step(b);
        b->step_started_ms = clock_monotonic_ms();
        bool cached = !step->has_layer || templates_layer_exists(step->key);
        emit_step(b, cached);
        if (cached) {
            b->cached_steps += step->has_layer;
            emit_step_done(b);
            continue;
        }
        if (step->instruction->kind != DOCKERFILE_RUN) {
            if (copy_step(b, step, why, sizeof why) < 0) {
                fail_build(b, why, -1);
                return;
            }
            emit_step_done(b);
            continue;
        }
        if (begin_layer(b, step->key, why, sizeof why) < 0 ||
            start_program(b, step->argv, step->env, step->workdir, why, sizeof why) < 0)
            fail_build(b, why, -1);
        return; /* on_exit_of_step goes on */
    }
    if (b->plan->preload[0])
        check_preload(b);
    else
        register_template(b);
}

/* ---- start and stop ---- */

static char *copy_or_null(const char *text)
{
    if (!text)
        return NULL;
    char *copy = strdup(text);
    if (!copy)
        die("out of memory");
    return copy;
}

static int check_request(const template_build_request *request, failure_kind *failure, char *why,
                         size_t why_size)
{
    if (running_build_named(request->name)) {
        *failure = FAILURE_CONFLICT;
        snprintf(why, why_size,
                 "a build of template %s is running: wait for it to end (one build per name)",
                 request->name);
        return -1;
    }
    if (running_count() >= TEMPLATE_BUILD_MAX_RUNNING) {
        *failure = FAILURE_EXHAUSTED;
        snprintf(why, why_size,
                 "%d template builds are running, the most at once: try again when one ends",
                 TEMPLATE_BUILD_MAX_RUNNING);
        return -1;
    }
    if (request->network && !network_ready()) {
        *failure = FAILURE_FORBIDDEN;
        snprintf(why, why_size,
                 "this daemon gives sandboxes no network (start cellboxd with --allow-network), "
                 "so a build cannot have one: leave out \"network\"");
        return -1;
    }
    if ((json_array_size(request->allow_out) > MAX_EGRESS_ENTRIES) ||
        (json_array_size(request->deny_out) > MAX_EGRESS_ENTRIES)) {
        *failure = FAILURE_INVALID;
        snprintf(why, why_size, "network: at most %d entries in allowOut and in denyOut",
                 MAX_EGRESS_ENTRIES);
        return -1;
    }
    return templates_check_name(request->name, request->replace, failure, why, why_size);
}

template_build *template_build_start(const template_build_request *request,
                                     template_build_event on_event, void *arg,
                                     failure_kind *failure, char *why, size_t why_size)
{
    if (check_request(request, failure, why, why_size) < 0)
        return NULL;
    sweep_dead_build_views();
    *failure = FAILURE_INVALID;
    dockerfile *file = dockerfile_parse(request->dockerfile, why, why_size);
    if (!file)
        return NULL;
    build_plan *plan = template_plan_make(file, request, failure, why, why_size);
    if (!plan) {
        dockerfile_free(file);
        return NULL;
    }
    template_build *b = calloc(1, sizeof *b);
    if (!b)
        die("out of memory");
    b->request = *request;
    b->name = copy_or_null(request->name);
    b->dockerfile_text = copy_or_null(request->dockerfile);
    b->context_dir = copy_or_null(request->context_dir);
    b->preload = copy_or_null(request->preload);
    b->request.name = b->name;
    b->request.dockerfile = b->dockerfile_text;
    b->request.context_dir = b->context_dir;
    b->request.preload = b->preload;
    b->request.allow_out = json_incref(request->allow_out);
    b->request.deny_out = json_incref(request->deny_out);
    b->request.build_args = json_incref(request->build_args);
    b->file = file;
    b->plan = plan;
    b->on_event = on_event;
    b->arg = arg;
    b->started_ms = clock_monotonic_ms();
    b->box = (build_sandbox){.pieces = SANDBOX_PIECES_NONE,
                             .network_slot = -1,
                             .pidfd = -1,
                             .output_fd = -1,
                             .ready_fd = -1};
    b->next = running_builds;
    running_builds = b;
    log_info("template build %s: %d steps from %s", b->name, plan->step_count, plan->from);
    loop_defer(run_steps, b);
    return b;
}

void template_build_abandon(template_build *build)
{
    if (!build || build->over)
        return;
    build->over = true;
    log_info("template build %s abandoned: its client went away", build->name);
    end_sandbox(&build->box);
    discard_layer(&build->box);
    /* A run_steps already deferred must not go on: it finds the build over. */
    build->current = build->plan->step_count;
    build->plan->preload[0] = '\0';
    forget_build(build);
}

void template_build_abandon_all(void)
{
    /* Each build's client is told, so its stream ends before the server stops. */
    while (running_builds)
        fail_build(running_builds,
                   "cellboxd is stopping: the build was stopped and left nothing behind; run it "
                   "again once the daemon is back (finished steps are reused)",
                   -1);
}
