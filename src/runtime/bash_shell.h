/* bash_shell — the one bash process of a Bash kernel (docs/languages.md "Bash"): started with
 * its pipes and its private directory, fed command lines that source a file, its reports read
 * back, an interrupt carried through to the programs that missed it, ended. kernel_bash.c turns
 * the daemon's requests into these calls; this module knows nothing of Jupyter messages.
 *
 * Lifecycle: bash_shell_start once, then bash_shell_run per cell (or completion, or environment
 * frame), bash_shell_drop_interrupts while idle; at the end bash_shell_end (the daemon left or
 * asked), or bash_shell_exit_like once bash has exited by itself. */
#ifndef CELLBOX_RUNTIME_BASH_SHELL_H
#define CELLBOX_RUNTIME_BASH_SHELL_H

#include <stdbool.h>
#include <stddef.h>

#include "runtime/kernel_channel.h"
#include "runtime/kernel_child.h"

typedef struct bash_shell {
    kernel_child process; /* the one bash */
    int commands_fd;      /* write end of bash's stdin */
    int report_fd;        /* read end of bash's fd 3, non-blocking */
    char report[512];     /* report bytes not yet a whole line */
    size_t report_used;
    char directory[64]; /* private 0700 directory holding the cell files */
    char token[33];     /* prefix of every report line */
    char version[64];   /* $BASH_VERSION */
    int last_status;    /* the last cell's exit status: `$?` when the next one begins */
    int interrupt_fd;   /* signalfd of SIGINT: the daemon's interrupts, seen by the kernel */
    int sweeps_left;    /* interrupt sweeps still to do for the running line (0: none) */
} bash_shell;

/* How a wait for bash ended. */
enum bash_shell_result { BASH_SHELL_REPORTED, BASH_SHELL_ENDED, BASH_SHELL_DAEMON_GONE };

/* The daemon's side of a wait: while bash runs a line, `channel` is read by on_readable (which
   keeps the frames for later; non-zero when the daemon is gone). */
typedef struct bash_shell_listener {
    kernel_channel *channel;
    int (*on_readable)(void *arg);
    void *arg;
} bash_shell_listener;

/* Called once at start: takes SIGINT on a signalfd, makes the private directory under /tmp,
   starts bash and waits for its first report. 0, or -1 with a line on stderr (nothing left). */
int bash_shell_start(bash_shell *shell, const bash_shell_listener *listener);
/* Writes `text` as the file `name` in the private directory; its path into `path`. 0 or -1. */
int bash_shell_write_file(const bash_shell *shell, const char *name, const char *text,
                          size_t length, char *path, size_t path_size);
/* Has bash source `text` (saved as `name`), with `assignments` (words NAME='value', or "") in
   force for it and `$?` the last cell's status; its exit status into *status. A SIGINT meanwhile
   is carried to the programs that missed it (interrupt_sweep.h). `is_cell`: the status becomes
   the next line's `$?`. */
enum bash_shell_result bash_shell_run(bash_shell *shell, const char *name, const char *text,
                                      size_t length, const char *assignments, bool is_cell,
                                      int *status, const bash_shell_listener *listener);
/* Between lines: a SIGINT then is harmless (docs/kernel-protocol.md) and is dropped. */
void bash_shell_drop_interrupts(bash_shell *shell);
/* How bash ended, without reaping it: "the shell exited with status 4". */
void bash_shell_describe_end(const bash_shell *shell, char *text, size_t size);
/* The daemon is gone or asked for shutdown: closes bash's stdin (an idle shell ends; one that
   does not in 5 s is killed), reaps it, removes the private directory. */
void bash_shell_end(bash_shell *shell);
/* bash has exited by itself (`exit` in a cell, or killed): removes the private directory and
   ends this process the same way (kernel_child_exit_like). */
_Noreturn void bash_shell_exit_like(bash_shell *shell);

#endif
