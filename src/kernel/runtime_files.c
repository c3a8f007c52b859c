#include "kernel/runtime_files.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"

static char kernel_binary[PATH_MAX];
static char python_dir[PATH_MAX];
static char kernelspecs_dir[PATH_MAX];

void runtime_files_find(void)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n < 0)
        die("cannot read /proc/self/exe: %s", strerror(errno));
    self[n] = '\0';
    char *bin = dirname(self);
    snprintf(kernel_binary, sizeof kernel_binary, "%s/cellbox-kernel", bin);
    snprintf(python_dir, sizeof python_dir, "%s/../share/cellbox/python", bin);
    snprintf(kernelspecs_dir, sizeof kernelspecs_dir, "%s/../share/cellbox/kernelspecs", bin);
    if (access(kernel_binary, X_OK) != 0)
        die("the kernel runtime %s is missing (run 'make build')", kernel_binary);
    char module[PATH_MAX + 32];
    snprintf(module, sizeof module, "%s/cellbox_kernel/__init__.py", python_dir);
    if (access(module, R_OK) != 0)
        die("the kernel's Python package %s is missing (run 'make build')", module);
}

const char *runtime_files_kernel_binary(void)
{
    return kernel_binary;
}
const char *runtime_files_python_dir(void)
{
    return python_dir;
}
const char *runtime_files_kernelspecs_dir(void)
{
    return kernelspecs_dir;
}
