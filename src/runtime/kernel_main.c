/* cellbox-kernel — a Python kernel: CPython embedded, driven by cellboxd over one fd.
 *
 *   cellbox-kernel --channel-fd=N --python-dir=DIR
 *
 * fd N is the message channel (docs/kernel-protocol.md); fd 1 and 2 are pipes the daemon turns
 * into `stream` messages. DIR holds the `cellbox_kernel` package, which does all the Jupyter
 * work; this program only starts the interpreter the way `/usr/bin/python3` would start, so user
 * code sees a normal Python (sys.executable, sys.prefix, Debian's dist-packages, `%pip`).
 *
 * Starting is split in two steps, kernel_python_start() and kernel_python_serve(), so that a
 * zygote can later start Python once, import its preload list, and fork kernels that only run
 * the second step. */
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "runtime/kernel_runtime.h"
#include "sandbox/sandbox.h"

/* The interpreter user code must believe it runs under: Debian's python3, so sys.prefix is /usr,
 * dist-packages are on sys.path and `%pip` / `sys.executable -m ...` use the same Python. */
#define KERNEL_PYTHON_EXECUTABLE L"/usr/bin/python3"

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

/* Parses a non-negative fd number; anything else (sign, junk, overflow) is rejected. */
static int parse_fd(const char *text, int *fd)
{
    char *end = NULL;
    errno = 0;
    long value = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || value < 0 || value > INT_MAX)
        return -1;
    *fd = (int)value;
    return 0;
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
            if (parse_fd(value, &options->channel_fd) != 0) {
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

/* Prints why Python could not start; PyStatus carries a message but no traceback. */
static int report_status(PyStatus status, const char *what)
{
    fprintf(stderr, "cellbox-kernel: %s: %s%s%s\n", what, status.func ? status.func : "",
            status.func ? ": " : "", status.err_msg ? status.err_msg : "unknown error");
    return -1;
}

/* Puts `python_dir` first on sys.path so `import cellbox_kernel` finds our package. */
static int prepend_sys_path(const char *python_dir)
{
    PyObject *path = PySys_GetObject("path"); /* borrowed */
    PyObject *dir = PyUnicode_DecodeFSDefault(python_dir);
    int rc = (path != NULL && dir != NULL) ? PyList_Insert(path, 0, dir) : -1;
    Py_XDECREF(dir);
    if (rc != 0) {
        PyErr_Print();
        fprintf(stderr, "cellbox-kernel: cannot add %s to sys.path\n", python_dir);
    }
    return rc;
}

/* Step one: a full interpreter, configured as `/usr/bin/python3` with no script would be. */
int kernel_python_start(const char *python_dir)
{
    PyConfig config;
    PyConfig_InitPythonConfig(&config);
    /* Our argv is not Python's: never let CPython interpret --channel-fd as its own options. */
    config.parse_argv = 0;
    /* The daemon streams fd 1/2 live; C-level and Python-level stdio must not sit on output. */
    config.buffered_stdio = 0;
    /* SIGINT -> KeyboardInterrupt is how a running cell is interrupted. */
    config.install_signal_handlers = 1;

    if (kernel_native_register() != 0) {
        PyConfig_Clear(&config);
        fprintf(stderr, "cellbox-kernel: cannot register the _cellbox_native module\n");
        return 1;
    }
    PyStatus status = PyConfig_SetString(&config, &config.program_name, KERNEL_PYTHON_EXECUTABLE);
    if (!PyStatus_Exception(status))
        status = PyConfig_SetString(&config, &config.executable, KERNEL_PYTHON_EXECUTABLE);
    if (!PyStatus_Exception(status)) {
        /* sys.argv like an interactive interpreter's: libraries that parse it find nothing. */
        wchar_t *argv[] = {L""};
        status = PyConfig_SetArgv(&config, 1, argv);
    }
    if (!PyStatus_Exception(status))
        status = Py_InitializeFromConfig(&config);
    PyConfig_Clear(&config);
    if (PyStatus_Exception(status))
        return report_status(status, "cannot start Python");
    return prepend_sys_path(python_dir);
}

/* Step two: hands the channel to cellbox_kernel.main.run(); returns the process exit status.
 * (A zygote will have imported cellbox_kernel.main already; the import is then a lookup.) */
int kernel_python_serve(int channel_fd)
{
    PyObject *module = PyImport_ImportModule("cellbox_kernel.main");
    if (module == NULL) {
        PyErr_Print();
        fprintf(stderr, "cellbox-kernel: cannot import cellbox_kernel.main (traceback above); "
                        "check --python-dir and that python3-ipython is installed\n");
        return 1;
    }
    PyObject *result = PyObject_CallMethod(module, "run", "i", channel_fd);
    Py_DECREF(module);
    if (result == NULL) {
        /* Only a bug in our package gets here: run() turns every expected end into a status. */
        PyErr_Print();
        fprintf(stderr, "cellbox-kernel: the kernel loop failed (traceback above)\n");
        return 1;
    }
    long value = PyLong_Check(result) ? PyLong_AsLong(result) : 1;
    Py_DECREF(result);
    return (value >= 0 && value <= 255) ? (int)value : 1;
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
