/* zygote — one preloaded interpreter per template that becomes every new sandbox.
 *
 *   cellbox-kernel --zygote --control-fd=N --python-dir=HOST_DIR --inside-python-dir=DIR
 *                  [--preload=numpy,pandas,matplotlib,IPython] [--home-cgroup=CGROUP_PROCS]
 *                  [--huge-code]
 *
 * Runs as root outside any sandbox and never runs user code. It starts Python, imports the
 * preload list, says {"ready": true} on the control socket (SOCK_SEQPACKET), then serves spawn
 * requests: a JSON sandbox description with four fds (SCM_RIGHTS: stdin, stdout, stderr,
 * channel), and a fifth, a process image, when the request says "restore": true (then the clone
 * becomes that image's process instead of a new kernel: restorer.h). For each it clones itself into new namespaces with CLONE_PARENT — so the sandbox is
 * the daemon's child and the daemon waits for it as for any kernel — and answers {"pid": N}.
 * The clone shares the zygote's memory until it execs (vfork-like, so it costs no copy of the
 * zygote's page tables), enters the sandbox exactly as an exec'd kernel does (sandbox.c), forks
 * the kernel and becomes the supervisor; the kernel reseeds its random generators and serves: no
 * interpreter start and no imports per sandbox, the preloaded pages shared copy-on-write, but for
 * the few thousand every kernel writes at once: those are pinned (hot_pages.h), so the kernel's
 * fork copies them. With --huge-code, the libraries' code a kernel runs is moved onto 2 MiB pages
 * (huge_code.h). */
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sched.h>
#include <string.h>
#include <sys/personality.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/hot_pages.h"
#include "runtime/huge_code.h"
#include "runtime/kernel_runtime.h"
#include "runtime/restorer.h"
#include "sandbox/sandbox.h"
#include "sandbox/seccomp_filter.h"

#define SPAWN_FDS 4
#define RESTORE_SPAWN_FDS 5 /* ... and the process image to restore */
#define MAX_REQUEST (256 << 10)
#define PROBE_TIMEOUT_MS 30000

typedef struct spawn_request {
    json_t *json;          /* owns the strings the spec points into */
    sandbox_spec spec;
    rootfs_volumes volumes; /* the spec's root points here */
    rootfs_template template; /* and here: the template's view, as kernel/zygote.c sent it */
    int fds[RESTORE_SPAWN_FDS];
    int fd_count;
    bool restore;          /* fds[4] is a process image: restore it instead of a new kernel */
    size_t length;         /* bytes received into the buffer */
} spawn_request;

/* jansson's memory in the zygote: one arena, emptied and wiped after each request. Every
   kernel inherits the zygote's memory, so what one request carried must be gone before the next
   clone (requests hold no secrets: a kernel's variables reach it over its own channel, but they
   are wiped anyway). And a request's allocations then write the same few pages every time,
   rather than malloc's free lists all over the heap: each page the zygote writes after a fork
   is a copy-on-write fault (~20 µs in a VM). What does not fit comes from malloc, wiped when
   freed. */
#define ARENA_SIZE (1 << 20) /* untouched pages cost nothing */
static _Alignas(16) unsigned char arena[ARENA_SIZE];
static size_t arena_used;

static void *arena_alloc(size_t size)
{
    size_t rounded = (size + 15) & ~(size_t)15;
    if (rounded >= size && rounded <= ARENA_SIZE - arena_used) {
        void *pointer = arena + arena_used;
        arena_used += rounded;
        return pointer;
    }
    return malloc(size);
}

static void arena_free(void *pointer)
{
    if (!pointer || ((unsigned char *)pointer >= arena && (unsigned char *)pointer < arena + ARENA_SIZE))
        return; /* arena memory goes all at once: arena_empty() */
    explicit_bzero(pointer, malloc_usable_size(pointer));
    free(pointer);
}

/* Only when no JSON value is alive. */
static void arena_empty(void)
{
    explicit_bzero(arena, arena_used);
    arena_used = 0;
}

static const char *option(int argc, char **argv, const char *name)
{
    size_t length = strlen(name);
    for (int i = 1; i < argc; i++)
        if (strncmp(argv[i], name, length) == 0 && argv[i][length] == '=')
            return argv[i] + length + 1;
    return NULL;
}

static bool has_flag(int argc, char **argv, const char *name)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], name) == 0)
            return true;
    return false;
}

static void send_json(int control_fd, json_t *message)
{
    char small[4096];
    size_t size = json_dumpb(message, small, sizeof small, JSON_COMPACT);
    char *text = size <= sizeof small ? small : malloc(size);
    if (text && text != small)
        size = json_dumpb(message, text, size, JSON_COMPACT);
    json_decref(message);
    if (text && size > 0 && send(control_fd, text, size, MSG_NOSIGNAL) < 0)
        fprintf(stderr, "cellbox-zygote: cannot answer the daemon: %s\n", strerror(errno));
    if (text != small)
        free(text);
}

/* Calls cellbox_kernel.zygote.<function>(args...) ; returns a new reference or NULL. */
static PyObject *call_zygote_module(const char *function, const char *format, ...)
{
    PyObject *module = PyImport_ImportModule("cellbox_kernel.zygote");
    if (!module)
        return NULL;
    PyObject *callable = PyObject_GetAttrString(module, function);
    Py_DECREF(module);
    if (!callable)
        return NULL;
    va_list ap;
    va_start(ap, format);
    PyObject *args = Py_VaBuildValue(format, ap);
    va_end(ap);
    PyObject *result = args ? PyObject_CallObject(callable, args) : NULL;
    Py_XDECREF(args);
    Py_DECREF(callable);
    return result;
}

static PyObject *split_list(const char *text)
{
    PyObject *list = PyList_New(0);
    char *copy = strdup(text ? text : "");
    for (char *save = NULL, *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        PyObject *name = PyUnicode_FromString(item);
        PyList_Append(list, name);
        Py_DECREF(name);
    }
    free(copy);
    return list;
}

/* Imports everything once; returns the ready message for the daemon. */
static json_t *preload(const char *modules, const char *inside_python_dir)
{
    PyObject *names = split_list(modules);
    PyObject *failed = call_zygote_module("preload", "(Os)", names, inside_python_dir);
    Py_DECREF(names);
    json_t *ready = json_pack("{s:b, s:[]}", "ready", 1, "failed");
    if (!failed) {
        PyErr_Print();
        json_object_set_new(ready, "ready", json_false());
        return ready;
    }
    for (Py_ssize_t i = 0; i < PyList_Size(failed); i++)
        json_array_append_new(json_object_get(ready, "failed"),
                              json_string(PyUnicode_AsUTF8(PyList_GetItem(failed, i))));
    Py_DECREF(failed);
    PyObject *threads = call_zygote_module("threads_alive", "()");
    long count = threads ? PyLong_AsLong(threads) : -1;
    Py_XDECREF(threads);
    json_object_set_new(ready, "threads", json_integer(count));
    if (count != 1) /* a fork keeps only this thread: others' locks would stay held forever */
        json_object_set_new(ready, "ready", json_false());
    return ready;
}

static void close_fds(int *fds, int count)
{
    for (int i = 0; i < count; i++)
        if (fds[i] >= 0)
            close(fds[i]);
}

/* Reads one request: the JSON and exactly four descriptors (five for a restore). 0 on EOF, -1
   on a bad request (answered), 1 when `request` is filled. */
static int receive_request(int control_fd, char *buffer, spawn_request *request)
{
    char control[CMSG_SPACE(sizeof(int) * RESTORE_SPAWN_FDS)];
    struct iovec iov = {.iov_base = buffer, .iov_len = MAX_REQUEST - 1};
    struct msghdr header = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control,
                            .msg_controllen = sizeof control};
    ssize_t n;
    do
        n = recvmsg(control_fd, &header, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    if (n <= 0)
        return 0;
    request->length = (size_t)n;
    buffer[n] = '\0';
    for (int i = 0; i < RESTORE_SPAWN_FDS; i++)
        request->fds[i] = -1;
    struct cmsghdr *cmsg = CMSG_FIRSTHDR(&header);
    int received = 0;
    if (cmsg && cmsg->cmsg_level == SOL_SOCKET && cmsg->cmsg_type == SCM_RIGHTS) {
        received = (int)((cmsg->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        if (received > RESTORE_SPAWN_FDS)
            received = RESTORE_SPAWN_FDS;
        memcpy(request->fds, CMSG_DATA(cmsg), sizeof(int) * (size_t)received);
    }
    request->fd_count = received;
    json_error_t error;
    request->json = json_loads(buffer, 0, &error);
    request->restore = json_is_true(json_object_get(request->json, "restore"));
    int wanted = request->restore ? RESTORE_SPAWN_FDS : SPAWN_FDS;
    if (received != wanted || !json_is_object(request->json)) {
        close_fds(request->fds, received);
        json_decref(request->json);
        send_json(control_fd, json_pack("{s:s}", "error", "a spawn request needs a JSON object and 4 fds "
                                                         "(5 with \"restore\": the image)"));
        return -1;
    }
    return 1;
}

static const char *string_field(json_t *object, const char *name)
{
    const char *value = json_string_value(json_object_get(object, name));
    return value ? value : "";
}

static const char *string_field_at(json_t *array, size_t index)
{
    const char *value = json_string_value(json_array_get(array, index));
    return value ? value : "";
}

/* [[name, host, path], ...] as kernel/zygote.c sends them. */
static void read_volumes(json_t *list, rootfs_volumes *volumes)
{
    memset(volumes, 0, sizeof *volumes);
    for (size_t i = 0; i < json_array_size(list) && i < ROOTFS_MAX_VOLUMES; i++) {
        json_t *entry = json_array_get(list, i);
        rootfs_volume *v = &volumes->mount[volumes->count++];
        snprintf(v->name, sizeof v->name, "%s", string_field_at(entry, 0));
        snprintf(v->host, sizeof v->host, "%s", string_field_at(entry, 1));
        snprintf(v->path, sizeof v->path, "%s", string_field_at(entry, 2));
    }
}

static void build_spec(spawn_request *request)
{
    json_t *j = request->json;
    sandbox_spec *spec = &request->spec;
    memset(spec, 0, sizeof *spec);
    spec->root.mount_point = string_field(j, "root_mount_point");
    spec->root.workspace = string_field(j, "workspace");
    spec->root.runtime_dir = string_field(j, "runtime_dir");
    spec->root.uid = spec->root.gid = (uid_t)json_integer_value(json_object_get(j, "uid"));
    spec->root.tmp_bytes = json_integer_value(json_object_get(j, "tmp_bytes"));
    spec->network = json_is_true(json_object_get(j, "network"));
    spec->root.nameserver = string_field(j, "nameserver");
    spec->open_files = (int)json_integer_value(json_object_get(j, "open_files"));
    spec->file_size = json_integer_value(json_object_get(j, "file_size"));
    json_t *procs = json_object_get(j, "cgroup_procs");
    for (size_t i = 0; i < json_array_size(procs) && i < SANDBOX_MAX_CGROUP_FILES; i++)
        spec->cgroup_procs[i] = json_string_value(json_array_get(procs, i));
    spec->memory_cgroup_procs = json_string_value(json_object_get(j, "memory_cgroup_procs"));
    read_volumes(json_object_get(j, "volumes"), &request->volumes);
    spec->root.volumes = &request->volumes;
    /* The same view the zygote itself runs in (kernel/zygote.c), bound again by rootfs_enter so
       that a clone's root is the one an exec'd kernel of this template gets. */
    request->template = (rootfs_template){
        .view = json_string_value(json_object_get(j, "template_view"))};
    spec->root.template = request->template.view ? &request->template : NULL;
    memcpy(spec->fds, request->fds, sizeof spec->fds);
    spec->image_fd = request->restore ? request->fds[4] : 0;
}

/* The pages a kernel's start writes, learned from the probe (learn_from_probe): pinned, so that
   the fork of each new kernel copies them, or else copied in bulk by the kernel itself. */
static hot_pages kernel_hot_pages;
static bool hot_pages_pinned;
/* The windows of code the probe ran (huge_code.h), moved onto huge pages once it is gone. */
static huge_code kernel_code;

/* Linux charges the pages a fork copies to the memory cgroup of the process that owns the memory
   being forked. pid 1 forks the kernel from the zygote's memory, so the pinned pages, copied at
   that fork, would count for the zygote's group (the daemon's), not against the sandbox's memory
   limit. So the zygote stands in the sandbox's memory group while it clones it (it is blocked
   meanwhile, and what it and pid 1 write on the way is pinned: see add_stack_tops), then goes
   back to `home_cgroup` (its cgroup.procs file). */
static int home_cgroup = -1;

static bool enter_memory_cgroup(const char *procs_file)
{
    if (!hot_pages_pinned || !procs_file)
        return false;
    int fd = open(procs_file, O_WRONLY | O_CLOEXEC);
    bool entered = fd >= 0 && write(fd, "0", 1) == 1; /* "0": the writing process */
    if (fd >= 0)
        close(fd);
    return entered;
}

/* false: the zygote is still in the sandbox's group (the caller must not go on serving). */
static bool leave_memory_cgroup(void)
{
    return write(home_cgroup, "0", 1) == 1;
}

/* In a new kernel process (a fork of the zygote's memory): Python's after-fork work, then
   after_fork() with the kernel's environment ("NAME=value" strings), then serve on fd 3. */
static void __attribute__((noreturn)) run_kernel(json_t *env, const char *kernel_id)
{
    if (!hot_pages_pinned)
        hot_pages_copy(&kernel_hot_pages);
    PyOS_AfterFork_Child();
    PyObject *environment = PyList_New(0);
    for (size_t i = 0; i < json_array_size(env); i++) {
        PyObject *entry = PyUnicode_FromString(json_string_value(json_array_get(env, i)));
        PyList_Append(environment, entry);
        Py_DECREF(entry);
    }
    PyObject *done = call_zygote_module("after_fork", "(Os)", environment, kernel_id);
    Py_DECREF(environment);
    if (!done) {
        PyErr_Print();
        _exit(1);
    }
    Py_DECREF(done);
    int status = kernel_python_serve(3);
    fflush(NULL);
    _exit(status);
}

/* In the clone (pid 1, still in the zygote's memory: see sandbox_clone_sharing_memory): enter
   the sandbox, fork the kernel under the supervisor; in the kernel, serve. */
/* The daemon's mount namespace (--host-mount-namespace-fd), for the zygote of a template with a
   view: the zygote runs in a namespace of its own where /usr is the template's, made before the
   daemon mounted the new sandbox's workspace, so a clone builds its root from a fresh copy of
   the daemon's namespace instead, binding the same view (rootfs_template). -1: the zygote is in
   the daemon's namespace already. */
static int host_mount_namespace = -1;

static void enter_host_mount_namespace(void)
{
    if (host_mount_namespace < 0)
        return;
    if (setns(host_mount_namespace, CLONE_NEWNS) < 0 || unshare(CLONE_NEWNS) < 0) {
        dprintf(2, SANDBOX_SETUP_FAILED_PREFIX "cannot enter the daemon's mount namespace: %s\n",
                strerror(errno));
        _exit(SANDBOX_SETUP_FAILED);
    }
}

static int become_kernel(void *argument)
{
    spawn_request *request = argument;
    enter_host_mount_namespace();
    /* pid 1 runs only C and then execs cellbox-init: Python's after-fork work (its hooks, its
       copy-on-write faults: ~8 ms) is done once, in the kernel process, which holds the
       interpreter exactly as the zygote left it at PyOS_BeforeFork(). */
    sandbox_enter(&request->spec);
    sandbox_supervise(); /* returns in the kernel process: a plain fork(), its own memory */
    if (request->restore) /* locked down already: uid, seccomp, Landlock, limits */
        restorer_run(RESTORER_IMAGE_FD);
    run_kernel(json_object_get(request->json, "env"), string_field(request->json, "kernel_id"));
}

/* The probe: a kernel started as the daemon's are (the same environment, but its home and
   caches in `scratch`), outside any sandbox, talking to nobody; it runs only our own code. */
static void __attribute__((noreturn)) run_probe(int channel, const char *scratch)
{
    int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    for (int fd = 0; fd < 3; fd++)
        dup2(devnull, fd);
    dup2(channel, 3);
    if (chdir(scratch) < 0)
        _exit(1);
    char home[PATH_MAX + 8], mpl[PATH_MAX + 32], ipython[PATH_MAX + 32], cache[PATH_MAX + 32];
    snprintf(home, sizeof home, "HOME=%s", scratch);
    snprintf(mpl, sizeof mpl, "MPLCONFIGDIR=%s/.config/matplotlib", scratch);
    snprintf(ipython, sizeof ipython, "IPYTHONDIR=%s/.ipython", scratch);
    snprintf(cache, sizeof cache, "XDG_CACHE_HOME=%s/.cache", scratch);
    json_t *env = json_pack("[sssssssssss]", "PATH=/usr/local/bin:/usr/bin:/bin", home,
                            "USER=user", "LANG=C.UTF-8", "PYTHONUNBUFFERED=1",
                            "MPLBACKEND=module://matplotlib_inline.backend_inline", mpl, ipython,
                            cache, "OPENBLAS_NUM_THREADS=1", "OMP_NUM_THREADS=1");
    run_kernel(env, "probe");
}

/* Once the probe is ready it is sent the trivial first cell clients send, so the pages of a
   first execute_request (history, the display hook, a result's formats) are learned too. */
static const char PROBE_CELL[] =
    "{\"channel\": \"shell\", \"header\": {\"msg_id\": \"probe-1\", \"msg_type\": \"execute_request\", "
    "\"session\": \"probe\", \"username\": \"probe\", \"version\": \"5.3\", \"date\": \"\"}, "
    "\"parent_header\": {}, \"metadata\": {}, \"content\": {\"code\": \"1 + 1\", \"silent\": false, "
    "\"store_history\": true, \"user_expressions\": {}, \"allow_stdin\": false, \"stop_on_error\": true}}";

/* Reads the probe's messages until `marker` has come (e.g. its status "starting"); false if it
   does not within the probe's time, or the probe is gone. */
static bool probe_says(int fd, const char *marker)
{
    char seen[16384];
    size_t length = 0, marker_length = strlen(marker);
    for (;;) {
        struct pollfd readable = {.fd = fd, .events = POLLIN};
        if (poll(&readable, 1, PROBE_TIMEOUT_MS) != 1)
            return false;
        if (length > sizeof seen / 2) { /* keep the tail: the marker may straddle two reads */
            memmove(seen, seen + length - marker_length, marker_length);
            length = marker_length;
        }
        ssize_t n = read(fd, seen + length, sizeof seen - length);
        if (n <= 0)
            return false;
        length += (size_t)n;
        if (memmem(seen, length, marker, marker_length))
            return true;
    }
}

static bool probe_run_first_cell(int fd)
{
    uint32_t size = (uint32_t)strlen(PROBE_CELL);
    unsigned char prefix[4] = {size & 0xff, (size >> 8) & 0xff, (size >> 16) & 0xff, size >> 24};
    return write(fd, prefix, sizeof prefix) == (ssize_t)sizeof prefix &&
           write(fd, PROBE_CELL, size) == (ssize_t)size && probe_says(fd, "\"idle\"");
}

/* Starts the probe and, once it is ready and has run a first cell, learns which pages it copied
   and, if `code_wanted`, which windows of code it ran (kernel_code). Every kernel then gets
   those pages copied (pin_hot_pages). Without the set kernels work as well, only slower:
   failures are reported in the ready message, not fatal. */
static json_t *learn_from_probe(bool code_wanted)
{
    PyObject *made = call_zygote_module("make_scratch", "(s)", "probe");
    const char *made_path = made ? PyUnicode_AsUTF8(made) : NULL;
    if (!made_path) {
        PyErr_Clear();
        Py_XDECREF(made);
        return json_string("cannot create the probe's scratch directory");
    }
    char scratch[PATH_MAX];
    snprintf(scratch, sizeof scratch, "%s", made_path);
    Py_DECREF(made);
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) < 0)
        return json_sprintf("cannot start the probe: %s", strerror(errno));
    PyOS_BeforeFork();
    pid_t probe = fork();
    if (probe == 0)
        run_probe(pair[1], scratch);
    PyOS_AfterFork_Parent();
    close(pair[1]);
    json_t *problem = NULL;
    if (probe < 0)
        problem = json_sprintf("cannot fork the probe: %s", strerror(errno));
    else if (!probe_says(pair[0], "\"starting\""))
        problem = json_string("the probe kernel did not start");
    else if (!probe_run_first_cell(pair[0]))
        problem = json_string("the probe kernel did not run its first cell");
    else if (hot_pages_learn(probe, &kernel_hot_pages) < 0)
        problem = errno == EOPNOTSUPP
                      ? json_string("this Linux cannot copy pages ahead (MADV_POPULATE_WRITE needs 5.14)")
                      : json_sprintf("cannot read the probe's pages: %s", strerror(errno));
    if (!problem && code_wanted)
        huge_code_learn(probe, HUGE_CODE_MIN_PAGES, &kernel_code); /* none: the file's pages */
    if (probe > 0) {
        kill(probe, SIGKILL);
        while (waitpid(probe, NULL, 0) < 0 && errno == EINTR) {
        }
    }
    close(pair[0]);
    PyObject *removed = call_zygote_module("remove_scratch", "(s)", scratch);
    if (!removed)
        PyErr_Clear();
    Py_XDECREF(removed);
    return problem;
}

/* Moves the learned windows of code onto huge pages and says so in `ready`. */
static void move_code(json_t *ready)
{
    char why[256];
    size_t from_pool = 0;
    size_t moved = huge_code_move(&kernel_code, true, &from_pool, why, sizeof why);
    json_object_set_new(ready, "huge_code_windows", json_integer((json_int_t)moved));
    json_object_set_new(ready, "huge_code_from_pool", json_integer((json_int_t)from_pool));
    if (why[0])
        json_object_set_new(ready, "huge_code_problem", json_string(why));
}

/* Besides the learned set, every clone writes the top of two stacks the probe did not run on:
   the zygote's own, and the one pid 1 and then the kernel run on (sandbox_clone_stack_top).
   Pinned too, those are copied at each fork rather than copy-on-write afterwards, which matters
   beyond the faults: a page copied while the zygote stands in a sandbox's memory cgroup — by the
   zygote, or by pid 1 in its memory — is charged to that sandbox but stays with the zygote, and
   keeps the sandbox's group from being freed once the sandbox is gone (measured: deleting every
   other one of 20 sandboxes left all 10 groups behind). 32 KiB covers what either uses on the
   way (the kernel's stack held 20 KiB after a first cell). */
#define PINNED_STACK_TOP (32u << 10)

static int add_stack_tops(hot_pages *set)
{
    char here;
    void *clone_stack_top = sandbox_clone_stack_top();
    if (!clone_stack_top)
        return -1;
    if (hot_pages_add_stack_top(set, (uintptr_t)&here, PINNED_STACK_TOP) < 0)
        return -1;
    return hot_pages_add_stack_top(set, (uintptr_t)clone_stack_top - 1, PINNED_STACK_TOP);
}

/* Pins the learned pages unless the copies could not be charged to the sandboxes (see
   enter_memory_cgroup): NULL, or why not. */
static json_t *pin_hot_pages(const char *home_cgroup_procs)
{
    if (kernel_hot_pages.pages == 0)
        return NULL;
    if (add_stack_tops(&kernel_hot_pages) < 0)
        return json_sprintf("cannot find the stacks' tops: %s", strerror(errno));
    /* Last, with the zygote as it will clone: what fork()'s atfork handlers write, which pid 1
       runs in the zygote's memory when it forks the kernel (sandbox_supervise). Not known, the
       pages cannot be pinned: a copy of one would be charged to a sandbox. */
    if (hot_pages_add_written_by_fork(&kernel_hot_pages) < 0)
        return json_sprintf("cannot learn what a fork writes: %s", strerror(errno));
    if (!home_cgroup_procs)
        return json_string("the daemon did not say which memory cgroup is its own");
    home_cgroup = open(home_cgroup_procs, O_WRONLY | O_CLOEXEC);
    if (home_cgroup < 0)
        return json_sprintf("cannot open %s: %s", home_cgroup_procs, strerror(errno));
    if (hot_pages_pin(&kernel_hot_pages) < 0) /* else the ring stays open for good */
        return json_sprintf("io_uring cannot pin them: %s", strerror(errno));
    hot_pages_pinned = true;
    return NULL;
}

static void serve(int control_fd)
{
    char *buffer = malloc(MAX_REQUEST);
    for (;;) {
        spawn_request request;
        int got = receive_request(control_fd, buffer, &request);
        if (got == 0)
            break; /* the daemon is gone */
        if (got > 0) {
            build_spec(&request);
            PyOS_BeforeFork();
            bool entered = enter_memory_cgroup(request.spec.memory_cgroup_procs);
            /* Returns once pid 1 has exec'd cellbox-init (or failed): the kernel is forked then. */
            pid_t pid = sandbox_clone_sharing_memory(become_kernel, &request);
            int clone_errno = errno;
            /* At once: what the zygote itself allocates in the sandbox's group stays charged to
               it (and keeps it from being freed) for as long as the zygote holds the page. */
            bool home = !entered || leave_memory_cgroup();
            int home_errno = errno;
            PyOS_AfterFork_Parent();
            close_fds(request.fds, request.fd_count);
            if (pid < 0)
                send_json(control_fd, json_pack("{s:s}", "error", strerror(clone_errno)));
            else
                send_json(control_fd, json_pack("{s:i}", "pid", (int)pid));
            json_decref(request.json);
            if (!home) {
                /* Staying would charge the zygote's pages to that sandbox and keep its group
                   from being removed: exit, and the daemon starts a new zygote. */
                fprintf(stderr, "cellbox-zygote: cannot return to its own memory cgroup: %s\n",
                        strerror(home_errno));
                break;
            }
        }
        /* Only what was received: each page written after a fork is a copy-on-write fault. */
        explicit_bzero(buffer, request.length + 1);
        arena_empty();
    }
    free(buffer);
}

int zygote_main(int argc, char **argv)
{
    const char *control = option(argc, argv, "--control-fd");
    const char *python_dir = option(argc, argv, "--python-dir");
    const char *inside_dir = option(argc, argv, "--inside-python-dir");
    if (!control || !python_dir || !inside_dir) {
        fprintf(stderr, "cellbox-kernel --zygote needs --control-fd, --python-dir and "
                        "--inside-python-dir\n");
        return 2;
    }
    int control_fd = atoi(control);
    /* The daemon exec'd us with ADDR_NO_RANDOMIZE: our layout, fixed at that exec, is every
       zygote's of this build (process images rely on it). The flag itself would pass to every
       program a sandbox runs (personality survives fork and exec): cleared, their layouts are
       randomized again, ours stays as it is. */
    int persona = personality(0xffffffff);
    if (persona != -1 && (persona & ADDR_NO_RANDOMIZE))
        personality((unsigned long)persona & ~(unsigned long)ADDR_NO_RANDOMIZE);
    const char *host_namespace = option(argc, argv, "--host-mount-namespace-fd");
    if (host_namespace)
        host_mount_namespace = atoi(host_namespace);
    json_set_alloc_funcs(arena_alloc, arena_free);
    /* Compiled once, before any clone: each sandbox only loads it. */
    int seccomp_rc = seccomp_filter_prepare();
    if (seccomp_rc < 0) {
        fprintf(stderr, "cellbox-zygote: cannot compile the seccomp filter: %s\n", strerror(-seccomp_rc));
        return 1;
    }
    if (kernel_python_start(python_dir) != 0)
        return 1;
    json_t *ready = preload(option(argc, argv, "--preload"), inside_dir);
    if (json_is_true(json_object_get(ready, "ready"))) {
        bool code_wanted = has_flag(argc, argv, "--huge-code");
        json_t *problem = learn_from_probe(code_wanted);
        if (problem)
            json_object_set_new(ready, "hot_pages_problem", problem);
        if (code_wanted)
            move_code(ready);
        json_object_set_new(ready, "hot_pages", json_integer((json_int_t)kernel_hot_pages.pages));
        json_t *not_pinned = pin_hot_pages(option(argc, argv, "--home-cgroup"));
        if (not_pinned) /* kernels copy the pages themselves: slower, as correct */
            json_object_set_new(ready, "hot_pages_not_pinned", not_pinned);
    }
    send_json(control_fd, ready);
    serve(control_fd);
    return 0;
}
