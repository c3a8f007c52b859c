/* command — a program run inside a running sandbox, as the sandbox user: the one implementation
 * of a command behind /v1's commands, MCP's run_command and envd's process.Process.
 *
 * A shell command line runs as `/bin/bash -c CMD`; a program given as argv (envd's cmd + args)
 * is exec'd as it is. It joins the sandbox's namespaces and cgroup (sandbox_join) in a session of
 * its own, with pipes for stdin, stdout and stderr — or, in terminal mode, a pseudo-terminal of
 * the sandbox's own devpts as its controlling terminal and all three. Its pid is the one the
 * sandbox's pid namespace gives it (what `ps` inside shows).
 *
 * What it prints goes, as bytes, to every watcher attached at the time (command_watch: envd's
 * streams, from the moment they attach), and as UTF-8 text (invalid bytes replaced, sequences
 * whole) to a foreground sink (/v1, MCP) or, without one, into a bounded buffer of the last
 * COMMAND_KEEP_BYTES per stream that /v1 reads back. A command without a sink outlives the call
 * that started it. Commands end with their sandbox. */
#ifndef CELLBOX_MODEL_COMMAND_H
#define CELLBOX_MODEL_COMMAND_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "model/box.h"

#define COMMAND_KEEP_BYTES (1 << 20)
#define COMMAND_STDIN_PENDING_MAX (8 << 20) /* written to stdin, not yet read by the command */

typedef struct command command;

typedef struct command_sink {
    void (*on_output)(void *arg, const char *stream, const char *text, size_t length);
    void (*on_exit)(void *arg, command *c); /* then the sink is forgotten */
} command_sink;

/* One of several consumers of a running command: its bytes as they come ("stdout", "stderr" or,
   in terminal mode, "pty"), then its end, once; after on_exit the watcher is forgotten. */
typedef struct command_watcher {
    void (*on_data)(void *arg, const char *stream, const char *bytes, size_t length); /* or NULL */
    void (*on_exit)(void *arg, command *c);
} command_watcher;

typedef struct command_request {
    const char *cmd;        /* a shell command line, run by /bin/bash -c; NULL when argv is given */
    json_t *argv;           /* borrowed: the program and its arguments (strings), exec'd as given */
    const char *cwd;        /* NULL: /workspace */
    json_t *env;            /* borrowed, may be NULL; added to the sandbox's env */
    int timeout_s;          /* 0: none */
    long long timeout_ms;   /* when > 0, instead of timeout_s */
    const char *tag;        /* a name to find it by besides its pid (envd's tag); NULL: none */
    bool terminal;          /* a pseudo-terminal for stdin, stdout and stderr (output: "pty") */
    unsigned columns, rows; /* the terminal's size (0: 80 x 24) */
    const char *stdin_data; /* written first; NULL: nothing */
    size_t stdin_length;
    bool stdin_open;        /* keep stdin open after stdin_data (a terminal's always is) */
} command_request;

void command_init(void);
/* NULL with `why` and what went wrong when it cannot start: a conflict while the sandbox is not
   running, exhausted near the daemon's open-file budget, internal otherwise. */
command *command_start(box *b, const command_request *request, const command_sink *sink,
                       void *arg, failure_kind *failure, char *why, size_t why_size);
command *command_find(box *b, const char *id_or_pid);
command *command_find_pid(box *b, int sandbox_pid);
command *command_find_tag(box *b, const char *tag); /* a running one first, else the newest */
/* The sandbox's commands, newest first: command_next(b, NULL) is the first. */
command *command_next(box *b, command *after);
json_t *command_model(const command *c, bool with_output);
json_t *command_list_model(box *b);
bool command_running(const command *c);
int command_sandbox_pid(const command *c);
const char *command_tag(const command *c);     /* NULL: none */
json_t *command_argv(const command *c);        /* borrowed */
json_t *command_env(const command *c);         /* borrowed: what the request added */
const char *command_cwd(const command *c);
bool command_has_terminal(const command *c);
bool command_stdin_open(const command *c);
/* How an exited command ended: false when unknown (adopted); else *signal_number is the signal
   that killed it (0 if it exited) and *exit_code its status (128 + N when killed by N). */
bool command_end_status(const command *c, int *exit_code, int *signal_number);
const char *command_end_reason(const command *c); /* why its sandbox ended it, or NULL */
/* Writes to stdin (eof closes it afterwards); -1 when stdin is already closed, -2 when the
   command has left COMMAND_STDIN_PENDING_MAX bytes unread (the daemon holds no more). */
int command_write_stdin(command *c, const char *data, size_t length, bool eof);
int command_signal(command *c, int signal_number);
/* A terminal's new size (its programs get SIGWINCH); -1 without a terminal or once exited. */
int command_resize(command *c, unsigned columns, unsigned rows);
/* The foreground consumer went away: the command is killed and forgotten once it exits. */
void command_detach(command *c);
/* Waiting for the end: `on_exit` is called once it exited (at once if it has). */
void command_wait(command *c, void (*on_exit)(void *arg, command *c), void *arg);
void command_unwait(command *c, void *arg);
/* Attaching a watcher (at once told the end if it has exited) and detaching it, by `arg`. */
void command_watch(command *c, const command_watcher *watcher, void *arg);
void command_unwatch(command *c, void *arg);
void command_forget(command *c); /* kills it if running and drops the record */
/* Background commands outlive a daemon that dies: the keeper holds their pipes, the sandbox's
   record lists the running ones (this list), and the next daemon adopts each (its pid checked
   by the caller, `pidfd` and `fds` — stdout, stderr, stdin; a terminal's master alone — taken
   over) with its argv, added variables, tag and terminal. Its output from before the restart is
   not kept; an adopted command's exit status is unknown (exit_code null). */
json_t *command_persisted(box *b);
command *command_adopt(box *b, json_t *saved, int pidfd, const int fds[3], int64_t gone_at_us);

#endif
