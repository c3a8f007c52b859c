/* dockerfile — a Dockerfile read the way Docker reads it, for the instructions cellbox builds
 * (template_build.h): FROM, RUN, COPY, ADD, ENV, ARG, WORKDIR, USER, LABEL, EXPOSE.
 *
 * dockerfile_parse splits the text into instructions: comments and parser directives
 * (`# syntax=...`) are skipped, a line ending in a backslash continues on the next (comment lines
 * inside a continuation are skipped, as Docker does), keywords are case-insensitive, and each
 * instruction keeps the line it began on. Whatever cellbox cannot build is refused here, before
 * any step runs, with "line N: ..." and what to do instead: the instructions it does not support
 * (CMD, ENTRYPOINT, HEALTHCHECK, VOLUME, ONBUILD, SHELL, STOPSIGNAL, MAINTAINER), a second stage
 * (FROM ... AS, a second FROM, COPY --from), RUN's BuildKit flags, ADD of a URL, and a file that
 * does not start with FROM.
 *
 * Variables are not substituted by the parser: their values depend on the ENV and ARG state at
 * each step, which the build keeps. dockerfile_words and dockerfile_expand do it then, where
 * Docker does (ENV, ARG, LABEL, COPY, ADD, WORKDIR, USER, EXPOSE; never in RUN, whose shell
 * expands them itself): $NAME, ${NAME}, ${NAME:-default}, ${NAME:+alternative}, \$ for a
 * literal dollar, none inside single quotes. */
#ifndef CELLBOX_MODEL_DOCKERFILE_H
#define CELLBOX_MODEL_DOCKERFILE_H

#include <stdbool.h>
#include <stddef.h>

/* Past these a Dockerfile is refused (it is a request's body, not a trusted file). */
#define DOCKERFILE_MAX_BYTES (1 << 20)
#define DOCKERFILE_MAX_INSTRUCTIONS 512

typedef enum dockerfile_kind {
    DOCKERFILE_FROM,
    DOCKERFILE_RUN,
    DOCKERFILE_COPY,
    DOCKERFILE_ADD,
    DOCKERFILE_ENV,
    DOCKERFILE_ARG,
    DOCKERFILE_WORKDIR,
    DOCKERFILE_USER,
    DOCKERFILE_LABEL,
    DOCKERFILE_EXPOSE,
} dockerfile_kind;

typedef struct dockerfile_instruction {
    dockerfile_kind kind;
    int line;        /* where it begins, counted from 1 */
    char *text;      /* as normalized: the keyword in capitals, one space, the arguments */
    char *arguments; /* after the keyword and its flags; continuations joined, trimmed */
    bool exec_form;  /* RUN, COPY, ADD written as a JSON array: then `words` holds it */
    int word_count;
    char **words;       /* the JSON array's strings (exec form only) */
    bool chown_ignored; /* COPY/ADD had --chown or --chmod: files belong to root, mode kept */
} dockerfile_instruction;

typedef struct dockerfile {
    int count;
    dockerfile_instruction *instructions;
} dockerfile;

/* The instructions of `text` (NUL-terminated), or NULL with `why` ("line N: ..."). */
dockerfile *dockerfile_parse(const char *text, char *why, size_t why_size);
void dockerfile_free(dockerfile *file);
const char *dockerfile_kind_name(dockerfile_kind kind); /* "RUN" */

/* A variable's value in the build's state at this step; NULL when it is not set. */
typedef const char *(*dockerfile_lookup)(void *arg, const char *name);

/* `text` split into words as Docker splits an instruction's arguments (blanks separate words,
   quotes group, a backslash escapes the next character outside single quotes), each word's
   variables substituted. The words are malloc'd, *words NULL-terminated. 0, or -1 with `why`
   (an unterminated quote or ${). */
int dockerfile_words(const char *text, dockerfile_lookup lookup, void *arg, char ***words,
                     int *count, char *why, size_t why_size);
void dockerfile_free_words(char **words);
/* `word` with its variables substituted (no quote removal: an exec-form element); malloc'd, or
   NULL with `why`. */
char *dockerfile_expand(const char *word, dockerfile_lookup lookup, void *arg, char *why,
                        size_t why_size);

#endif
