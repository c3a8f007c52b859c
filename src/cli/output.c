#include "cli/output.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

bool output_json;

void output_error(const char *format, ...)
{
    va_list args;
    va_start(args, format);
    fputs("cellbox: ", stderr);
    vfprintf(stderr, format, args);
    fputc('\n', stderr);
    va_end(args);
}

int output_usage_error(const char *command, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    fprintf(stderr, "cellbox %s: ", command);
    vfprintf(stderr, format, args);
    fprintf(stderr, "\nrun `cellbox %s --help` for its usage\n", command);
    va_end(args);
    return EXIT_USAGE;
}

void output_print_json(json_t *value)
{
    json_dumpf(value, stdout, JSON_INDENT(2) | JSON_ENCODE_ANY);
    fputc('\n', stdout);
    fflush(stdout);
}

void output_format_size(long long bytes, char *out, size_t size)
{
    static const char units[] = "KMGTP";
    if (bytes < 1024) {
        snprintf(out, size, "%lldB", bytes);
        return;
    }
    double value = (double)bytes;
    int unit = -1;
    while (value >= 1024 && unit < (int)sizeof units - 2) {
        value /= 1024;
        unit++;
    }
    /* One decimal only where it says something: "1.5G", but "512M" rather than "512.0M". */
    if (value < 10 && value != (long long)value)
        snprintf(out, size, "%.1f%c", value, units[unit]);
    else
        snprintf(out, size, "%.0f%c", value, units[unit]);
}

void output_format_duration(long long seconds, char *out, size_t size)
{
    if (seconds < 60)
        snprintf(out, size, "%llds", seconds);
    else if (seconds < 3600)
        snprintf(out, size, "%lldm", seconds / 60);
    else if (seconds < 86400)
        snprintf(out, size, seconds % 3600 >= 60 ? "%lldh%lldm" : "%lldh", seconds / 3600,
                 seconds % 3600 / 60);
    else
        snprintf(out, size, seconds % 86400 >= 3600 ? "%lldd%lldh" : "%lldd", seconds / 86400,
                 seconds % 86400 / 3600);
}

time_t output_parse_time(const char *iso)
{
    struct tm fields = {0};
    if (!iso)
        return -1;
    const char *rest = strptime(iso, "%Y-%m-%dT%H:%M:%S", &fields);
    if (!rest)
        return -1;
    return timegm(&fields);
}

void output_format_relative(const char *iso, char *out, size_t size)
{
    time_t when = output_parse_time(iso);
    if (when < 0) {
        snprintf(out, size, "-");
        return;
    }
    long long delta = (long long)(when - time(NULL));
    if (delta == 0) { /* the daemon's clock and ours round the same instant apart */
        snprintf(out, size, "now");
        return;
    }
    char duration[32];
    output_format_duration(delta < 0 ? -delta : delta, duration, sizeof duration);
    snprintf(out, size, delta < 0 ? "%s ago" : "in %s", duration);
}

void output_table_begin(output_table *table, int columns, const char *const *headers)
{
    table->columns = columns;
    table->rows = 0;
    table->cells = NULL;
    output_table_add(table, headers);
}

void output_table_add(output_table *table, const char *const *row)
{
    size_t count = (size_t)(table->rows + 1) * table->columns;
    table->cells = realloc(table->cells, count * sizeof *table->cells);
    if (!table->cells) {
        output_error("out of memory building a table");
        exit(EXIT_FAILED);
    }
    for (int column = 0; column < table->columns; column++)
        table->cells[table->rows * table->columns + column] =
            strdup(row[column] ? row[column] : "");
    table->rows++;
}

void output_table_print(output_table *table)
{
    int widths[table->columns];
    for (int column = 0; column < table->columns; column++) {
        widths[column] = 0;
        for (int row = 0; row < table->rows; row++) {
            int width = (int)strlen(table->cells[row * table->columns + column]);
            if (width > widths[column])
                widths[column] = width;
        }
    }
    for (int row = 0; row < table->rows; row++) {
        for (int column = 0; column < table->columns; column++) {
            const char *cell = table->cells[row * table->columns + column];
            /* The last column is not padded: no trailing blanks for `cut` or `awk` to trip on. */
            if (column == table->columns - 1)
                printf("%s\n", cell);
            else
                printf("%-*s  ", widths[column], cell);
        }
    }
    for (int i = 0; i < table->rows * table->columns; i++)
        free(table->cells[i]);
    free(table->cells);
    table->cells = NULL;
    table->rows = 0;
    fflush(stdout);
}

bool output_wants_color(int fd)
{
    const char *no_color = getenv("NO_COLOR");
    return isatty(fd) && !(no_color && *no_color);
}
