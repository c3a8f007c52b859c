/* cellbox run: a script run once in a fresh sandbox from the warm pool, then thrown away. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/output.h"

static const char run_usage[] =
    "usage: cellbox run FILE [OPTIONS]          (FILE - reads stdin)\n"
    "       cellbox run -c CODE [OPTIONS]\n"
    "\n"
    "Runs a Python, bash, sh, JavaScript, TypeScript or R script in a fresh sandbox that is\n"
    "removed afterwards, prints its output and exits with its exit status. The language comes\n"
    "from --lang, else the file's #! line, else its extension (.py, .sh, .bash, .js, .mjs,\n"
    ".cjs, .ts, .R); -c CODE is Python unless --lang says otherwise. Your stdin is passed on\n"
    "when it is not a terminal.\n"
    "\n"
    "options:\n"
    "  -c CODE             run CODE instead of a file\n"
    "  --lang LANGUAGE     python, bash, sh, javascript (js), typescript (ts) or r\n"
    "  --timeout SECONDS   stop the script after this long (exit status 124)\n"
    "  --memory-mb N       memory limit in MiB\n";

static const char *language_of_shebang(const char *code)
{
    if (strncmp(code, "#!", 2))
        return NULL;
    size_t length = strcspn(code, "\n");
    char line[256];
    snprintf(line, sizeof line, "%.*s", (int)(length < sizeof line ? length : sizeof line - 1),
             code);
    /* the interpreter's name, first match wins: "bash" before "sh", "ts-node" before "node" */
    static const struct {
        const char *interpreter, *language;
    } interpreters[] = {{"python", "python"},   {"bash", "bash"}, {"ts-node", "typescript"},
                        {"node", "javascript"}, {"Rscript", "r"}, {"sh", "sh"}};
    for (size_t i = 0; i < sizeof interpreters / sizeof *interpreters; i++)
        if (strstr(line, interpreters[i].interpreter))
            return interpreters[i].language;
    return NULL;
}

/* The names /v1/run takes (the daemon answers 400 for one its host cannot run). */
static bool is_run_language(const char *language)
{
    static const char *const names[] = {"python",     "bash", "sh", "javascript", "js",
                                        "typescript", "ts",   "r",  "R",          NULL};
    for (size_t i = 0; names[i]; i++)
        if (!strcmp(language, names[i]))
            return true;
    return false;
}

static const char *language_of_name(const char *file)
{
    const char *dot = strrchr(file, '.');
    if (!dot || strchr(dot, '/'))
        return NULL;
    if (!strcmp(dot, ".py"))
        return "python";
    /* Most .sh scripts in the wild lean on bash; a #!/bin/sh line picks sh before this. */
    if (!strcmp(dot, ".sh") || !strcmp(dot, ".bash"))
        return "bash";
    if (!strcmp(dot, ".js") || !strcmp(dot, ".mjs") || !strcmp(dot, ".cjs"))
        return "javascript";
    if (!strcmp(dot, ".ts"))
        return "typescript";
    if (!strcmp(dot, ".R") || !strcmp(dot, ".r"))
        return "r";
    return NULL;
}

typedef struct run_options {
    const char *file;        /* FILE, or NULL with -c */
    const char *inline_code; /* -c CODE */
    const char *language;    /* --lang */
} run_options;

static int read_run_options(int argc, char **argv, run_options *chosen, json_t *body)
{
    static const struct option options[] = {
        {"lang", required_argument, NULL, 'l'},    {"language", required_argument, NULL, 'l'},
        {"timeout", required_argument, NULL, 'T'}, {"memory-mb", required_argument, NULL, 'm'},
        {"code", required_argument, NULL, 'c'},    {NULL, 0, NULL, 0},
    };
    long long count;
    int option;
    while ((option = getopt_long(argc, argv, ":c:", options, NULL)) != -1) {
        switch (option) {
        case 'c': chosen->inline_code = optarg; break;
        case 'l':
            if (!is_run_language(optarg))
                return output_usage_error("run",
                                          "--lang is python, bash, sh, javascript (js), "
                                          "typescript (ts) or r, not '%s'",
                                          optarg);
            chosen->language = optarg;
            break;
        case 'T':
            if (!args_count(optarg, &count))
                return output_usage_error("run", "--timeout takes whole seconds, not '%s'", optarg);
            json_object_set_new(body, "timeout_s", json_integer(count));
            break;
        case 'm':
            if (!args_count(optarg, &count) || count == 0)
                return output_usage_error("run", "--memory-mb takes a number of MiB, not '%s'",
                                          optarg);
            json_object_set_new(body, "memory_mb", json_integer(count));
            break;
        default: return args_bad_option("run", argv, option);
        }
    }
    if (chosen->inline_code && optind < argc)
        return output_usage_error("run", "give either -c CODE or a FILE, not both");
    if (!chosen->inline_code && optind == argc)
        return output_usage_error("run", "missing the FILE to run (or -c CODE)");
    if (argc - optind > 1)
        return output_usage_error("run", "unexpected argument '%s'", argv[optind + 1]);
    chosen->file = chosen->inline_code ? NULL : argv[optind];
    return EXIT_OK;
}

/* Fills code, language and stdin into the body; EXIT_OK or EXIT_USAGE. */
static int read_run_request(int argc, char **argv, json_t *body)
{
    run_options chosen = {0};
    int status = read_run_options(argc, argv, &chosen, body);
    if (status != EXIT_OK)
        return status;
    size_t length;
    char *code =
        chosen.inline_code ? strdup(chosen.inline_code) : args_read_file(chosen.file, &length);
    if (!code) {
        output_error("cannot read %s: %s", !strcmp(chosen.file, "-") ? "stdin" : chosen.file,
                     strerror(errno));
        return EXIT_USAGE;
    }
    length = strlen(code);
    const char *language = chosen.language ? chosen.language : language_of_shebang(code);
    if (!language)
        language =
            chosen.file && strcmp(chosen.file, "-") ? language_of_name(chosen.file) : "python";
    if (!language) {
        free(code);
        return output_usage_error("run",
                                  "cannot tell the language of %s: pass --lang python, "
                                  "bash, sh, javascript, typescript or r",
                                  chosen.file);
    }
    json_t *text = json_stringn(code, length);
    free(code);
    if (!text) {
        output_error("the code is not UTF-8 text");
        return EXIT_USAGE;
    }
    json_object_set_new(body, "language", json_string(language));
    json_object_set_new(body, "code", text);
    /* The script's own stdin; not when the script itself came from stdin. */
    char *input = chosen.file && !strcmp(chosen.file, "-") ? NULL : args_read_piped_stdin(&length);
    if (input && length) {
        json_t *stdin_text = json_stringn(input, length);
        if (!stdin_text) {
            free(input);
            output_error("stdin is not UTF-8 text; a run's stdin must be text");
            return EXIT_USAGE;
        }
        json_object_set_new(body, "stdin", stdin_text);
    }
    free(input);
    return EXIT_OK;
}

static void print_run(json_t *answer)
{
    const char *out = json_string_value(json_object_get(answer, "stdout"));
    const char *err = json_string_value(json_object_get(answer, "stderr"));
    if (!out && !err) /* only the interleaved form: all of it to stdout */
        out = json_string_value(json_object_get(answer, "output"));
    if (out)
        fputs(out, stdout);
    fflush(stdout);
    if (err)
        fputs(err, stderr);
    if (json_is_true(json_object_get(answer, "truncated")))
        output_error("the output was cut at the run's output limit");
}

int command_run(int argc, char **argv)
{
    if (args_wants_help(argc, argv, run_usage))
        return EXIT_OK;
    json_t *body = json_object(), *answer = NULL;
    int status = read_run_request(argc, argv, body);
    if (status == EXIT_OK)
        status = client_call("POST", "/v1/run", body, &answer);
    json_decref(body);
    if (status != EXIT_OK)
        return status;
    if (output_json)
        output_print_json(answer);
    else
        print_run(answer);
    const char *outcome = json_string_value(json_object_get(answer, "status"));
    json_t *exit_code = json_object_get(answer, "exit_code");
    bool timed_out = json_is_true(json_object_get(answer, "timed_out")) ||
                     (outcome && !strcmp(outcome, "timeout"));
    status = json_is_integer(exit_code)          ? (int)(json_integer_value(exit_code) & 0xff)
             : outcome && !strcmp(outcome, "ok") ? EXIT_OK
                                                 : EXIT_FAILED;
    if (timed_out) {
        if (!output_json)
            output_error("the run timed out");
        status = EXIT_TIMEOUT;
    }
    json_decref(answer);
    return status;
}
