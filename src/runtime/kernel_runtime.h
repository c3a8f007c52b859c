/* kernel_runtime — the cellbox-kernel program: a kernel started by exec (kernel_main.c) or
 * forked from a zygote (zygote.c) that imported its template's preload list once. */
#ifndef CELLBOX_RUNTIME_KERNEL_RUNTIME_H
#define CELLBOX_RUNTIME_KERNEL_RUNTIME_H

/* Makes the built-in module _cellbox_native (kernel_native.c) importable; before Python starts. */
int kernel_native_register(void);
/* Starts the interpreter as /usr/bin/python3 would, with `python_dir` first on sys.path. */
int kernel_python_start(const char *python_dir);
/* Runs cellbox_kernel.main.run(channel_fd); returns the process exit status. */
int kernel_python_serve(int channel_fd);
/* `cellbox-kernel --zygote ...` (argv[0] is "--zygote"). */
int zygote_main(int argc, char **argv);

#endif
