/* kernel_bash — the Bash kernel, written in C inside cellbox-kernel (docs/languages.md "Bash"):
 * one `bash` child holds the state (cwd, variables, functions); each cell is written to a file
 * in a private directory and sourced by it, and its exit status comes back on a private pipe.
 * Called by language_host.c for `cellbox-kernel --channel-fd=N --language=bash`. */
#ifndef CELLBOX_RUNTIME_KERNEL_BASH_H
#define CELLBOX_RUNTIME_KERNEL_BASH_H

/* Serves the daemon on `channel_fd` until shutdown (returns 0), the daemon's end of file
   (returns 0) or bash's end (does not return: cellbox-kernel ends as bash ended). 1 when bash
   cannot be started. */
int bash_kernel_run(int channel_fd);

#endif
