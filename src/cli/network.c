#include "cli/network.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/args.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/output.h"

void network_add_entry(json_t *body, bool allow, const char *entry)
{
    json_t *network = json_object_get(body, "network");
    if (!json_is_object(network)) {
        network = json_object();
        json_object_set_new(body, "network", network);
    }
    const char *name = allow ? "allowOut" : "denyOut";
    json_t *list = json_object_get(network, name);
    if (!list) {
        list = json_array();
        json_object_set_new(network, name, list);
    }
    json_array_append_new(list, json_string(entry));
}

static void print_list(const char *label, json_t *list)
{
    printf("%-10s%s", "", label);
    size_t index;
    json_t *entry;
    json_array_foreach(list, index, entry)
        printf("%s%s", index ? ", " : " ", json_string_value(entry));
    printf("%s\n", json_array_size(list) ? "" : " -");
}

void network_print(json_t *network)
{
    if (!json_is_object(network)) {
        printf("%-10s%s\n", "network:", "none");
        return;
    }
    const char *address = json_string_value(json_object_get(network, "address"));
    printf("%-10saddress %s\n", "network:", address ? address : "(not up yet)");
    print_list("allowOut", json_object_get(network, "allowOut"));
    print_list("denyOut ", json_object_get(network, "denyOut"));
}

static const char network_usage[] =
    "usage: cellbox network ID [--allow-out ADDRESS]... [--deny-out ADDRESS]... [--clear]\n"
    "\n"
    "Shows a sandbox's network, or replaces its egress lists (a list not given is cleared):\n"
    "denyOut is what it may not reach, allowOut what it may reach even so. ADDRESS is an\n"
    "address or CIDR, e.g. --allow-out 203.0.113.20 --deny-out 0.0.0.0/0 (only that host).\n"
    "The sandbox must have been created with --network.\n"
    "\n"
    "options:\n"
    "  --allow-out ADDRESS  may reach ADDRESS even when --deny-out covers it (repeatable)\n"
    "  --deny-out ADDRESS   may not reach ADDRESS (repeatable; 0.0.0.0/0: everything)\n"
    "  --clear              empty both lists: the whole network, as at create\n";

/* GET /v1/sandboxes/{id}, its network printed. */
static int show_network(const char *id)
{
    char *path = client_sandbox_path(id, "");
    json_t *model = NULL;
    int status = client_call("GET", path, NULL, &model);
    free(path);
    if (status != EXIT_OK)
        return status;
    if (output_json)
        output_print_json(json_object_get(model, "network"));
    else
        network_print(json_object_get(model, "network"));
    json_decref(model);
    return EXIT_OK;
}

int command_network(int argc, char **argv)
{
    if (args_wants_help(argc, argv, network_usage))
        return EXIT_OK;
    static const struct option options[] = {
        {"allow-out", required_argument, NULL, 'a'},
        {"deny-out", required_argument, NULL, 'd'},
        {"clear", no_argument, NULL, 'c'},
        {NULL, 0, NULL, 0},
    };
    json_t *body = json_pack("{s:{}}", "network");
    bool change = false;
    int option;
    while ((option = getopt_long(argc, argv, ":", options, NULL)) != -1) {
        if (option != 'a' && option != 'd' && option != 'c') {
            json_decref(body);
            return args_bad_option("network", argv, option);
        }
        if (option != 'c')
            network_add_entry(body, option == 'a', optarg);
        change = true;
    }
    int status = args_positional("network", argc, argv, 1, "the sandbox ID (see `cellbox ls`)");
    if (status != EXIT_OK || !change) {
        json_decref(body);
        return status != EXIT_OK ? status : show_network(argv[optind]);
    }
    char *path = client_sandbox_path(argv[optind], "/network");
    json_t *lists = json_object_get(body, "network"), *reply = NULL;
    status = client_call("PUT", path, lists, &reply);
    free(path);
    json_decref(body);
    json_decref(reply);
    return status == EXIT_OK ? show_network(argv[optind]) : status;
}
