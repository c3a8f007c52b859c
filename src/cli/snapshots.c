/* A sandbox's live state kept and branched from the command line: snapshot, snapshots, restore,
   fork, hibernate, snapshot-rm (the daemon's /v1/snapshots, /fork and /hibernate). */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/output.h"

#define FORK_COUNT_MAX 16 /* the daemon's bound of one fork request */

/* "/v1/snapshots/<id, escaped><rest>"; free() it. */
static char *snapshot_path(const char *id, const void *rest)
{
    char *escaped = client_escape(id), *path = NULL;
    if (asprintf(&path, "/v1/snapshots/%s%s", escaped, rest ? (const char *)rest : "") < 0)
        path = NULL;
    free(escaped);
    return path;
}

/* POST to `path` and print what `print` makes of the answer (or the JSON under --json). */
static int post_and_print(const char *path, json_t *body, void (*print)(json_t *reply))
{
    json_t *reply = NULL;
    int status = client_call("POST", path, body, &reply);
    if (status == EXIT_OK)
        output_json ? output_print_json(reply) : print(reply);
    json_decref(reply);
    return status;
}

/* ------------------------------------------------------------------ snapshot */

static const char snapshot_usage[] =
    "usage: cellbox snapshot ID [--name NAME] [--meta K=V]...\n"
    "\n"
    "Keeps sandbox ID's live state on the daemon's disk: every context's interpreter (its\n"
    "variables, imports, open files), the workspace's files and the sandbox's settings. The\n"
    "sandbox goes on running. Prints the snapshot's id, alone on stdout:\n"
    "SID=$(cellbox snapshot ID) works. Refused while a cell runs or the sandbox is paused.\n"
    "\n"
    "options:\n"
    "  --name NAME   a name to find it by in `cellbox snapshots` (default: its id)\n"
    "  --meta K=V    a metadata entry (repeatable)\n";

static void print_snapshot_id(json_t *snapshot)
{
    printf("%s\n", json_string_value(json_object_get(snapshot, "snapshot_id")));
}

int command_snapshot(int argc, char **argv)
{
    if (args_wants_help(argc, argv, snapshot_usage))
        return EXIT_OK;
    static const struct option options[] = {{"name", required_argument, NULL, 'n'},
                                            {"meta", required_argument, NULL, 'M'},
                                            {NULL, 0, NULL, 0}};
    json_t *body = json_object(), *metadata = json_object();
    json_object_set_new(body, "metadata", metadata);
    int option, status = EXIT_OK;
    while (status == EXIT_OK && (option = getopt_long(argc, argv, ":", options, NULL)) != -1) {
        if (option == 'n')
            json_object_set_new(body, "name", json_string(optarg));
        else if (option != 'M')
            status = args_bad_option("snapshot", argv, option);
        else if (!args_key_value(optarg, metadata))
            status = output_usage_error("snapshot", "--meta takes KEY=VALUE, not '%s'", optarg);
    }
    if (status == EXIT_OK && argc - optind != 1)
        status = output_usage_error("snapshot", argc == optind
                                                    ? "missing the sandbox ID (see `cellbox ls`)"
                                                    : "one sandbox ID at a time");
    char *path = status == EXIT_OK ? client_sandbox_path(argv[optind], "/snapshots") : NULL;
    if (path)
        status = post_and_print(path, body, print_snapshot_id);
    free(path);
    json_decref(body);
    return status;
}

/* ------------------------------------------------------------------ snapshots */

static const char snapshots_usage[] =
    "usage: cellbox snapshots [--sandbox ID]\n"
    "\n"
    "Lists the snapshots on the daemon's disk: ID, NAME, SANDBOX (the one it was taken of),\n"
    "CREATED, MEMORY and FILES (bytes kept), CONTEXTS (how each came back: process = its live\n"
    "interpreter, python = its variables only, restarted = a fresh kernel).\n"
    "\n"
    "options:\n"
    "  --sandbox ID  only the snapshots of sandbox ID\n";

/* "process,python" from the contexts' "carried" fields. */
static void format_carried(json_t *contexts, char *out, size_t size)
{
    size_t used = 0, index;
    json_t *context;
    out[0] = '\0';
    json_array_foreach(contexts, index, context)
    {
        const char *carried = json_string_value(json_object_get(context, "carried"));
        int wrote =
            snprintf(out + used, size - used, "%s%s", used ? "," : "", carried ? carried : "?");
        if (wrote < 0 || (size_t)wrote >= size - used)
            break;
        used += (size_t)wrote;
    }
    if (!out[0])
        snprintf(out, size, "-");
}

static void format_bytes_of(json_t *snapshot, const char *which, char *out, size_t size)
{
    json_t *bytes = json_object_get(json_object_get(snapshot, "bytes"), which);
    if (json_is_integer(bytes))
        output_format_size(json_integer_value(bytes), out, size);
    else
        snprintf(out, size, "-");
}

static void print_snapshot_table(json_t *list)
{
    static const char *const headers[] = {"ID",     "NAME",  "SANDBOX", "CREATED",
                                          "MEMORY", "FILES", "CONTEXTS"};
    output_table table;
    output_table_begin(&table, 7, headers);
    size_t index;
    json_t *snapshot;
    json_array_foreach(list, index, snapshot)
    {
        char created[32], memory[32], files[32], carried[128];
        output_format_relative(json_string_value(json_object_get(snapshot, "created_at")), created,
                               sizeof created);
        format_bytes_of(snapshot, "memory", memory, sizeof memory);
        format_bytes_of(snapshot, "files", files, sizeof files);
        format_carried(json_object_get(snapshot, "contexts"), carried, sizeof carried);
        const char *name = json_string_value(json_object_get(snapshot, "name"));
        const char *sandbox = json_string_value(json_object_get(snapshot, "sandbox_id"));
        const char *row[] = {json_string_value(json_object_get(snapshot, "snapshot_id")),
                             name ? name : "-",
                             sandbox ? sandbox : "-",
                             created,
                             memory,
                             files,
                             carried};
        output_table_add(&table, row);
    }
    output_table_print(&table);
}

int command_snapshots(int argc, char **argv)
{
    if (args_wants_help(argc, argv, snapshots_usage))
        return EXIT_OK;
    static const struct option options[] = {{"sandbox", required_argument, NULL, 's'},
                                            {NULL, 0, NULL, 0}};
    const char *sandbox_id = NULL;
    int option;
    while ((option = getopt_long(argc, argv, ":", options, NULL)) != -1) {
        if (option != 's')
            return args_bad_option("snapshots", argv, option);
        sandbox_id = optarg;
    }
    if (optind < argc)
        return output_usage_error("snapshots", "unexpected argument '%s'", argv[optind]);
    char *escaped = sandbox_id ? client_escape(sandbox_id) : NULL, *path = NULL;
    if (asprintf(&path, "/v1/snapshots%s%s", escaped ? "?sandbox_id=" : "",
                 escaped ? escaped : "") < 0)
        path = NULL;
    free(escaped);
    json_t *list = NULL;
    int status = path ? client_get_list(path, &list) : EXIT_FAILED;
    free(path);
    if (status == EXIT_OK && list)
        print_snapshot_table(list);
    json_decref(list);
    return status;
}

/* ------------------------------------------------------------------ restore */

static const char restore_usage[] =
    "usage: cellbox restore SNAPSHOT [--into ID] [--timeout SECONDS]\n"
    "\n"
    "Makes a sandbox from a snapshot and prints its id: a new sandbox, or with --into the\n"
    "snapshot's own sandbox rewound in place (its id, URL and token kept; its contexts and\n"
    "files replaced). A context that could not come back as its live interpreter is named on\n"
    "stderr with what was carried. A snapshot changed outside cellbox is refused.\n"
    "\n"
    "options:\n"
    "  --into ID          rewind sandbox ID (the one the snapshot was taken of)\n"
    "  --timeout SECONDS  the new sandbox is removed this long from now; 0 = never\n";

/* Says on stderr which contexts came back other than as their live process. */
static void print_restored(json_t *model)
{
    printf("%s\n", json_string_value(json_object_get(model, "id")));
    size_t index;
    json_t *context;
    json_array_foreach(json_object_get(json_object_get(model, "restore"), "contexts"), index,
                       context)
    {
        const char *carried = json_string_value(json_object_get(context, "carried"));
        if (!carried || strcmp(carried, "process") == 0)
            continue;
        char *report = json_dumps(json_object_get(context, "report"), JSON_COMPACT);
        fprintf(stderr, "cellbox: context %s came back as %s%s%s\n",
                json_string_value(json_object_get(context, "context_id")), carried,
                report ? ": " : "", report ? report : "");
        free(report);
    }
}

int command_restore(int argc, char **argv)
{
    if (args_wants_help(argc, argv, restore_usage))
        return EXIT_OK;
    static const struct option options[] = {{"into", required_argument, NULL, 'i'},
                                            {"timeout", required_argument, NULL, 'T'},
                                            {NULL, 0, NULL, 0}};
    json_t *body = json_object();
    long long seconds;
    int option, status = EXIT_OK;
    while (status == EXIT_OK && (option = getopt_long(argc, argv, ":", options, NULL)) != -1) {
        if (option == 'i')
            json_object_set_new(body, "sandbox_id", json_string(optarg));
        else if (option != 'T')
            status = args_bad_option("restore", argv, option);
        else if (!args_count(optarg, &seconds))
            status =
                output_usage_error("restore", "--timeout takes whole seconds, not '%s'", optarg);
        else
            json_object_set_new(body, "timeout", json_integer(seconds));
    }
    if (status == EXIT_OK && argc - optind != 1)
        status =
            output_usage_error("restore", argc == optind ? "missing the SNAPSHOT id (see `cellbox "
                                                           "snapshots`)"
                                                         : "one SNAPSHOT at a time");
    char *path = status == EXIT_OK ? snapshot_path(argv[optind], "/restore") : NULL;
    if (path)
        status = post_and_print(path, body, print_restored);
    free(path);
    json_decref(body);
    return status;
}

/* ------------------------------------------------------------------ fork */

static const char fork_usage[] =
    "usage: cellbox fork ID [-n COUNT] [--timeout SECONDS]\n"
    "\n"
    "Makes COUNT new sandboxes (default 1, at most 16), each a copy of sandbox ID's live state\n"
    "(every context's interpreter) and files, isolated from ID and from each other; ID stands\n"
    "still only while its memory is read. Prints one new sandbox id a line; a fork that did\n"
    "not start is named on stderr (exit status 4).\n"
    "\n"
    "options:\n"
    "  -n, --count COUNT  how many forks\n"
    "  --timeout SECONDS  the forks are removed this long from now; 0 = never\n";

/* Prints the forks that started on stdout, the others on stderr; EXIT_REFUSED if any failed. */
static int print_forks(json_t *results)
{
    int status = EXIT_OK;
    size_t index;
    json_t *result;
    json_array_foreach(results, index, result)
    {
        json_t *sandbox = json_object_get(result, "sandbox");
        json_t *error = json_object_get(result, "error");
        if (sandbox) {
            printf("%s\n", json_string_value(json_object_get(sandbox, "id")));
            continue;
        }
        output_error("fork %zu did not start (%lld): %s", index + 1,
                     (long long)json_integer_value(json_object_get(error, "status")),
                     json_string_value(json_object_get(error, "message")));
        status = EXIT_REFUSED;
    }
    return status;
}

/* The fork request's body from the options; EXIT_OK or EXIT_USAGE. */
static int read_fork_options(int argc, char **argv, json_t *body)
{
    static const struct option options[] = {{"count", required_argument, NULL, 'n'},
                                            {"timeout", required_argument, NULL, 'T'},
                                            {NULL, 0, NULL, 0}};
    long long number;
    int option;
    while ((option = getopt_long(argc, argv, ":n:", options, NULL)) != -1) {
        if (option != 'n' && option != 'T')
            return args_bad_option("fork", argv, option);
        if (!args_count(optarg, &number))
            return output_usage_error("fork", "%s takes a whole number, not '%s'",
                                      option == 'n' ? "-n" : "--timeout", optarg);
        if (option == 'n' && (number < 1 || number > FORK_COUNT_MAX))
            return output_usage_error("fork", "-n takes 1 to %d forks, not %lld", FORK_COUNT_MAX,
                                      number);
        json_object_set_new(body, option == 'n' ? "count" : "timeout", json_integer(number));
    }
    if (argc - optind != 1)
        return output_usage_error("fork", argc == optind
                                              ? "missing the sandbox ID (see `cellbox ls`)"
                                              : "one sandbox ID at a time");
    return EXIT_OK;
}

int command_fork(int argc, char **argv)
{
    if (args_wants_help(argc, argv, fork_usage))
        return EXIT_OK;
    json_t *body = json_object(), *results = NULL;
    int status = read_fork_options(argc, argv, body);
    char *path = status == EXIT_OK ? client_sandbox_path(argv[optind], "/fork") : NULL;
    bool answered = false;
    if (path) {
        status = client_call("POST", path, body, &results);
        answered = status == EXIT_OK;
    }
    free(path);
    json_decref(body);
    if (answered && output_json)
        output_print_json(results);
    else if (answered)
        status = print_forks(results);
    json_decref(results);
    return status;
}

/* ------------------------------------------------------------------ hibernate, snapshot-rm */

static const char hibernate_usage[] =
    "usage: cellbox hibernate ID\n"
    "\n"
    "Keeps sandbox ID only as a snapshot on the daemon's disk and frees its memory: its\n"
    "processes end, its files stay, and it is listed as hibernated (also after a daemon\n"
    "restart). `cellbox resume ID`, or any call that needs it, brings it back as it was.\n";

static void print_hibernated(json_t *model)
{
    const char *snapshot = json_string_value(json_object_get(model, "snapshot_id"));
    printf("hibernated %s (snapshot %s)\n", json_string_value(json_object_get(model, "id")),
           snapshot ? snapshot : "-");
}

int command_hibernate(int argc, char **argv)
{
    if (args_wants_help(argc, argv, hibernate_usage))
        return EXIT_OK;
    int status = args_positional("hibernate", argc, argv, 1, "the sandbox ID (see `cellbox ls`)");
    char *path = status == EXIT_OK ? client_sandbox_path(argv[optind], "/hibernate") : NULL;
    if (path)
        status = post_and_print(path, NULL, print_hibernated);
    free(path);
    return status;
}

static const char snapshot_rm_usage[] =
    "usage: cellbox snapshot-rm SNAPSHOT...\n"
    "\n"
    "Removes snapshots from the daemon's disk. A hibernated sandbox's snapshot is kept while\n"
    "the sandbox is (remove the sandbox, or resume it, first).\n";

int command_snapshot_rm(int argc, char **argv)
{
    if (args_wants_help(argc, argv, snapshot_rm_usage))
        return EXIT_OK;
    static const struct option none[] = {{NULL, 0, NULL, 0}};
    int option;
    while ((option = getopt_long(argc, argv, ":", none, NULL)) != -1)
        return args_bad_option("snapshot-rm", argv, option);
    if (optind == argc)
        return output_usage_error("snapshot-rm",
                                  "missing the SNAPSHOT id(s) (see `cellbox snapshots`)");
    return client_delete_each(argv + optind, argc - optind, snapshot_path, NULL);
}
