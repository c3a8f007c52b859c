/* cellbox logs: a sandbox's recent output and events, and --follow, which polls for new ones. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/output.h"

static const char logs_usage[] =
    "usage: cellbox logs ID [--limit N] [--follow]\n"
    "\n"
    "Shows the sandbox's log, oldest first: what executions and commands printed, and its\n"
    "events. The daemon keeps the last 1000 entries.\n"
    "\n"
    "options:\n"
    "  --limit N      the last N entries (default: the daemon's, 200)\n"
    "  -f, --follow   keep printing new entries (checks every second) until the sandbox goes\n";

/* Entries come oldest first and carry no id: what was printed is remembered as the newest
   timestamp shown and how many entries with exactly that timestamp were shown. */
typedef struct log_position {
    char *newest;     /* timestamp of the last entry shown; NULL before the first */
    size_t at_newest; /* entries shown with that very timestamp */
} log_position;

static void print_entry(json_t *entry)
{
    if (output_json) {
        json_dumpf(entry, stdout, JSON_COMPACT);
        fputc('\n', stdout);
        return;
    }
    const char *timestamp = json_string_value(json_object_get(entry, "timestamp"));
    const char *source = json_string_value(json_object_get(entry, "source"));
    const char *stream = json_string_value(json_object_get(entry, "stream"));
    const char *text = json_string_value(json_object_get(entry, "text"));
    /* Seconds are enough to read a log by; the full timestamp is in --json. */
    char when[32];
    snprintf(when, sizeof when, "%.19s", timestamp ? timestamp : "-");
    /* One log line per line of text, each with its time and origin, for grep. */
    const char *line = text ? text : "";
    for (;;) {
        const char *end = strchr(line, '\n');
        int length = end ? (int)(end - line) : (int)strlen(line);
        printf("%s %s/%s  %.*s\n", when, source ? source : "?", stream ? stream : "?", length,
               line);
        if (!end || !end[1])
            break;
        line = end + 1;
    }
}

static void print_new_entries(json_t *entries, log_position *position)
{
    char *since = position->newest ? strdup(position->newest) : NULL;
    size_t skip = position->at_newest, index;
    json_t *entry;
    json_array_foreach(entries, index, entry)
    {
        const char *timestamp = json_string_value(json_object_get(entry, "timestamp"));
        if (!timestamp)
            timestamp = "";
        if (since) {
            int order = strcmp(timestamp, since);
            if (order < 0)
                continue;
            if (order == 0 && skip > 0) {
                skip--;
                continue;
            }
        }
        print_entry(entry);
        if (position->newest && !strcmp(timestamp, position->newest)) {
            position->at_newest++;
        } else {
            free(position->newest);
            position->newest = strdup(timestamp);
            position->at_newest = 1;
        }
    }
    free(since);
    fflush(stdout);
}

static char *logs_path(const char *id, long long limit)
{
    char rest[64] = "/logs";
    if (limit >= 0)
        snprintf(rest, sizeof rest, "/logs?limit=%lld", limit);
    return client_sandbox_path(id, rest);
}

/* Polls once a second until the sandbox is removed (then EXIT_OK) or the daemon goes away. */
static int follow(const char *id, log_position *position)
{
    char *path = logs_path(id, 1000);
    int status;
    for (;;) {
        sleep(1);
        json_t *entries = NULL;
        long http_status;
        status = client_call_status("GET", path, NULL, &http_status, &entries);
        if (status != EXIT_OK)
            break;
        if (http_status == 404) {
            if (!output_json)
                fprintf(stderr, "cellbox: sandbox %s is gone\n", id);
            json_decref(entries);
            break;
        }
        if (http_status >= 300) {
            status = client_report_refusal(http_status, entries);
            json_decref(entries);
            break;
        }
        print_new_entries(entries, position);
        json_decref(entries);
    }
    free(path);
    return status;
}

int command_logs(int argc, char **argv)
{
    static const struct option options[] = {
        {"limit", required_argument, NULL, 'l'},
        {"follow", no_argument, NULL, 'f'},
        {NULL, 0, NULL, 0},
    };
    if (args_wants_help(argc, argv, logs_usage))
        return EXIT_OK;
    long long limit = -1;
    bool following = false;
    int option;
    while ((option = getopt_long(argc, argv, ":f", options, NULL)) != -1) {
        if (option == 'f')
            following = true;
        else if (option == 'l' && !args_count(optarg, &limit))
            return output_usage_error("logs", "--limit takes a whole number, not '%s'", optarg);
        else if (option != 'l')
            return args_bad_option("logs", argv, option);
    }
    if (argc - optind != 1)
        return output_usage_error("logs", argc == optind ? "missing the sandbox ID"
                                                         : "takes one sandbox ID");
    const char *id = argv[optind];
    char *path = logs_path(id, limit);
    json_t *entries = NULL;
    int status = client_call("GET", path, NULL, &entries);
    free(path);
    if (status != EXIT_OK)
        return status;
    log_position position = {0};
    if (output_json && !following)
        output_print_json(entries);
    else
        print_new_entries(entries, &position);
    json_decref(entries);
    if (following)
        status = follow(id, &position);
    free(position.newest);
    return status;
}
