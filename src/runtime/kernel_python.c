/* kernel_python — the interpreter of a kernel, started in two steps, kernel_python_start() and
 * kernel_python_serve(), so that a zygote (zygote.c) starts Python once, imports its preload
 * list, and forks kernels that only run the second step; an exec'd kernel (kernel_main.c) runs
 * both. */
#include <Python.h>

#include <stdio.h>

#include "runtime/kernel_runtime.h"

/* The interpreter user code must believe it runs under: Debian's python3, so sys.prefix is /usr,
 * dist-packages are on sys.path and `%pip` / `sys.executable -m ...` use the same Python. */
#define KERNEL_PYTHON_EXECUTABLE L"/usr/bin/python3"

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
