#include "cli/args.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/output.h"

bool args_key_value(const char *text, json_t *object)
{
    const char *equals = strchr(text, '=');
    if (!equals || equals == text)
        return false;
    char *key = strndup(text, (size_t)(equals - text));
    json_object_set_new(object, key, json_string(equals + 1));
    free(key);
    return true;
}

bool args_volume_mount(const char *text, json_t *object)
{
    const char *colon = strchr(text, ':');
    if (!colon || colon == text || colon[1] != '/')
        return false;
    char *name = strndup(text, (size_t)(colon - text));
    if (!name)
        return false;
    json_object_set_new(object, name, json_string(colon + 1));
    free(name);
    return true;
}

bool args_count(const char *text, long long *out)
{
    char *end;
    if (!*text || *text == '-' || *text == '+')
        return false;
    errno = 0;
    long long value = strtoll(text, &end, 10);
    if (errno || *end)
        return false;
    *out = value;
    return true;
}

bool args_fraction(const char *text, double *out)
{
    char *end;
    if (!*text || *text == '-')
        return false;
    errno = 0;
    double value = strtod(text, &end);
    if (errno || *end || value < 0)
        return false;
    *out = value;
    return true;
}

static char *read_stream(FILE *stream, size_t *length)
{
    size_t capacity = 65536, used = 0;
    char *data = malloc(capacity);
    for (;;) {
        if (!data) {
            errno = ENOMEM;
            return NULL;
        }
        size_t got = fread(data + used, 1, capacity - used - 1, stream);
        used += got;
        if (got == 0)
            break;
        if (used + 1 == capacity) {
            char *grown = realloc(data, capacity * 2);
            if (!grown)
                free(data);
            data = grown;
            capacity *= 2;
        }
    }
    if (ferror(stream)) {
        int saved = errno;
        free(data);
        errno = saved ? saved : EIO;
        return NULL;
    }
    data[used] = '\0';
    if (length)
        *length = used;
    return data;
}

char *args_read_file(const char *path, size_t *length)
{
    if (!strcmp(path, "-"))
        return read_stream(stdin, length);
    FILE *stream = fopen(path, "rb");
    if (!stream)
        return NULL;
    char *data = read_stream(stream, length);
    int saved = errno;
    fclose(stream);
    errno = saved;
    return data;
}

char *args_read_piped_stdin(size_t *length)
{
    if (isatty(STDIN_FILENO))
        return NULL;
    return read_stream(stdin, length);
}

int args_bad_option(const char *command, char **argv, int answer)
{
    /* getopt has stepped past the offending word; optopt names short options only. */
    const char *word = optind > 0 ? argv[optind - 1] : "?";
    if (answer == ':')
        return output_usage_error(command, "option '%s' needs a value", word);
    if (optopt && word[0] == '-' && word[1] != '-')
        return output_usage_error(command, "unknown option '-%c'", optopt);
    return output_usage_error(command, "unknown option '%s'", word);
}

bool args_wants_help(int argc, char **argv, const char *usage)
{
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage, stdout);
            return true;
        }
    return false;
}

int args_positional(const char *command, int argc, char **argv, int count, const char *names)
{
    static const struct option none[] = {{NULL, 0, NULL, 0}};
    int option;
    while ((option = getopt_long(argc, argv, ":", none, NULL)) != -1)
        return args_bad_option(command, argv, option);
    if (argc - optind < count)
        return output_usage_error(command, "missing %s", names);
    if (argc - optind > count)
        return output_usage_error(command, "unexpected argument '%s'", argv[optind + count]);
    return EXIT_OK;
}
