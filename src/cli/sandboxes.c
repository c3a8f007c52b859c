/* The sandbox's life from the command line: create, ls, info, rm, pause, resume, timeout,
   restart. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/network.h"
#include "cli/output.h"

/* ------------------------------------------------------------------ create */

static const char create_usage[] =
    "usage: cellbox create [OPTIONS]\n"
    "\n"
    "Starts a sandbox and prints its id, alone on stdout: ID=$(cellbox create) works.\n"
    "\n"
    "options:\n"
    "  --template NAME     the kernel template (default: the daemon's, python3)\n"
    "  --timeout SECONDS   remove the sandbox this long from now; 0 = never\n"
    "  --memory SIZE       memory limit, e.g. 512M or 2G\n"
    "  --cpus N            CPU cores, e.g. 1 or 0.5\n"
    "  --disk SIZE         size of /workspace and /tmp, e.g. 1G\n"
    "  --pids N            processes and threads\n"
    "  --network           let the sandbox reach the network (if the daemon allows it)\n"
    "  --allow-out ADDRESS with network, may reach ADDRESS (an address or CIDR) even when\n"
    "                      --deny-out covers it (repeatable; implies --network)\n"
    "  --deny-out ADDRESS  with network, may not reach ADDRESS; 0.0.0.0/0: everything but\n"
    "                      --allow-out (repeatable; implies --network)\n"
    "  --env K=V           an environment variable of every context and command (repeatable)\n"
    "  --meta K=V          a metadata entry, for `cellbox ls --meta` (repeatable)\n"
    "  --volume NAME:PATH  mount the named volume at PATH inside, e.g. data:/mnt/data\n"
    "                      (repeatable; see cellbox volume)\n";

/* Reads create's options into the request body; EXIT_OK or EXIT_USAGE. */
static int read_create_options(int argc, char **argv, json_t *body)
{
    static const struct option options[] = {
        {"template", required_argument, NULL, 't'}, {"timeout", required_argument, NULL, 'T'},
        {"memory", required_argument, NULL, 'm'},   {"cpus", required_argument, NULL, 'c'},
        {"disk", required_argument, NULL, 'd'},     {"pids", required_argument, NULL, 'p'},
        {"network", no_argument, NULL, 'n'},        {"env", required_argument, NULL, 'e'},
        {"meta", required_argument, NULL, 'M'},     {"volume", required_argument, NULL, 'V'},
        {"allow-out", required_argument, NULL, 'a'}, {"deny-out", required_argument, NULL, 'D'},
        {NULL, 0, NULL, 0},
    };
    json_t *env = json_object(), *metadata = json_object(), *limits = json_object();
    json_t *volumes = json_object();
    json_object_set_new(body, "volumes", volumes);
    json_object_set_new(body, "env", env);
    json_object_set_new(body, "metadata", metadata);
    json_object_set_new(body, "limits", limits);
    long long count;
    double cores;
    int option;
    while ((option = getopt_long(argc, argv, ":e:", options, NULL)) != -1) {
        switch (option) {
        case 't': json_object_set_new(body, "template", json_string(optarg)); break;
        case 'T':
            if (!args_count(optarg, &count))
                return output_usage_error("create", "--timeout takes whole seconds, not '%s'",
                                          optarg);
            json_object_set_new(body, "timeout_s", json_integer(count));
            break;
        case 'm': json_object_set_new(limits, "memory", json_string(optarg)); break;
        case 'd': json_object_set_new(limits, "disk", json_string(optarg)); break;
        case 'c':
            if (!args_fraction(optarg, &cores))
                return output_usage_error("create", "--cpus takes a number of cores, not '%s'",
                                          optarg);
            json_object_set_new(limits, "cpus", json_real(cores));
            break;
        case 'p':
            if (!args_count(optarg, &count))
                return output_usage_error("create", "--pids takes a whole number, not '%s'",
                                          optarg);
            json_object_set_new(limits, "pids", json_integer(count));
            break;
        case 'n':
            if (!json_is_object(json_object_get(body, "network")))
                json_object_set_new(body, "network", json_true());
            break;
        case 'a': network_add_entry(body, true, optarg); break;
        case 'D': network_add_entry(body, false, optarg); break;
        case 'e':
            if (!args_key_value(optarg, env))
                return output_usage_error("create", "--env takes NAME=VALUE, not '%s'", optarg);
            break;
        case 'M':
            if (!args_key_value(optarg, metadata))
                return output_usage_error("create", "--meta takes KEY=VALUE, not '%s'", optarg);
            break;
        case 'V':
            if (!args_volume_mount(optarg, volumes))
                return output_usage_error("create", "--volume takes NAME:/PATH, e.g. "
                                          "data:/mnt/data, not '%s'", optarg);
            break;
        default: return args_bad_option("create", argv, option);
        }
    }
    if (optind < argc)
        return output_usage_error("create", "unexpected argument '%s'", argv[optind]);
    return EXIT_OK;
}

int command_create(int argc, char **argv)
{
    if (args_wants_help(argc, argv, create_usage))
        return EXIT_OK;
    json_t *body = json_object(), *model = NULL;
    int status = read_create_options(argc, argv, body);
    if (status == EXIT_OK)
        status = client_call("POST", "/v1/sandboxes", body, &model);
    json_decref(body);
    if (status != EXIT_OK)
        return status;
    if (output_json)
        output_print_json(model);
    else
        printf("%s\n", json_string_value(json_object_get(model, "id")));
    json_decref(model);
    return EXIT_OK;
}

/* ------------------------------------------------------------------ ls */

static const char ls_usage[] =
    "usage: cellbox ls [--state running|paused|dead] [--meta K=V]...\n"
    "\n"
    "Lists the sandboxes: ID, STATE, TEMPLATE, STARTED, ENDS, MEMORY (used/limit), META.\n"
    "--meta keeps those whose metadata has every KEY=VALUE given.\n";

/* "?state=...&metadata.K=V..." from ls's options; EXIT_OK or EXIT_USAGE. */
static int read_ls_filters(int argc, char **argv, char **query)
{
    static const struct option options[] = {
        {"state", required_argument, NULL, 's'},
        {"meta", required_argument, NULL, 'M'},
        {NULL, 0, NULL, 0},
    };
    size_t length = 0;
    FILE *text = open_memstream(query, &length);
    int option;
    char separator = '?';
    while ((option = getopt_long(argc, argv, ":s:", options, NULL)) != -1) {
        char *key, *value, *equals;
        switch (option) {
        case 's':
            value = client_escape(optarg);
            fprintf(text, "%cstate=%s", separator, value);
            free(value);
            break;
        case 'M':
            equals = strchr(optarg, '=');
            if (!equals || equals == optarg) {
                fclose(text);
                return output_usage_error("ls", "--meta takes KEY=VALUE, not '%s'", optarg);
            }
            *equals = '\0';
            key = client_escape(optarg);
            value = client_escape(equals + 1);
            fprintf(text, "%cmetadata.%s=%s", separator, key, value);
            free(key);
            free(value);
            break;
        default: fclose(text); return args_bad_option("ls", argv, option);
        }
        separator = '&';
    }
    fclose(text);
    if (optind < argc)
        return output_usage_error("ls", "unexpected argument '%s'", argv[optind]);
    return EXIT_OK;
}

/* A limit of the model by its documented name ("memory_bytes"), or by the short name the
   kernel API's limits object uses ("memory"). */
static json_t *limit_of(json_t *model, const char *name, const char *short_name)
{
    json_t *limits = json_object_get(model, "limits");
    json_t *value = json_object_get(limits, name);
    return value ? value : json_object_get(limits, short_name);
}

static void format_metadata(json_t *metadata, char *out, size_t size)
{
    const char *key;
    json_t *value;
    size_t used = 0;
    out[0] = '\0';
    json_object_foreach(metadata, key, value)
    {
        const char *text = json_string_value(value);
        int wrote =
            snprintf(out + used, size - used, "%s%s=%s", used ? "," : "", key, text ? text : "?");
        if (wrote < 0 || (size_t)wrote >= size - used)
            break;
        used += (size_t)wrote;
    }
}

static void format_memory(json_t *model, char *out, size_t size)
{
    json_t *used = json_object_get(json_object_get(model, "usage"), "memory_bytes");
    json_t *limit = limit_of(model, "memory_bytes", "memory");
    char used_text[32], limit_text[32];
    output_format_size(json_integer_value(limit), limit_text, sizeof limit_text);
    if (!json_is_integer(used)) {
        snprintf(out, size, "%s", json_is_integer(limit) ? limit_text : "-");
        return;
    }
    output_format_size(json_integer_value(used), used_text, sizeof used_text);
    snprintf(out, size, "%s/%s", used_text, limit_text);
}

static void format_ends(json_t *model, char *out, size_t size)
{
    const char *state = json_string_value(json_object_get(model, "state"));
    const char *ends = json_string_value(json_object_get(model, "ends_at"));
    if (state && strcmp(state, "running"))
        snprintf(out, size, "-");
    else if (!ends)
        snprintf(out, size, "never");
    else
        output_format_relative(ends, out, size);
}

int command_ls(int argc, char **argv)
{
    if (args_wants_help(argc, argv, ls_usage))
        return EXIT_OK;
    char *query = NULL, *path = NULL;
    json_t *list = NULL;
    int status = read_ls_filters(argc, argv, &query);
    if (status == EXIT_OK && asprintf(&path, "/v1/sandboxes%s", query) >= 0)
        status = client_get_list(path, &list);
    free(query);
    free(path);
    if (status != EXIT_OK || !list)
        return status;
    static const char *const headers[] = {"ID",   "STATE",  "TEMPLATE", "STARTED",
                                          "ENDS", "MEMORY", "META"};
    output_table table;
    output_table_begin(&table, 7, headers);
    size_t index;
    json_t *model;
    json_array_foreach(list, index, model)
    {
        char started[32], ends[32], memory[64], metadata[512];
        output_format_relative(json_string_value(json_object_get(model, "started_at")), started,
                               sizeof started);
        format_ends(model, ends, sizeof ends);
        format_memory(model, memory, sizeof memory);
        format_metadata(json_object_get(model, "metadata"), metadata, sizeof metadata);
        const char *row[] = {json_string_value(json_object_get(model, "id")),
                             json_string_value(json_object_get(model, "state")),
                             json_string_value(json_object_get(model, "template")),
                             started,
                             ends,
                             memory,
                             metadata};
        output_table_add(&table, row);
    }
    output_table_print(&table);
    json_decref(list);
    return EXIT_OK;
}

/* ------------------------------------------------------------------ info */

static const char info_usage[] =
    "usage: cellbox info ID\n"
    "\n"
    "Shows a sandbox: state, times, limits, what it uses now, its network (none, or its\n"
    "address and egress lists), metadata and contexts.\n";

static void print_size_line(const char *label, json_t *used, json_t *limit)
{
    char used_text[32], limit_text[32];
    output_format_size(json_integer_value(limit), limit_text, sizeof limit_text);
    if (json_is_integer(used)) {
        output_format_size(json_integer_value(used), used_text, sizeof used_text);
        printf("%-10s%s used of %s\n", label, used_text, limit_text);
    } else {
        printf("%-10s%s\n", label, limit_text);
    }
}

static void print_model(json_t *model)
{
    json_t *limits = json_object_get(model, "limits"), *usage = json_object_get(model, "usage");
    const char *started = json_string_value(json_object_get(model, "started_at"));
    const char *reason = json_string_value(json_object_get(model, "reason"));
    char when[32], ends[32], metadata[1024];
    printf("%-10s%s\n", "id:", json_string_value(json_object_get(model, "id")));
    printf("%-10s%s\n", "state:", json_string_value(json_object_get(model, "state")));
    if (reason)
        printf("%-10s%s\n", "reason:", reason);
    const char *snapshot = json_string_value(json_object_get(model, "snapshot_id"));
    if (snapshot) /* hibernated: kept only as this snapshot */
        printf("%-10s%s (`cellbox resume %s` wakes it)\n", "snapshot:", snapshot,
               json_string_value(json_object_get(model, "id")));
    printf("%-10s%s\n", "template:", json_string_value(json_object_get(model, "template")));
    output_format_relative(started, when, sizeof when);
    printf("%-10s%s (%s)\n", "started:", started ? started : "-", when);
    format_ends(model, ends, sizeof ends);
    printf("%-10s%s (timeout %llds)\n", "ends:", ends,
           (long long)json_integer_value(json_object_get(model, "timeout_s")));
    print_size_line("memory:", json_object_get(usage, "memory_bytes"),
                    limit_of(model, "memory_bytes", "memory"));
    print_size_line("disk:", json_object_get(usage, "disk_bytes"),
                    limit_of(model, "disk_bytes", "disk"));
    printf("%-10s%.2fs used, %g core(s)\n",
           "cpu:", json_number_value(json_object_get(usage, "cpu_seconds")),
           json_number_value(json_object_get(limits, "cpus")));
    printf("%-10s%lld\n", "pids:", (long long)json_integer_value(json_object_get(limits, "pids")));
    network_print(json_object_get(model, "network"));
    format_metadata(json_object_get(model, "metadata"), metadata, sizeof metadata);
    printf("%-10s%s\n", "metadata:", metadata[0] ? metadata : "-");
    const char *volume;
    json_t *path;
    bool first_volume = true;
    json_object_foreach(json_object_get(model, "volumes"), volume, path) {
        printf("%-10s%s at %s\n", first_volume ? "volumes:" : "", volume, json_string_value(path));
        first_volume = false;
    }
    size_t index;
    json_t *context;
    json_array_foreach(json_object_get(model, "contexts"), index, context)
    {
        printf("%-10s%s  %s  %s  %s%s\n",
               index ? "" : "contexts:", json_string_value(json_object_get(context, "id")),
               json_string_value(json_object_get(context, "language")),
               json_string_value(json_object_get(context, "cwd")),
               json_string_value(json_object_get(context, "state")),
               json_is_true(json_object_get(context, "default")) ? "  (default)" : "");
    }
}

int command_info(int argc, char **argv)
{
    if (args_wants_help(argc, argv, info_usage))
        return EXIT_OK;
    int status = args_positional("info", argc, argv, 1, "the sandbox ID (see `cellbox ls`)");
    if (status != EXIT_OK)
        return status;
    char *path = client_sandbox_path(argv[optind], "");
    json_t *model = NULL;
    status = client_call("GET", path, NULL, &model);
    free(path);
    if (status != EXIT_OK)
        return status;
    if (output_json)
        output_print_json(model);
    else
        print_model(model);
    json_decref(model);
    return EXIT_OK;
}

/* ------------------------------------------------------------------ rm, pause, resume, timeout */

static const char rm_usage[] =
    "usage: cellbox rm ID...\n"
    "\n"
    "Removes sandboxes: every process, the cgroup and the workspace go.\n";

/* "/v1/sandboxes/<id, escaped>", for client_delete_each. */
static char *sandbox_path(const char *id, const void *context)
{
    return client_sandbox_path(id, "");
}

int command_rm(int argc, char **argv)
{
    if (args_wants_help(argc, argv, rm_usage))
        return EXIT_OK;
    static const struct option none[] = {{NULL, 0, NULL, 0}};
    int option;
    while ((option = getopt_long(argc, argv, ":", none, NULL)) != -1)
        return args_bad_option("rm", argv, option);
    if (optind == argc)
        return output_usage_error("rm", "missing the sandbox ID(s) (see `cellbox ls`)");
    return client_delete_each(argv + optind, argc - optind, sandbox_path, NULL);
}

/* POSTs to /v1/sandboxes/ID/<action> and shows the model it answers. */
static int sandbox_action(const char *id, const char *action, json_t *body, const char *done)
{
    char *rest, *path;
    if (asprintf(&rest, "/%s", action) < 0)
        return EXIT_FAILED;
    path = client_sandbox_path(id, rest);
    free(rest);
    json_t *model = NULL;
    int status = client_call("POST", path, body, &model);
    free(path);
    if (status != EXIT_OK)
        return status;
    if (output_json) {
        output_print_json(model);
    } else {
        char ends[32];
        format_ends(model, ends, sizeof ends);
        printf("%s %s (%s)\n", done, id,
               !strcmp(ends, "never") ? "never expires"
               : !strcmp(ends, "-")   ? "TTL stopped"
                                      : ends);
    }
    json_decref(model);
    return EXIT_OK;
}

static const char pause_usage[] =
    "usage: cellbox pause ID\n"
    "\n"
    "Freezes every process of the sandbox; memory is kept and its timeout stops counting.\n";

int command_pause(int argc, char **argv)
{
    if (args_wants_help(argc, argv, pause_usage))
        return EXIT_OK;
    int status = args_positional("pause", argc, argv, 1, "the sandbox ID (see `cellbox ls`)");
    return status == EXIT_OK ? sandbox_action(argv[optind], "pause", NULL, "paused") : status;
}

static const char resume_usage[] =
    "usage: cellbox resume ID\n"
    "\n"
    "Thaws a paused sandbox; its timeout starts again from the full length.\n";

int command_resume(int argc, char **argv)
{
    if (args_wants_help(argc, argv, resume_usage))
        return EXIT_OK;
    int status = args_positional("resume", argc, argv, 1, "the sandbox ID (see `cellbox ls`)");
    return status == EXIT_OK ? sandbox_action(argv[optind], "resume", NULL, "resumed") : status;
}

static const char timeout_usage[] = "usage: cellbox timeout ID SECONDS\n"
                                    "\n"
                                    "The sandbox is removed SECONDS from now; 0 = never.\n";

int command_timeout(int argc, char **argv)
{
    if (args_wants_help(argc, argv, timeout_usage))
        return EXIT_OK;
    int status = args_positional("timeout", argc, argv, 2, "the sandbox ID and SECONDS");
    if (status != EXIT_OK)
        return status;
    long long seconds;
    if (!args_count(argv[optind + 1], &seconds))
        return output_usage_error("timeout", "SECONDS must be a whole number, not '%s'",
                                  argv[optind + 1]);
    json_t *body = json_pack("{s:I}", "timeout_s", (json_int_t)seconds);
    status = sandbox_action(argv[optind], "timeout", body, "timeout set:");
    json_decref(body);
    return status;
}

/* ------------------------------------------------------------------ restart */

static const char restart_usage[] =
    "usage: cellbox restart ID [--context CID]\n"
    "\n"
    "Restarts a context's Python kernel: its variables and imports are gone, the files stay.\n"
    "Without --context the default context restarts, and with it the whole sandbox: its\n"
    "processes and /tmp go, /workspace stays. A dead sandbox comes back this way.\n"
    "\n"
    "options:\n"
    "  --context CID       restart that context only (see `cellbox info ID`)\n";

int command_restart(int argc, char **argv)
{
    if (args_wants_help(argc, argv, restart_usage))
        return EXIT_OK;
    static const struct option options[] = {
        {"context", required_argument, NULL, 'c'},
        {NULL, 0, NULL, 0},
    };
    const char *context_id = NULL;
    int option;
    while ((option = getopt_long(argc, argv, ":", options, NULL)) != -1) {
        if (option != 'c')
            return args_bad_option("restart", argv, option);
        context_id = optarg;
    }
    if (optind == argc)
        return output_usage_error("restart", "missing the sandbox ID (see `cellbox ls`)");
    if (argc - optind > 1)
        return output_usage_error("restart", "unexpected argument '%s'", argv[optind + 1]);
    const char *id = argv[optind];
    /* The default context's id is the sandbox's own. */
    char *escaped = client_escape(context_id ? context_id : id), *rest, *path;
    if (asprintf(&rest, "/contexts/%s/restart", escaped) < 0)
        rest = NULL;
    free(escaped);
    path = rest ? client_sandbox_path(id, rest) : NULL;
    free(rest);
    if (!path)
        return EXIT_FAILED;
    json_t *context = NULL;
    int status = client_call("POST", path, NULL, &context);
    free(path);
    if (status != EXIT_OK)
        return status;
    if (output_json)
        output_print_json(context);
    else if (json_is_true(json_object_get(context, "default")))
        printf("restarted %s\n", id);
    else
        printf("restarted context %s of %s\n", json_string_value(json_object_get(context, "id")),
               id);
    json_decref(context);
    return EXIT_OK;
}
