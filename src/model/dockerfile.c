#include "model/dockerfile.h"

#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/buffer.h"
#include "common/log.h"

static const struct {
    const char *keyword;
    dockerfile_kind kind;
} supported[] = {
    {"FROM", DOCKERFILE_FROM},       {"RUN", DOCKERFILE_RUN},   {"COPY", DOCKERFILE_COPY},
    {"ADD", DOCKERFILE_ADD},         {"ENV", DOCKERFILE_ENV},   {"ARG", DOCKERFILE_ARG},
    {"WORKDIR", DOCKERFILE_WORKDIR}, {"USER", DOCKERFILE_USER}, {"LABEL", DOCKERFILE_LABEL},
    {"EXPOSE", DOCKERFILE_EXPOSE},
};

/* What to do instead, for each instruction Docker has and cellbox does not build. */
static const struct {
    const char *keyword, *instead;
} unsupported[] = {
    {"CMD", "a sandbox runs kernels and commands, not a start command: name modules to import "
            "ahead with LABEL cellbox.preload=\"a,b\" and run programs through /v1 commands"},
    {"ENTRYPOINT", "a sandbox runs kernels and commands, not an entrypoint: name modules to "
                   "import ahead with LABEL cellbox.preload=\"a,b\" and run programs through /v1 "
                   "commands"},
    {"HEALTHCHECK", "cellbox checks its kernels itself: remove the line"},
    {"VOLUME", "give a sandbox named volumes when it is created (POST /v1/volumes, then "
               "\"volumes\" in POST /v1/sandboxes): remove the line"},
    {"ONBUILD", "write the instructions into the Dockerfile that builds FROM this template"},
    {"SHELL", "RUN uses /bin/sh -c; for another shell write RUN [\"/bin/bash\", \"-c\", \"...\"]"},
    {"STOPSIGNAL", "cellbox stops its sandboxes itself: remove the line"},
    {"MAINTAINER", "write LABEL maintainer=\"...\" instead"},
};

const char *dockerfile_kind_name(dockerfile_kind kind)
{
    for (size_t i = 0; i < sizeof supported / sizeof *supported; i++)
        if (supported[i].kind == kind)
            return supported[i].keyword;
    return "?";
}

static char *duplicate_range(const char *start, size_t length)
{
    char *copy = strndup(start, length);
    if (!copy)
        die("out of memory");
    return copy;
}

static char *trimmed(const char *start, size_t length)
{
    while (length && isspace((unsigned char)*start))
        start++, length--;
    while (length && isspace((unsigned char)start[length - 1]))
        length--;
    return duplicate_range(start, length);
}

/* ---- logical lines: comments skipped, continuations joined ---- */

typedef struct logical_line {
    int line;    /* of its first physical line */
    buffer text; /* joined, NUL-terminated */
} logical_line;

static bool is_blank_or_comment(const char *start, const char *end)
{
    while (start < end && isspace((unsigned char)*start))
        start++;
    return start == end || *start == '#';
}

/* A physical line continues the instruction when its last non-blank character is a backslash;
   returns the length without it (and the blanks after it), or -1 when it does not continue. */
static long continued_length(const char *start, const char *end)
{
    const char *last = end;
    while (last > start && isspace((unsigned char)last[-1]))
        last--;
    if (last > start && last[-1] == '\\')
        return (long)(last - 1 - start);
    return -1;
}

/* Reads the next logical line from *cursor; false at the end of the text. */
static bool next_logical_line(const char **cursor, int *line_number, logical_line *out)
{
    const char *p = *cursor;
    *out = (logical_line){0};
    bool started = false;
    while (*p) {
        const char *end = strchr(p, '\n');
        if (!end)
            end = p + strlen(p);
        (*line_number)++;
        const char *next = *end ? end + 1 : end;
        if (is_blank_or_comment(p, end)) {
            /* Docker skips comment lines (and blank ones) even inside a continuation. */
            p = next;
            continue;
        }
        if (!started) {
            started = true;
            out->line = *line_number;
        }
        long keep = continued_length(p, end);
        buffer_append(&out->text, p, keep >= 0 ? (size_t)keep : (size_t)(end - p));
        p = next;
        if (keep < 0)
            break;
    }
    *cursor = p;
    if (!started)
        return false;
    buffer_append(&out->text, "", 1);
    return true;
}

/* ---- one instruction ---- */

static int refuse(char *why, size_t why_size, int line, const char *format, const char *detail)
{
    char sentence[1024];
    snprintf(sentence, sizeof sentence, format, detail);
    snprintf(why, why_size, "line %d: %s", line, sentence);
    return -1;
}

static void free_json_words(char **words, int count)
{
    for (int i = 0; i < count; i++)
        free(words[i]);
    free(words);
}

/* An exec-form argument list: a JSON array of strings, at least one. 1 when `arguments` is one,
   0 when it is not JSON (then it is the shell form, as Docker decides), -1 for an array of
   something else. */
static int read_exec_form(const char *arguments, dockerfile_instruction *instruction)
{
    if (arguments[0] != '[')
        return 0;
    json_t *array = json_loads(arguments, JSON_REJECT_DUPLICATES, NULL);
    if (!json_is_array(array)) {
        json_decref(array);
        return 0;
    }
    size_t count = json_array_size(array);
    if (count == 0) {
        json_decref(array);
        return -1;
    }
    char **words = calloc(count + 1, sizeof *words);
    if (!words)
        die("out of memory");
    for (size_t i = 0; i < count; i++) {
        const char *word = json_string_value(json_array_get(array, i));
        if (!word) {
            free_json_words(words, (int)i);
            json_decref(array);
            return -1;
        }
        words[i] = duplicate_range(word, strlen(word));
    }
    json_decref(array);
    instruction->exec_form = true;
    instruction->words = words;
    instruction->word_count = (int)count;
    return 1;
}

/* Reads the --flags before the arguments: the ones COPY/ADD may ignore, any other refused. */
static int read_flags(const char **arguments, dockerfile_instruction *instruction, char *why,
                      size_t why_size)
{
    const char *p = *arguments;
    while (p[0] == '-' && p[1] == '-') {
        size_t length = strcspn(p, " \t");
        char flag[128];
        snprintf(flag, sizeof flag, "%.*s", (int)(length < 100 ? length : 100), p);
        bool copying = instruction->kind == DOCKERFILE_COPY || instruction->kind == DOCKERFILE_ADD;
        if (copying && (strncmp(flag, "--chown", 7) == 0 || strncmp(flag, "--chmod", 7) == 0)) {
            instruction->chown_ignored = true;
        } else if (copying && strncmp(flag, "--link", 6) == 0) {
            /* a layer of its own already: nothing to do */
        } else if (copying && strncmp(flag, "--from", 6) == 0) {
            return refuse(why, why_size, instruction->line,
                          "COPY %s is a multi-stage build, which cellbox does not support: build "
                          "the files beforehand and COPY them from the context",
                          flag);
        } else {
            char detail[256];
            snprintf(detail, sizeof detail, "%s %s", dockerfile_kind_name(instruction->kind), flag);
            return refuse(why, why_size, instruction->line,
                          "the flag of %s is not supported by cellbox: remove it", detail);
        }
        p += length;
        while (*p == ' ' || *p == '\t')
            p++;
    }
    *arguments = p;
    return 0;
}

static bool is_url(const char *source)
{
    return strncasecmp(source, "http://", 7) == 0 || strncasecmp(source, "https://", 8) == 0 ||
           strncasecmp(source, "git@", 4) == 0 || strncasecmp(source, "ftp://", 6) == 0;
}

/* What each kind needs of its arguments, checked before any step runs. */
static int check_arguments(dockerfile_instruction *instruction, char *why, size_t why_size)
{
    const char *name = dockerfile_kind_name(instruction->kind);
    const char *arguments = instruction->arguments;
    if (!arguments[0])
        return refuse(why, why_size, instruction->line, "%s needs arguments", name);
    switch (instruction->kind) {
    case DOCKERFILE_FROM: {
        char **words = NULL;
        int count = 0;
        if (dockerfile_words(arguments, NULL, NULL, &words, &count, why, why_size) < 0)
            return refuse(why, why_size, instruction->line, "FROM: %s", "unbalanced quotes");
        bool stage = count >= 2 && strcasecmp(words[1], "AS") == 0;
        dockerfile_free_words(words);
        if (stage)
            return refuse(why, why_size, instruction->line,
                          "%s: a named stage is a multi-stage build, which cellbox does not "
                          "support: write one FROM, without AS",
                          instruction->text);
        if (count != 1)
            return refuse(why, why_size, instruction->line,
                          "FROM takes one image or template name, not \"%s\"", arguments);
        return 0;
    }
    case DOCKERFILE_RUN:
    case DOCKERFILE_COPY:
    case DOCKERFILE_ADD: {
        int exec = read_exec_form(arguments, instruction);
        if (exec < 0)
            return refuse(why, why_size, instruction->line,
                          "%s's JSON form must be a non-empty array of strings", name);
        if (instruction->kind == DOCKERFILE_RUN)
            return 0;
        char **words = instruction->words;
        int count = instruction->word_count;
        char **split = NULL;
        if (!exec) {
            if (dockerfile_words(arguments, NULL, NULL, &split, &count, why, why_size) < 0)
                return refuse(why, why_size, instruction->line, "%s: unbalanced quotes", name);
            words = split;
        }
        int result = 0;
        if (count < 2)
            result = refuse(why, why_size, instruction->line, "%s needs a source and a destination",
                            name);
        for (int i = 0; result == 0 && i < count - 1; i++)
            if (is_url(words[i]))
                result = refuse(why, why_size, instruction->line,
                                "%s: cellbox builds copy only from the context; download it in a "
                                "RUN (pip, npm, curl) or put the file in the context",
                                instruction->text);
        dockerfile_free_words(split);
        return result;
    }
    default: return 0;
    }
}

/* The keyword of a logical line, its kind; -1 with `why` for one cellbox refuses. */
static int read_keyword(const char *line_text, int line, dockerfile_kind *kind,
                        const char **arguments, char *keyword, size_t keyword_size, char *why,
                        size_t why_size)
{
    const char *p = line_text;
    while (isspace((unsigned char)*p))
        p++;
    size_t length = 0;
    while (p[length] && !isspace((unsigned char)p[length]))
        length++;
    snprintf(keyword, keyword_size, "%.*s", (int)(length < 40 ? length : 40), p);
    for (char *c = keyword; *c; c++)
        *c = (char)toupper((unsigned char)*c);
    *arguments = p + length;
    for (size_t i = 0; i < sizeof supported / sizeof *supported; i++)
        if (strcmp(keyword, supported[i].keyword) == 0) {
            *kind = supported[i].kind;
            return 0;
        }
    for (size_t i = 0; i < sizeof unsupported / sizeof *unsupported; i++)
        if (strcmp(keyword, unsupported[i].keyword) == 0) {
            char detail[1024];
            snprintf(detail, sizeof detail, "%s is not supported by cellbox: %s", keyword,
                     unsupported[i].instead);
            return refuse(why, why_size, line, "%s", detail);
        }
    char shown[120];
    snprintf(shown, sizeof shown, "%.100s", p);
    return refuse(why, why_size, line,
                  "unknown instruction \"%s\": cellbox builds FROM, RUN, COPY, ADD, ENV, ARG, "
                  "WORKDIR, USER, LABEL and EXPOSE",
                  shown);
}

static int read_instruction(const logical_line *logical, dockerfile_instruction *instruction,
                            char *why, size_t why_size)
{
    char keyword[48];
    const char *arguments;
    if (read_keyword(logical->text.data, logical->line, &instruction->kind, &arguments, keyword,
                     sizeof keyword, why, why_size) < 0)
        return -1;
    instruction->line = logical->line;
    while (isspace((unsigned char)*arguments))
        arguments++;
    if (read_flags(&arguments, instruction, why, why_size) < 0)
        return -1;
    instruction->arguments = trimmed(arguments, strlen(arguments));
    if (asprintf(&instruction->text, "%s %s", keyword, instruction->arguments) < 0)
        die("out of memory");
    return check_arguments(instruction, why, why_size);
}

static void free_instruction(dockerfile_instruction *instruction)
{
    free(instruction->text);
    free(instruction->arguments);
    free_json_words(instruction->words, instruction->word_count);
}

void dockerfile_free(dockerfile *file)
{
    if (!file)
        return;
    for (int i = 0; i < file->count; i++)
        free_instruction(&file->instructions[i]);
    free(file->instructions);
    free(file);
}

/* One stage, FROM first: ARGs may come before it (Docker's global build arguments). */
static int check_order(const dockerfile *file, char *why, size_t why_size)
{
    int from_count = 0;
    for (int i = 0; i < file->count; i++) {
        const dockerfile_instruction *instruction = &file->instructions[i];
        if (instruction->kind == DOCKERFILE_FROM && ++from_count > 1)
            return refuse(why, why_size, instruction->line,
                          "%s: a second FROM is a multi-stage build, which cellbox does not "
                          "support: build in one stage and COPY prebuilt files from the context",
                          instruction->text);
        if (from_count == 0 && instruction->kind != DOCKERFILE_ARG &&
            instruction->kind != DOCKERFILE_FROM)
            return refuse(why, why_size, instruction->line,
                          "%s comes before FROM: a Dockerfile starts with FROM (only ARG may "
                          "come before it)",
                          dockerfile_kind_name(instruction->kind));
    }
    if (from_count == 0)
        return refuse(why, why_size, file->count ? file->instructions[0].line : 1, "%s",
                      "there is no FROM: start with FROM e2bdev/code-interpreter:latest "
                      "(cellbox's base) or the name of a template");
    return 0;
}

dockerfile *dockerfile_parse(const char *text, char *why, size_t why_size)
{
    if (strlen(text) > DOCKERFILE_MAX_BYTES) {
        snprintf(why, why_size, "the Dockerfile is larger than %d bytes", DOCKERFILE_MAX_BYTES);
        return NULL;
    }
    dockerfile *file = calloc(1, sizeof *file);
    if (!file)
        die("out of memory");
    const char *cursor = text;
    int line_number = 0;
    logical_line logical;
    while (next_logical_line(&cursor, &line_number, &logical)) {
        if (file->count == DOCKERFILE_MAX_INSTRUCTIONS) {
            buffer_free(&logical.text);
            snprintf(why, why_size, "line %d: more than %d instructions", logical.line,
                     DOCKERFILE_MAX_INSTRUCTIONS);
            dockerfile_free(file);
            return NULL;
        }
        file->instructions =
            realloc(file->instructions, (size_t)(file->count + 1) * sizeof *file->instructions);
        if (!file->instructions)
            die("out of memory");
        dockerfile_instruction *instruction = &file->instructions[file->count++];
        *instruction = (dockerfile_instruction){0};
        int read = read_instruction(&logical, instruction, why, why_size);
        buffer_free(&logical.text);
        if (read < 0) {
            dockerfile_free(file);
            return NULL;
        }
    }
    if (check_order(file, why, why_size) < 0) {
        dockerfile_free(file);
        return NULL;
    }
    return file;
}

/* ---- words and variables ---- */

static bool is_name_start(char c)
{
    return isalpha((unsigned char)c) || c == '_';
}
static bool is_name_char(char c)
{
    return isalnum((unsigned char)c) || c == '_';
}

/* Substitutes the variable at p (just after '$') into `out`; returns the characters read, or -1
   for an unterminated "${". */
static long substitute(const char *p, dockerfile_lookup lookup, void *arg, buffer *out)
{
    char name[256];
    const char *value;
    if (*p == '{') {
        const char *close = strchr(p, '}');
        if (!close)
            return -1;
        size_t length = strcspn(p + 1, ":}");
        snprintf(name, sizeof name, "%.*s", (int)(length < 255 ? length : 255), p + 1);
        value = lookup ? lookup(arg, name) : NULL;
        const char *modifier = p + 1 + length;
        if (modifier[0] == ':' && (modifier[1] == '-' || modifier[1] == '+')) {
            bool set = value && value[0];
            const char *word = modifier + 2;
            if (modifier[1] == '-' && !set)
                buffer_append(out, word, (size_t)(close - word));
            else if (modifier[1] == '+' && set)
                buffer_append(out, word, (size_t)(close - word));
            else if (modifier[1] == '-')
                buffer_append(out, value, strlen(value));
        } else if (value) {
            buffer_append(out, value, strlen(value));
        }
        return (long)(close - p + 1);
    }
    if (!is_name_start(*p)) {
        buffer_append(out, "$", 1); /* a lone dollar stays itself */
        return 0;
    }
    size_t length = 0;
    while (is_name_char(p[length]))
        length++;
    snprintf(name, sizeof name, "%.*s", (int)(length < 255 ? length : 255), p);
    value = lookup ? lookup(arg, name) : NULL;
    if (value)
        buffer_append(out, value, strlen(value));
    return (long)length;
}

static void push_word(buffer *word, char ***words, int *count)
{
    *words = realloc(*words, (size_t)(*count + 2) * sizeof **words);
    if (!*words)
        die("out of memory");
    (*words)[(*count)++] = duplicate_range(word->data ? buffer_head(word) : "", buffer_size(word));
    (*words)[*count] = NULL;
    buffer_free(word);
}

int dockerfile_words(const char *text, dockerfile_lookup lookup, void *arg, char ***words,
                     int *count, char *why, size_t why_size)
{
    *words = NULL;
    *count = 0;
    buffer word = {0};
    bool in_word = false;
    char quote = 0;
    for (const char *p = text; *p;) {
        char c = *p;
        if (!quote && isspace((unsigned char)c)) {
            if (in_word)
                push_word(&word, words, count);
            in_word = false;
            p++;
            continue;
        }
        in_word = true;
        if (quote == '\'') {
            if (c == '\'')
                quote = 0;
            else
                buffer_append(&word, &c, 1);
            p++;
        } else if (c == '\'' || c == '"') {
            if (quote == c)
                quote = 0;
            else if (!quote)
                quote = c;
            else
                buffer_append(&word, &c, 1);
            p++;
        } else if (c == '\\' && p[1]) {
            buffer_append(&word, p + 1, 1);
            p += 2;
        } else if (c == '$') {
            long used = substitute(p + 1, lookup, arg, &word);
            if (used < 0)
                goto unterminated;
            p += 1 + used;
        } else {
            buffer_append(&word, &c, 1);
            p++;
        }
    }
    if (quote)
        goto unterminated;
    if (in_word)
        push_word(&word, words, count);
    if (!*words) {
        *words = calloc(1, sizeof **words);
        if (!*words)
            die("out of memory");
    }
    return 0;
unterminated:
    buffer_free(&word);
    dockerfile_free_words(*words);
    *words = NULL;
    *count = 0;
    snprintf(why, why_size, "an unterminated quote or ${ in \"%.200s\"", text);
    return -1;
}

void dockerfile_free_words(char **words)
{
    if (!words)
        return;
    for (char **w = words; *w; w++)
        free(*w);
    free(words);
}

char *dockerfile_expand(const char *word, dockerfile_lookup lookup, void *arg, char *why,
                        size_t why_size)
{
    buffer out = {0};
    for (const char *p = word; *p;) {
        if (p[0] == '\\' && p[1] == '$') {
            buffer_append(&out, "$", 1);
            p += 2;
        } else if (p[0] == '$') {
            long used = substitute(p + 1, lookup, arg, &out);
            if (used < 0) {
                buffer_free(&out);
                snprintf(why, why_size, "an unterminated ${ in \"%.200s\"", word);
                return NULL;
            }
            p += 1 + used;
        } else {
            buffer_append(&out, p, 1);
            p++;
        }
    }
    char *expanded = duplicate_range(out.data ? buffer_head(&out) : "", buffer_size(&out));
    buffer_free(&out);
    return expanded;
}
