/* output — what the user sees: exit codes, error messages, JSON for scripts, and the human forms
 * (tables, sizes, times) used when --json is not given. */
#ifndef CELLBOX_CLI_OUTPUT_H
#define CELLBOX_CLI_OUTPUT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <time.h>

/* Exit codes that mean something to a script. */
enum exit_status {
    EXIT_OK = 0,
    EXIT_FAILED = 1,      /* the code or command ran and failed */
    EXIT_USAGE = 2,       /* the command line is wrong */
    EXIT_UNREACHABLE = 3, /* no connection to cellboxd */
    EXIT_REFUSED = 4,     /* cellboxd answered with an HTTP error */
    EXIT_TIMEOUT = 124,   /* the code or command ran past its time limit (as timeout(1)) */
};

extern bool output_json; /* --json: raw JSON on stdout instead of the human forms */

/* "cellbox: <message>" on stderr. */
void output_error(const char *format, ...) __attribute__((format(printf, 1, 2)));
/* "cellbox COMMAND: <message>" plus where to read the usage; returns EXIT_USAGE. */
int output_usage_error(const char *command, const char *format, ...)
    __attribute__((format(printf, 2, 3)));
/* Whether text for file descriptor fd may carry terminal colours: only when fd is a terminal
   and NO_COLOR is unset or empty (no-color.org); a pipe, a file or a log gets plain text. */
bool output_wants_color(int fd);
/* Pretty-printed JSON and a newline on stdout. */
void output_print_json(json_t *value);

/* 536870912 → "512M", 1536 → "1.5K", 17 → "17B". */
void output_format_size(long long bytes, char *out, size_t size);
/* 42 → "42s", 300 → "5m", 5400 → "1h30m", 200000 → "2d7h". */
void output_format_duration(long long seconds, char *out, size_t size);
/* "2026-11-22T17:00:00.000000Z" → seconds since the epoch; -1 if it is not such a time. */
time_t output_parse_time(const char *iso);
/* An ISO time relative to now: "3m ago", "in 4m"; "-" when missing or unreadable. */
void output_format_relative(const char *iso, char *out, size_t size);

/* A table of text columns, each as wide as its widest cell, separated by two spaces. */
typedef struct output_table {
    int columns;  /* cells per row */
    int rows;     /* rows added, the header included */
    char **cells; /* rows * columns owned strings, row by row */
} output_table;

void output_table_begin(output_table *table, int columns, const char *const *headers);
void output_table_add(output_table *table, const char *const *row);
void output_table_print(output_table *table); /* prints then frees the cells */

#endif
