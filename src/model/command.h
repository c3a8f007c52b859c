/* command — a shell command run inside a running sandbox, as the sandbox user.
 *
 * `/bin/sh -c CMD` joins the sandbox's namespaces and cgroup (sandbox_join) in a session of its
 * own; its stdout and stderr come back through pipes as UTF-8 text (invalid bytes replaced), its
 * stdin is a pipe the caller can write to. A foreground command reports to a sink; a background
 * one keeps the last COMMAND_KEEP_BYTES of each stream for later. Commands end with their sandbox. */
#ifndef CELLBOX_MODEL_COMMAND_H
#define CELLBOX_MODEL_COMMAND_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "model/box.h"

#define COMMAND_KEEP_BYTES (1 << 20)

typedef struct command command;

typedef struct command_sink {
    void (*on_output)(void *arg, const char *stream, const char *text, size_t length);
    void (*on_exit)(void *arg, command *c); /* then the sink is forgotten */
} command_sink;

typedef struct command_request {
    const char *cmd;
    const char *cwd;        /* NULL: /workspace */
    json_t *env;            /* borrowed, may be NULL; added to the sandbox's env */
    int timeout_s;          /* 0: none */
    const char *stdin_data; /* written first; NULL: nothing */
    size_t stdin_length;
    bool stdin_open;        /* keep stdin open after stdin_data (background commands) */
} command_request;

void command_init(void);
/* NULL with `why` and what went wrong when it cannot start: a conflict while the sandbox is not
   running, exhausted near the daemon's open-file budget, internal otherwise. */
command *command_start(box *b, const command_request *request, const command_sink *sink,
                       void *arg, failure_kind *failure, char *why, size_t why_size);
command *command_find(box *b, const char *id_or_pid);
json_t *command_model(const command *c, bool with_output);
json_t *command_list_model(box *b);
bool command_running(const command *c);
/* Writes to stdin (eof closes it afterwards); -1 when stdin is already closed. */
int command_write_stdin(command *c, const char *data, size_t length, bool eof);
int command_signal(command *c, int signal_number);
/* The foreground consumer went away: the command is killed and forgotten once it exits. */
void command_detach(command *c);
/* Waiting for the end: `on_exit` is called once it exited (at once if it has). */
void command_wait(command *c, void (*on_exit)(void *arg, command *c), void *arg);
void command_unwait(command *c, void *arg);
void command_forget(command *c); /* kills it if running and drops the record */
/* Background commands outlive a daemon that dies: the keeper holds their pipes, the sandbox's
   record lists the running ones (this list), and the next daemon adopts each (its pid checked
   by the caller, `pidfd` and `fds` — stdout, stderr, stdin — taken over). Its output from
   before the restart is not kept; an adopted command's exit status is unknown (exit_code null). */
json_t *command_persisted(box *b);
command *command_adopt(box *b, json_t *saved, int pidfd, const int fds[3], int64_t gone_at_us);

#endif
