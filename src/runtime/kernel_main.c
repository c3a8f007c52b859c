/* cellbox-kernel — a Python kernel: CPython embedded, driven by cellboxd over one fd.
 *
 *   cellbox-kernel --channel-fd=N --python-dir=DIR
 *
 * fd N is the message channel (docs/kernel-protocol.md); fd 1 and 2 are pipes the daemon turns
 * into `stream` messages. DIR holds the `cellbox_kernel` package, which does all the Jupyter
 * work; this program only starts the interpreter the way `/usr/bin/python3` would start, so user
 * code sees a normal Python (sys.executable, sys.prefix, Debian's dist-packages, `%pip`).
 *
 * Python itself is started and served by kernel_python.c, the two steps a zygote (zygote.c)
 * also takes; this file is only the program's entry: the zygote's, or one kernel's. */
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/kernel_channel.h"
#include "runtime/kernel_runtime.h"
#include "sandbox/sandbox.h"

struct kernel_options {
    int channel_fd;         /* the message channel, inherited from cellboxd */
    const char *python_dir; /* directory holding the cellbox_kernel package */
};

static void usage(FILE *out)
{
    fprintf(out, "usage: cellbox-kernel --channel-fd=N --python-dir=DIR\n"
                 "       cellbox-kernel --zygote --control-fd=N --python-dir=DIR "
                 "--inside-python-dir=DIR [--preload=a,b,c]\n"
                 "  --channel-fd=N    inherited socket carrying length-prefixed JSON messages\n"
                 "  --python-dir=DIR  directory that contains the cellbox_kernel package\n");
}

/* The value of `--name=value` if `arg` is that option, else NULL. */
static const char *option_value(const char *arg, const char *name)
{
    size_t length = strlen(name);
    return (strncmp(arg, name, length) == 0 && arg[length] == '=') ? arg + length + 1 : NULL;
}

/* Fills `options` from argv; on a bad command line prints why and returns -1. */
static int parse_options(int argc, char **argv, struct kernel_options *options)
{
    options->channel_fd = -1;
    options->python_dir = NULL;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        const char *value;
        if ((value = option_value(arg, "--channel-fd")) != NULL) {
            if ((options->channel_fd = kernel_channel_parse_fd(value)) < 0) {
                fprintf(stderr,
                        "cellbox-kernel: --channel-fd wants a file descriptor number, got '%s'\n",
                        value);
                return -1;
            }
        } else if ((value = option_value(arg, "--python-dir")) != NULL && *value != '\0') {
            options->python_dir = value;
        } else if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            usage(stdout);
            exit(0);
        } else {
            fprintf(stderr, "cellbox-kernel: unknown argument '%s'\n", arg);
            usage(stderr);
            return -1;
        }
    }
    if (options->channel_fd < 0 || options->python_dir == NULL) {
        fprintf(stderr, "cellbox-kernel: both --channel-fd and --python-dir are required\n");
        usage(stderr);
        return -1;
    }
    return 0;
}

/* Checks what the options point at before paying for an interpreter start, so a launcher bug
 * shows up as one clear line instead of a Python traceback. */
static int check_options(const struct kernel_options *options)
{
    if (fcntl(options->channel_fd, F_GETFD) < 0) {
        fprintf(stderr, "cellbox-kernel: --channel-fd=%d is not an open file descriptor (%s); "
                        "the daemon must pass the channel socket on that fd\n",
                options->channel_fd, strerror(errno));
        return -1;
    }
    char package[PATH_MAX];
    struct stat st;
    int n = snprintf(package, sizeof package, "%s/cellbox_kernel/__init__.py",
                     options->python_dir);
    if (n < 0 || (size_t)n >= sizeof package || stat(package, &st) != 0 || !S_ISREG(st.st_mode)) {
        fprintf(stderr,
                "cellbox-kernel: --python-dir=%s does not contain cellbox_kernel/__init__.py; "
                "run `make build` or point it at build/share/cellbox/python\n",
                options->python_dir);
        return -1;
    }
    return 0;
}

/* The Jupyter bridge is a program of its own beside this one (jupyter_bridge_main.c): it links
   libzmq and OpenSSL, which a Python kernel never needs, and a template imported from a root
   filesystem runs this binary on that root's libraries, where neither need be. The same command
   line goes on in the same process (its pid, its group, SIGINT still ignored). */
static int exec_jupyter_bridge(char **argv)
{
    char self[PATH_MAX], bridge[PATH_MAX + 32];
    ssize_t length = readlink("/proc/self/exe", self, sizeof self - 1);
    if (length <= 0) {
        fprintf(stderr, "cellbox-kernel: cannot find its own program: %s\n", strerror(errno));
        return 1;
    }
    self[length] = '\0';
    char *slash = strrchr(self, '/');
    snprintf(bridge, sizeof bridge, "%.*s/cellbox-jupyter-bridge", (int)(slash - self), self);
    execv(bridge, argv);
    fprintf(stderr, "cellbox-kernel: cannot run %s: %s (run `make build`)\n", bridge,
            strerror(errno));
    return 1;
}

int main(int argc, char **argv)
{
    /* Until the kernel loop installs its own handler, a SIGINT (a user pressing "interrupt"
     * right after creating a kernel) would kill a kernel that never ran a cell: by default
     * before Python starts, as a KeyboardInterrupt inside the imports after. Ignored from the
     * first instruction, Python finds it ignored and installs no handler of its own (as
     * ipykernel ignores it); the loop's signal.signal() replaces this. A zygote's kernels
     * inherit it. */
    signal(SIGINT, SIG_IGN);
    if (argc > 1 && strcmp(argv[1], "--zygote") == 0)
        return zygote_main(argc - 1, argv + 1);
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++) {
        if (strncmp(argv[i], "--language=", 11) == 0)
            return language_host_main(argc, argv);
        if (strcmp(argv[i], "--jupyter") == 0)
            return exec_jupyter_bridge(argv);
    }
    struct kernel_options options;
    if (parse_options(argc, argv, &options) != 0 || check_options(&options) != 0)
        return 2;
    if (kernel_python_start(options.python_dir) != 0)
        return 1;
    int exit_status = kernel_python_serve(options.channel_fd);
    /* Finalizing runs atexit handlers (IPython's cleanup, user code's); its own failure (e.g. a
     * closed stdout pipe) does not change how the kernel ended. */
    (void)Py_FinalizeEx();
    return exit_status;
}
