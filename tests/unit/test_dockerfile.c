/* The Dockerfile parser: instructions with their lines, continuations and comments, the exec
   form, the refusals (each naming its line and what to do), words and variables as Docker
   substitutes them. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "model/dockerfile.h"

static void test_instructions_keep_their_lines(void)
{
    char why[512] = "";
    const char *text = "# syntax=docker/dockerfile:1\n"
                       "ARG VERSION=1\n"
                       "from e2bdev/code-interpreter:latest\n"
                       "\n"
                       "# a comment\n"
                       "RUN pip install \\\n"
                       "    # a comment inside the continuation\n"
                       "    cowsay\n"
                       "COPY --chown=user:user a.txt /app/\n"
                       "ENV A=1 B=\"two words\"\n"
                       "WORKDIR /app\n"
                       "USER root\n"
                       "LABEL cellbox.preload=\"cowsay\"\n"
                       "EXPOSE 8080\n"
                       "ADD [\"data.tar\", \"/opt/data\"]\n"
                       "RUN [\"python3\", \"-c\", \"print(1)\"]";
    dockerfile *file = dockerfile_parse(text, why, sizeof why);
    CHECK(file != NULL);
    if (!file) {
        printf("# %s\n", why);
        return;
    }
    CHECK(file->count == 11);
    if (file->count != 11) {
        dockerfile_free(file);
        return;
    }
    CHECK(file->instructions[0].kind == DOCKERFILE_ARG && file->instructions[0].line == 2);
    CHECK(file->instructions[1].kind == DOCKERFILE_FROM && file->instructions[1].line == 3);
    CHECK_STR(file->instructions[1].text, "FROM e2bdev/code-interpreter:latest");
    const dockerfile_instruction *run = &file->instructions[2];
    CHECK(run->kind == DOCKERFILE_RUN && run->line == 6 && !run->exec_form);
    CHECK_STR(run->arguments, "pip install     cowsay");
    const dockerfile_instruction *copy = &file->instructions[3];
    CHECK(copy->kind == DOCKERFILE_COPY && copy->line == 9 && copy->chown_ignored);
    CHECK_STR(copy->arguments, "a.txt /app/");
    CHECK(file->instructions[4].kind == DOCKERFILE_ENV);
    CHECK(file->instructions[7].kind == DOCKERFILE_LABEL);
    CHECK(file->instructions[8].kind == DOCKERFILE_EXPOSE);
    const dockerfile_instruction *add = &file->instructions[9];
    CHECK(add->kind == DOCKERFILE_ADD && add->exec_form && add->word_count == 2);
    CHECK_STR(add->words[1], "/opt/data");
    const dockerfile_instruction *exec = &file->instructions[10];
    CHECK(exec->kind == DOCKERFILE_RUN && exec->exec_form && exec->word_count == 3 &&
          exec->line == 16);
    CHECK_STR(exec->words[2], "print(1)");
    dockerfile_free(file);
}

/* Each refusal names the line and says what to do. */
static void check_refused(const char *text, const char *expected_part)
{
    char why[1024] = "";
    dockerfile *file = dockerfile_parse(text, why, sizeof why);
    CHECK(file == NULL);
    dockerfile_free(file);
    if (!strstr(why, expected_part)) {
        printf("not ok - expected \"%s\" in \"%s\"\n", expected_part, why);
        check_failed++;
    } else {
        check_passed++;
    }
}

static void test_refusals_name_the_line(void)
{
    check_refused("FROM cellbox\nRUN true\nFROBNICATE now\n",
                  "line 3: unknown instruction \"FROBNICATE now\"");
    check_refused("FROM cellbox\nCMD [\"python3\"]\n", "line 2: CMD is not supported by cellbox: ");
    check_refused("FROM cellbox\nentrypoint x\n", "line 2: ENTRYPOINT is not supported");
    check_refused("FROM cellbox\nHEALTHCHECK NONE\n", "line 2: HEALTHCHECK is not supported");
    check_refused("FROM cellbox\nVOLUME /data\n", "line 2: VOLUME is not supported");
    check_refused("FROM cellbox\nONBUILD RUN x\n", "line 2: ONBUILD is not supported");
    check_refused("FROM cellbox\nSHELL [\"bash\"]\n", "line 2: SHELL is not supported");
    check_refused("FROM cellbox\nSTOPSIGNAL 9\n", "line 2: STOPSIGNAL is not supported");
    check_refused("FROM cellbox AS builder\n", "line 1: FROM cellbox AS builder: a named stage");
    check_refused("FROM cellbox\nRUN x\nFROM cellbox\n", "line 3: FROM cellbox: a second FROM");
    check_refused("FROM cellbox\nCOPY --from=builder /a /b\n", "line 2: COPY --from=builder");
    check_refused("FROM cellbox\nADD https://example.com/x.tar /x\n", "line 2: ADD https://");
    check_refused("FROM cellbox\nRUN --mount=type=cache,target=/x true\n",
                  "line 2: the flag of RUN --mount");
    check_refused("RUN true\n", "line 1: RUN comes before FROM");
    check_refused("# only a comment\n", "there is no FROM");
    check_refused("FROM cellbox\nRUN\n", "line 2: RUN needs arguments");
    check_refused("FROM cellbox\nCOPY onlyone\n", "line 2: COPY needs a source and a destination");
    check_refused("FROM cellbox\nRUN []\n", "line 2: RUN's JSON form must be");
}

static const char *lookup(void *arg, const char *name)
{
    (void)arg;
    if (strcmp(name, "HOME") == 0)
        return "/home/user";
    if (strcmp(name, "EMPTY") == 0)
        return "";
    return NULL;
}

static void test_words_and_variables(void)
{
    char why[256];
    char **words;
    int count;
    CHECK(dockerfile_words("A=$HOME/x B=\"two ${HOME} words\" C='$HOME' D=\\$HOME", lookup, NULL,
                           &words, &count, why, sizeof why) == 0);
    CHECK(count == 4);
    CHECK_STR(words[0], "A=/home/user/x");
    CHECK_STR(words[1], "B=two /home/user words");
    CHECK_STR(words[2], "C=$HOME");
    CHECK_STR(words[3], "D=$HOME");
    CHECK(words[4] == NULL);
    dockerfile_free_words(words);

    CHECK(dockerfile_words("${UNSET:-fallback} ${HOME:+set} ${EMPTY:-e} x${UNSET}y $", lookup, NULL,
                           &words, &count, why, sizeof why) == 0);
    CHECK(count == 5);
    CHECK_STR(words[0], "fallback");
    CHECK_STR(words[1], "set");
    CHECK_STR(words[2], "e");
    CHECK_STR(words[3], "xy");
    CHECK_STR(words[4], "$");
    dockerfile_free_words(words);

    CHECK(dockerfile_words("\"open", lookup, NULL, &words, &count, why, sizeof why) < 0);
    CHECK(words == NULL);
    CHECK(dockerfile_words("${open", lookup, NULL, &words, &count, why, sizeof why) < 0);

    char *expanded = dockerfile_expand("$HOME/'a b'", lookup, NULL, why, sizeof why);
    CHECK_STR(expanded, "/home/user/'a b'");
    free(expanded);
}

int main(void)
{
    RUN(test_instructions_keep_their_lines);
    RUN(test_refusals_name_the_line);
    RUN(test_words_and_variables);
    return check_summary("dockerfile");
}
