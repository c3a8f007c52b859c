/* runtime_files — where the kernel runtime lives: the cellbox-kernel binary and the share
 * directory beside the daemon's own binary (BIN/cellbox-kernel, BIN/../share/cellbox/python and
 * .../kernelspecs). Found once at start; kernelspec.c (the templates) and zygote.c (which execs
 * the kernel binary) both read it, so neither depends on the other for it. */
#ifndef CELLBOX_KERNEL_RUNTIME_FILES_H
#define CELLBOX_KERNEL_RUNTIME_FILES_H

/* Finds them next to /proc/self/exe; exits with a clear message if the runtime is missing. */
void runtime_files_find(void);
const char *runtime_files_kernel_binary(void);
const char *runtime_files_python_dir(void);
const char *runtime_files_kernelspecs_dir(void);

#endif
