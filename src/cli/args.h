/* args — reading a command's arguments: KEY=VALUE pairs, counts of seconds, code from a file or
 * from stdin, and the messages for options getopt did not accept. */
#ifndef CELLBOX_CLI_ARGS_H
#define CELLBOX_CLI_ARGS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* "K=V" → object[K] = "V"; false when there is no '=' or K is empty. */
bool args_key_value(const char *text, json_t *object);
/* "NAME:/PATH" → object[NAME] = "/PATH"; false when NAME is empty or PATH is not absolute. The
   daemon checks both further. */
bool args_volume_mount(const char *text, json_t *object);
/* A whole non-negative decimal number (seconds, counts); false otherwise. */
bool args_count(const char *text, long long *out);
/* A non-negative decimal fraction ("0.5"); false otherwise. */
bool args_fraction(const char *text, double *out);

/* The whole of a file ("-" = stdin), NUL-terminated; NULL with errno set. */
char *args_read_file(const char *path, size_t *length);
/* Stdin's bytes when it is a pipe or a file (not a terminal); NULL when it is a terminal. */
char *args_read_piped_stdin(size_t *length);

/* --help or -h among the words (before any "--"): prints `usage` on stdout and says true. */
bool args_wants_help(int argc, char **argv, const char *usage);
/* For commands without options: exactly `count` words after the name (optind points at the
   first); else a usage error naming what is missing (`names`). EXIT_OK or EXIT_USAGE. */
int args_positional(const char *command, int argc, char **argv, int count, const char *names);

/* The message for getopt's '?' or ':' answer (opterr is 0); returns EXIT_USAGE. */
int args_bad_option(const char *command, char **argv, int answer);

#endif
