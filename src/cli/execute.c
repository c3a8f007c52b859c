/* cellbox exec and cellbox sh: code in a sandbox's kernel (Python, or another language's), a shell
 * command in the sandbox; both answers are NDJSON streams shown live, event by event. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "cli/results.h"

/* ------------------------------------------------------------------ exec */

static const char exec_usage[] =
    "usage: cellbox exec ID CODE [OPTIONS]\n"
    "       cellbox exec ID -f FILE [OPTIONS]     (FILE - reads stdin)\n"
    "\n"
    "Runs code in the sandbox's kernel (Python unless --language names another: javascript,\n"
    "typescript, bash, r, each in that language's own kernel in the same sandbox); variables\n"
    "stay for the next exec. Output is\n"
    "shown as it comes: stdout and stderr to yours, the cell's value to stdout, a traceback\n"
    "to stderr (in colour only when stderr is a terminal and NO_COLOR is not set). Images,\n"
    "SVG, HTML and PDF results are saved as result-<count>-<n>.<ext>.\n"
    "\n"
    "options:\n"
    "  -f, --file FILE     read the code from FILE\n"
    "  --context CID       run in that context (default: the sandbox's default context)\n"
    "  --language LANG     run in LANG's context of the sandbox, made on first use\n"
    "                      (python, javascript/js, typescript/ts, bash/sh, r)\n"
    "  --timeout SECONDS   interrupt the code after this long\n"
    "  --env K=V           an environment variable for this execution only (repeatable)\n"
    "  --out DIR           where to save results (default: the current directory)\n"
    "\n"
    "exit status: 0 ok, 1 the code raised an exception, 124 it timed out.\n";

/* What one execution stream has said so far. */
typedef struct execution {
    results saved;  /* rich results written to files */
    bool raised;    /* an error event came */
    bool timed_out; /* the cell ran out of time */
    bool ended;     /* end_of_execution came: the stream is complete */
} execution;

static void print_error_event(json_t *event, execution *run)
{
    const char *name = json_string_value(json_object_get(event, "name"));
    const char *value = json_string_value(json_object_get(event, "value"));
    const char *traceback = json_string_value(json_object_get(event, "traceback"));
    run->raised = true;
    if (name && !strcmp(name, "TimeoutError"))
        run->timed_out = true;
    if (output_json)
        return;
    /* Coloured by IPython only when we asked for colours (a terminal, no NO_COLOR). */
    if (traceback && *traceback)
        fprintf(stderr, "%s%s", traceback, traceback[strlen(traceback) - 1] == '\n' ? "" : "\n");
    else
        fprintf(stderr, "%s: %s\n", name ? name : "Error", value ? value : "");
}

static void print_stream_text(json_t *event, FILE *stream)
{
    const char *text = json_string_value(json_object_get(event, "text"));
    if (text && !output_json) {
        fputs(text, stream);
        fflush(stream);
    }
}

static void handle_execution_event(json_t *event, const char *line, size_t length, void *context)
{
    execution *run = context;
    const char *type = json_string_value(json_object_get(event, "type"));
    if (!type) {
        output_error("ignoring a line from cellboxd that is not an event: %.*s", (int)length, line);
        return;
    }
    if (!strcmp(type, "stdout"))
        print_stream_text(event, stdout);
    else if (!strcmp(type, "stderr"))
        print_stream_text(event, stderr);
    else if (!strcmp(type, "result"))
        results_take(&run->saved, event);
    else if (!strcmp(type, "error"))
        print_error_event(event, run);
    else if (!strcmp(type, "number_of_executions"))
        results_number(&run->saved, json_integer_value(json_object_get(event, "execution_count")));
    else if (!strcmp(type, "accounting")) {
        if (json_is_true(json_object_get(event, "timed_out")))
            run->timed_out = true;
        if (json_is_true(json_object_get(event, "truncated")) && !output_json)
            output_error(
                "the output was cut at the sandbox's output limit (`cellbox info` shows it)");
    } else if (!strcmp(type, "end_of_execution"))
        run->ended = true;
    /* keepalive, and event types newer than this client: nothing to show. */
}

/* The request body from exec's options and words; EXIT_OK or EXIT_USAGE. */
static int read_exec_request(int argc, char **argv, json_t *body, const char **out_dir,
                             const char **id)
{
    static const struct option options[] = {
        {"file", required_argument, NULL, 'f'},     {"context", required_argument, NULL, 'c'},
        {"language", required_argument, NULL, 'L'}, {"lang", required_argument, NULL, 'L'},
        {"timeout", required_argument, NULL, 'T'},  {"env", required_argument, NULL, 'e'},
        {"out", required_argument, NULL, 'o'},      {NULL, 0, NULL, 0},
    };
    const char *file = NULL;
    json_t *env = json_object();
    json_object_set_new(body, "env_vars", env);
    /* Colours for the traceback on a terminal's stderr; never in --json's events (for programs). */
    json_object_set_new(body, "color",
                        json_boolean(!output_json && output_wants_color(STDERR_FILENO)));
    long long seconds;
    int option;
    while ((option = getopt_long(argc, argv, ":f:", options, NULL)) != -1) {
        switch (option) {
        case 'f': file = optarg; break;
        case 'c': json_object_set_new(body, "context_id", json_string(optarg)); break;
        case 'L': json_object_set_new(body, "language", json_string(optarg)); break;
        case 'o': *out_dir = optarg; break;
        case 'T':
            if (!args_count(optarg, &seconds))
                return output_usage_error("exec", "--timeout takes whole seconds, not '%s'",
                                          optarg);
            json_object_set_new(body, "timeout_s", json_integer(seconds));
            break;
        case 'e':
            if (!args_key_value(optarg, env))
                return output_usage_error("exec", "--env takes NAME=VALUE, not '%s'", optarg);
            break;
        default: return args_bad_option("exec", argv, option);
        }
    }
    if (optind == argc)
        return output_usage_error("exec", "missing the sandbox ID (see `cellbox ls`)");
    *id = argv[optind++];
    if (argc - optind > (file ? 0 : 1))
        return output_usage_error("exec", file ? "give the code either as CODE or with -f, not both"
                                               : "the code must be one argument: quote it");
    size_t length = 0;
    char *code = NULL;
    if (file) {
        code = args_read_file(file, &length);
        if (!code) {
            output_error("cannot read %s: %s", !strcmp(file, "-") ? "stdin" : file,
                         strerror(errno));
            return EXIT_USAGE;
        }
    } else if (optind < argc) {
        code = strdup(argv[optind]);
        length = strlen(code);
    } else if (!(code = args_read_piped_stdin(&length)) || length == 0) {
        free(code);
        return output_usage_error("exec", "missing the CODE to run (or -f FILE)");
    }
    json_t *text = json_stringn(code, length);
    free(code);
    if (!text) {
        output_error("the code is not UTF-8 text");
        return EXIT_USAGE;
    }
    json_object_set_new(body, "code", text);
    return EXIT_OK;
}

int command_exec(int argc, char **argv)
{
    if (args_wants_help(argc, argv, exec_usage))
        return EXIT_OK;
    json_t *body = json_object();
    const char *out_dir = NULL, *id = NULL;
    int status = read_exec_request(argc, argv, body, &out_dir, &id);
    if (status != EXIT_OK) {
        json_decref(body);
        return status;
    }
    execution run = {0};
    results_begin(&run.saved, out_dir);
    char *path = client_sandbox_path(id, "/execute");
    status = client_stream(path, body, handle_execution_event, &run);
    free(path);
    json_decref(body);
    bool saved_all = results_end(&run.saved);
    if (status != EXIT_OK)
        return status;
    if (!run.ended) {
        output_error("the execution stream from cellboxd stopped before its end; the daemon may "
                     "have restarted: check `cellbox info %s`",
                     id);
        return EXIT_UNREACHABLE;
    }
    if (run.timed_out)
        return EXIT_TIMEOUT;
    if (run.raised || !saved_all)
        return EXIT_FAILED;
    return EXIT_OK;
}

/* ------------------------------------------------------------------ sh */

static const char sh_usage[] =
    "usage: cellbox sh ID COMMAND [OPTIONS]\n"
    "\n"
    "Runs COMMAND with /bin/sh -c inside the sandbox and shows its output as it comes. Quote\n"
    "COMMAND, or put it after --: cellbox sh ID -- ls -l. Your stdin is passed on when it is\n"
    "not a terminal: echo hi | cellbox sh ID cat.\n"
    "\n"
    "options:\n"
    "  --cwd DIR           working directory (default /workspace)\n"
    "  --timeout SECONDS   kill the command after this long\n"
    "  --env K=V           an environment variable (repeatable)\n"
    "\n"
    "exit status: the command's, 124 when it timed out.\n";

/* What one command stream has said so far. */
typedef struct shell_command {
    bool exited;     /* the exit event came */
    int exit_code;   /* the command's status */
    bool timed_out;  /* killed at its timeout */
    char signal[32]; /* the signal that ended it, or "" */
    char *reason;    /* why its sandbox ended it (it expired), or NULL */
} shell_command;

static void handle_command_event(json_t *event, const char *line, size_t length, void *context)
{
    shell_command *run = context;
    const char *type = json_string_value(json_object_get(event, "type"));
    if (!type) {
        output_error("ignoring a line from cellboxd that is not an event: %.*s", (int)length, line);
        return;
    }
    if (!strcmp(type, "stdout")) {
        print_stream_text(event, stdout);
    } else if (!strcmp(type, "stderr")) {
        print_stream_text(event, stderr);
    } else if (!strcmp(type, "exit")) {
        json_t *code = json_object_get(event, "exit_code");
        const char *signal = json_string_value(json_object_get(event, "signal"));
        run->exited = true;
        run->exit_code = json_is_integer(code) ? (int)json_integer_value(code) : EXIT_FAILED;
        run->timed_out = json_is_true(json_object_get(event, "timed_out"));
        snprintf(run->signal, sizeof run->signal, "%s", signal ? signal : "");
        const char *reason = json_string_value(json_object_get(event, "reason"));
        if (reason && !run->reason)
            run->reason = strdup(reason);
    }
}

/* Joins the words into one command line; EXIT_OK or EXIT_USAGE. */
static int read_sh_request(int argc, char **argv, json_t *body, const char **id)
{
    static const struct option options[] = {
        {"cwd", required_argument, NULL, 'C'},
        {"timeout", required_argument, NULL, 'T'},
        {"env", required_argument, NULL, 'e'},
        {NULL, 0, NULL, 0},
    };
    json_t *env = json_object();
    json_object_set_new(body, "env", env);
    long long seconds;
    int option;
    while ((option = getopt_long(argc, argv, ":", options, NULL)) != -1) {
        switch (option) {
        case 'C': json_object_set_new(body, "cwd", json_string(optarg)); break;
        case 'T':
            if (!args_count(optarg, &seconds))
                return output_usage_error("sh", "--timeout takes whole seconds, not '%s'", optarg);
            json_object_set_new(body, "timeout_s", json_integer(seconds));
            break;
        case 'e':
            if (!args_key_value(optarg, env))
                return output_usage_error("sh", "--env takes NAME=VALUE, not '%s'", optarg);
            break;
        default: return args_bad_option("sh", argv, option);
        }
    }
    if (argc - optind < 2)
        return output_usage_error("sh", argc == optind ? "missing the sandbox ID and the COMMAND"
                                                       : "missing the COMMAND to run");
    *id = argv[optind++];
    char *command = NULL;
    size_t length = 0;
    FILE *text = open_memstream(&command, &length);
    for (int i = optind; i < argc; i++)
        fprintf(text, "%s%s", i > optind ? " " : "", argv[i]);
    fclose(text);
    json_object_set_new(body, "cmd", json_string(command));
    free(command);
    char *input = args_read_piped_stdin(&length);
    if (input && length) {
        json_t *stdin_text = json_stringn(input, length);
        if (!stdin_text) {
            free(input);
            output_error("stdin is not UTF-8 text; copy binary data in with `cellbox cp` instead");
            return EXIT_USAGE;
        }
        json_object_set_new(body, "stdin", stdin_text);
    }
    free(input);
    return EXIT_OK;
}

int command_sh(int argc, char **argv)
{
    if (args_wants_help(argc, argv, sh_usage))
        return EXIT_OK;
    json_t *body = json_object();
    const char *id = NULL;
    int status = read_sh_request(argc, argv, body, &id);
    if (status != EXIT_OK) {
        json_decref(body);
        return status;
    }
    shell_command run = {0};
    char *path = client_sandbox_path(id, "/commands");
    status = client_stream(path, body, handle_command_event, &run);
    free(path);
    json_decref(body);
    if (status != EXIT_OK)
        return status;
    if (!run.exited) {
        output_error("the command's stream from cellboxd stopped before it said how the command "
                     "ended; the daemon may have restarted: check `cellbox info %s`",
                     id);
        return EXIT_UNREACHABLE;
    }
    status = run.timed_out ? EXIT_TIMEOUT : run.exit_code & 0xff;
    const char *why = run.timed_out ? "the command timed out and was killed"
                      : run.reason  ? run.reason /* its sandbox ended it */
                                    : NULL;
    if (!output_json && why)
        output_error("%s", why);
    else if (!output_json && run.signal[0])
        output_error("the command was killed by %s", run.signal);
    free(run.reason);
    return status;
}
