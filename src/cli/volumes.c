/* Named volumes from the command line: cellbox volume create|ls|rm. A sandbox mounts them with
   cellbox create --volume NAME:/PATH (sandboxes.c). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/output.h"

static const char volume_usage[] =
    "usage: cellbox volume create NAME [--size SIZE]\n"
    "       cellbox volume ls\n"
    "       cellbox volume rm NAME... [--force]\n"
    "\n"
    "Named volumes: disks of a fixed size that outlive sandboxes and mount into several at once\n"
    "(cellbox create --volume NAME:/mnt/data). A NAME is 1 to 63 letters, digits, '_' or '-'.\n"
    "Every sandbox that mounts one reads and writes all of its files. A volume is removed only\n"
    "by `cellbox volume rm`, which refuses while a sandbox mounts it unless --force is given\n"
    "(those sandboxes keep it until they end).\n"
    "\n"
    "  --size SIZE   the volume's size limit, e.g. 512M or 4G (default 1G); writes past it fail\n"
    "                with 'No space left on device'\n";

/* "/v1/volumes/<name, escaped><query>" (query: a string); free() it. */
static char *volume_path(const char *name, const void *query)
{
    char *escaped = client_escape(name), *path = NULL;
    if (asprintf(&path, "/v1/volumes/%s%s", escaped, (const char *)query) < 0)
        path = NULL;
    free(escaped);
    return path;
}

static int create_volume(int argc, char **argv)
{
    static const struct option options[] = {{"size", required_argument, NULL, 's'},
                                            {NULL, 0, NULL, 0}};
    json_t *body = json_object();
    int option;
    while ((option = getopt_long(argc, argv, ":s:", options, NULL)) != -1) {
        if (option != 's') {
            json_decref(body);
            return args_bad_option("volume create", argv, option);
        }
        json_object_set_new(body, "size", json_string(optarg));
    }
    if (argc - optind != 1) {
        json_decref(body);
        return output_usage_error("volume create", argc == optind ? "missing the volume's NAME"
                                                                   : "one NAME at a time");
    }
    json_object_set_new(body, "name", json_string(argv[optind]));
    json_t *model = NULL;
    int status = client_call("POST", "/v1/volumes", body, &model);
    json_decref(body);
    if (status == EXIT_OK && output_json)
        output_print_json(model);
    else if (status == EXIT_OK)
        printf("%s\n", json_string_value(json_object_get(model, "name")));
    json_decref(model);
    return status;
}

static int list_volumes(int argc, char **argv)
{
    int status = args_positional("volume ls", argc, argv, 0, "");
    json_t *list = NULL;
    if (status == EXIT_OK)
        status = client_get_list("/v1/volumes", &list);
    if (status != EXIT_OK || !list)
        return status;
    static const char *const headers[] = {"NAME", "SIZE", "USED", "CREATED", "SANDBOXES"};
    output_table table;
    output_table_begin(&table, 5, headers);
    size_t index;
    json_t *model;
    json_array_foreach(list, index, model) {
        char size[32], used[32] = "-", created[32];
        output_format_size(json_integer_value(json_object_get(model, "size_bytes")), size,
                           sizeof size);
        if (json_is_integer(json_object_get(model, "used_bytes")))
            output_format_size(json_integer_value(json_object_get(model, "used_bytes")), used,
                               sizeof used);
        output_format_relative(json_string_value(json_object_get(model, "created_at")), created,
                               sizeof created);
        char *users = json_dumps(json_object_get(model, "sandboxes"), JSON_COMPACT);
        const char *row[] = {json_string_value(json_object_get(model, "name")), size, used,
                             created, users && strcmp(users, "[]") != 0 ? users : "-"};
        output_table_add(&table, row);
        free(users);
    }
    output_table_print(&table);
    json_decref(list);
    return EXIT_OK;
}

static int remove_volumes(int argc, char **argv)
{
    static const struct option options[] = {{"force", no_argument, NULL, 'f'},
                                            {NULL, 0, NULL, 0}};
    bool force = false;
    int option;
    while ((option = getopt_long(argc, argv, ":f", options, NULL)) != -1) {
        if (option != 'f')
            return args_bad_option("volume rm", argv, option);
        force = true;
    }
    if (optind == argc)
        return output_usage_error("volume rm",
                                  "missing the volume NAME(s) (see `cellbox volume ls`)");
    return client_delete_each(argv + optind, argc - optind, volume_path,
                              force ? "?force=true" : "");
}

int command_volume(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs(volume_usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? EXIT_USAGE : EXIT_OK;
    }
    if (args_wants_help(argc - 1, argv + 1, volume_usage))
        return EXIT_OK;
    const char *verb = argv[1];
    if (strcmp(verb, "create") == 0)
        return create_volume(argc - 1, argv + 1);
    if (strcmp(verb, "ls") == 0)
        return list_volumes(argc - 1, argv + 1);
    if (strcmp(verb, "rm") == 0)
        return remove_volumes(argc - 1, argv + 1);
    return output_usage_error("volume", "unknown action '%s': use create, ls or rm", verb);
}
