#include "cli/results.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/output.h"

/* The MIME forms worth a file, in the order they are saved, and what the user is told. */
static const struct saved_form {
    const char *key;  /* field of the result event, also the file's extension */
    bool base64;      /* binary forms come base64-encoded */
    const char *what; /* "saved <what> to <path>" */
} forms[] = {
    {"png", true, "chart"},  {"jpeg", true, "chart"}, {"svg", false, "chart"},
    {"html", false, "html"}, {"pdf", true, "pdf"},
};

void results_begin(results *r, const char *directory)
{
    *r = (results){.directory = directory, .waiting = json_array()};
}

static bool has_file_form(json_t *result)
{
    for (size_t i = 0; i < sizeof forms / sizeof *forms; i++)
        if (json_is_string(json_object_get(result, forms[i].key)))
            return true;
    return false;
}

static int base64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+' || c == '-')
        return 62;
    if (c == '/' || c == '_')
        return 63;
    return -1;
}

/* Decodes in place (the output is never longer); whitespace and padding are skipped. */
static size_t base64_decode(char *text)
{
    size_t out = 0;
    unsigned bits = 0;
    int count = 0;
    for (const char *in = text; *in; in++) {
        int value = base64_value((unsigned char)*in);
        if (value < 0)
            continue;
        bits = (bits << 6) | (unsigned)value;
        count += 6;
        if (count >= 8) {
            count -= 8;
            text[out++] = (char)((bits >> count) & 0xff);
        }
    }
    return out;
}

static bool write_form(const char *path, const char *content, bool base64)
{
    char *bytes = strdup(content);
    size_t length = base64 ? base64_decode(bytes) : strlen(bytes);
    FILE *file = fopen(path, "wb");
    bool written = file && fwrite(bytes, 1, length, file) == length;
    int saved_errno = errno;
    if (file && fclose(file) != 0 && written) {
        written = false;
        saved_errno = errno;
    }
    free(bytes);
    if (!written)
        output_error("cannot save a result to %s: %s", path, strerror(saved_errno));
    return written;
}

static void save(results *r, json_t *result)
{
    int number = ++r->saved;
    for (size_t i = 0; i < sizeof forms / sizeof *forms; i++) {
        const char *content = json_string_value(json_object_get(result, forms[i].key));
        if (!content)
            continue;
        char name[96], *path;
        if (r->execution_count > 0)
            snprintf(name, sizeof name, "result-%lld-%d.%s", r->execution_count, number,
                     forms[i].key);
        else
            snprintf(name, sizeof name, "result-%d.%s", number, forms[i].key);
        if (asprintf(&path, "%s/%s", r->directory ? r->directory : ".", name) < 0)
            continue;
        if (write_form(path, content, forms[i].base64))
            fprintf(stderr, "saved %s to %s\n", forms[i].what, path);
        else
            r->failed = true;
        free(path);
    }
}

void results_take(results *r, json_t *result)
{
    if (output_json)
        return;
    const char *text = json_string_value(json_object_get(result, "text"));
    bool has_file = has_file_form(result);
    /* A display's text is a stand-in ("<Figure size 640x480 with 1 Axes>") when a file shows
       it; the cell's own value is always shown, as IPython would. */
    if (text && (json_is_true(json_object_get(result, "is_main_result")) || !has_file)) {
        fputs(text, stdout);
        fputc('\n', stdout);
        fflush(stdout);
    }
    if (!has_file)
        return;
    if (r->execution_count > 0)
        save(r, result);
    else
        json_array_append(r->waiting, result);
}

void results_number(results *r, long long execution_count)
{
    r->execution_count = execution_count;
    size_t index;
    json_t *result;
    json_array_foreach(r->waiting, index, result) save(r, result);
    json_array_clear(r->waiting);
}

bool results_end(results *r)
{
    results_number(r, r->execution_count);
    json_decref(r->waiting);
    r->waiting = NULL;
    fflush(stderr);
    return !r->failed;
}
