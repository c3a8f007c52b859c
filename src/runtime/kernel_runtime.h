/* kernel_runtime — the cellbox-kernel program: a kernel started by exec (kernel_main.c) or
 * forked from a zygote (zygote.c) that imported its template's preload list once. The arrows run
 * one way: kernel_main.c -> zygote.c -> kernel_python.c -> kernel_native.c; kernel_main.c also
 * uses kernel_python.c directly. */
#ifndef CELLBOX_RUNTIME_KERNEL_RUNTIME_H
#define CELLBOX_RUNTIME_KERNEL_RUNTIME_H

/* zygote.c: `cellbox-kernel --zygote ...` (argv[0] is "--zygote"), chosen by main() first. */
int zygote_main(int argc, char **argv);

/* kernel_python.c, in this order in every kernel: starts the interpreter as /usr/bin/python3
   would, with `python_dir` first on sys.path (once per zygote, or once per exec'd kernel); then
   runs cellbox_kernel.main.run(channel_fd) and returns the process exit status. */
int kernel_python_start(const char *python_dir);
int kernel_python_serve(int channel_fd);

/* kernel_native.c: makes the built-in module _cellbox_native importable; before Python starts
   (kernel_python_start calls it). */
int kernel_native_register(void);

/* language_host.c: the kernels that are not Python, chosen by main() when argv names one:
     cellbox-kernel --channel-fd=N --language=bash
     cellbox-kernel --channel-fd=N --language=javascript|typescript --share-dir=DIR
   (DIR: cellbox's share directory inside the sandbox, holding node/kernel.js). */
int language_host_main(int argc, char **argv);
/* jupyter_bridge.c, in a program of its own (cellbox-jupyter-bridge, which `cellbox-kernel
   --jupyter` execs with the same argv: it links libzmq and OpenSSL, the Python kernel none of
   them): any installed Jupyter kernel, spoken to over its ZMQ channels:
     cellbox-kernel --channel-fd=N --jupyter [--interrupt-mode=signal|message] -- ARGV...
   ARGV is the kernelspec's argv; "{connection_file}" in it is replaced by the file the bridge
   writes. */
int jupyter_bridge_main(int argc, char **argv);

#endif
