/* cellbox — the command-line client of cellboxd: global options (where the daemon is, its
 * token, --json), then one subcommand (commands.h) that speaks the /v1 API (client.h). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/client.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "common/version.h"

#define DEFAULT_URL "http://127.0.0.1:8888"
#define TOKEN_FILE ".cellbox/token" /* written by `make run` */

static const struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} commands[] = {
    {"templates", command_templates, "list the templates sandboxes are made from"},
    {"template", command_template,
     "build a template from a Dockerfile, import one from a root filesystem, show or delete one"},
    {"create", command_create, "start a sandbox and print its id"},
    {"ls", command_ls, "list sandboxes"},
    {"info", command_info, "show a sandbox: state, limits, usage, network, contexts"},
    {"network", command_network, "show or change what a sandbox's network may reach"},
    {"exec", command_exec, "run Python code in a sandbox's kernel (state is kept)"},
    {"sh", command_sh, "run a shell command in a sandbox"},
    {"run", command_run, "run a script once in a throwaway sandbox"},
    {"cp", command_cp, "copy files and directories into or out of a sandbox"},
    {"logs", command_logs, "show (or follow) a sandbox's log"},
    {"pause", command_pause, "freeze a sandbox, keeping its memory"},
    {"resume", command_resume, "thaw a paused sandbox"},
    {"timeout", command_timeout, "set when a sandbox is removed"},
    {"restart", command_restart, "restart a sandbox (or one context): fresh Python state"},
    {"snapshot", command_snapshot, "keep a sandbox's live state and files on the daemon's disk"},
    {"snapshots", command_snapshots, "list snapshots"},
    {"restore", command_restore, "a sandbox from a snapshot (new, or --into: rewound in place)"},
    {"fork", command_fork, "copy a running sandbox's live state into N new sandboxes"},
    {"hibernate", command_hibernate, "keep a sandbox only on disk, its memory freed"},
    {"snapshot-rm", command_snapshot_rm, "remove snapshots"},
    {"rm", command_rm, "remove sandboxes"},
    {"volume", command_volume, "create, list and remove named volumes (create --volume)"},
    {"mcp", command_mcp, "serve the Model Context Protocol on stdin/stdout (for MCP hosts)"},
};

#define COMMAND_COUNT (sizeof commands / sizeof *commands)

static void print_help(void)
{
    printf("usage: cellbox [--url URL] [--token TOKEN] [--json] COMMAND [ARGS]\n"
           "\n"
           "The command-line client of cellboxd, the code sandbox daemon.\n"
           "\n"
           "commands:\n");
    for (size_t i = 0; i < COMMAND_COUNT; i++)
        printf("  %-13s%s\n", commands[i].name, commands[i].summary);
    printf("\n"
           "global options (anywhere on the line):\n"
           "  --url URL      the daemon (default $CELLBOX_URL, else " DEFAULT_URL ")\n"
           "  --token TOKEN  its token (default $CELLBOX_TOKEN, else ./" TOKEN_FILE ")\n"
           "  --json         print the daemon's JSON answers as they are (exec, sh: one event\n"
           "                 per line, as they come)\n"
           "  --version      print the version\n"
           "\n"
           "exit status: 0 ok; 1 the code or command failed; 2 wrong usage; 3 cellboxd cannot be\n"
           "reached; 4 cellboxd refused the request; 124 a timeout. For a command's options:\n"
           "cellbox COMMAND --help.\n");
}

static const struct command *find_command(const char *name)
{
    for (size_t i = 0; i < COMMAND_COUNT; i++)
        if (!strcmp(commands[i].name, name))
            return &commands[i];
    return NULL;
}

/* $CELLBOX_TOKEN, else the first line of ./.cellbox/token, else NULL (no token sent). */
static char *default_token(void)
{
    const char *from_environment = getenv("CELLBOX_TOKEN");
    if (from_environment && *from_environment)
        return strdup(from_environment);
    FILE *file = fopen(TOKEN_FILE, "r");
    if (!file)
        return NULL;
    char line[512] = "";
    if (!fgets(line, sizeof line, file))
        line[0] = '\0';
    fclose(file);
    line[strcspn(line, " \t\r\n")] = '\0';
    return line[0] ? strdup(line) : NULL;
}

/* The daemon's address and token from the command line (removed from argv wherever they are,
   up to a "--"), else the environment. Returns EXIT_OK or EXIT_USAGE. */
static int take_global_options(int *argc, char **argv, const char **url, char **token)
{
    int kept = 1;
    bool literal = false;
    for (int i = 1; i < *argc; i++) {
        const char *word = argv[i];
        const char *value = NULL;
        bool is_url = !strncmp(word, "--url", 5), is_token = !strncmp(word, "--token", 7);
        size_t name_length = is_url ? 5 : 7;
        if (literal || !strcmp(word, "--")) {
            literal = true;
        } else if (!strcmp(word, "--json")) {
            output_json = true;
            continue;
        } else if ((is_url || is_token) && (word[name_length] == '=' || !word[name_length])) {
            if (word[name_length] == '=')
                value = word + name_length + 1;
            else if (i + 1 < *argc)
                value = argv[++i];
            else {
                fprintf(stderr, "cellbox: %s needs a value\n", word);
                return EXIT_USAGE;
            }
            if (is_url)
                *url = value;
            else {
                free(*token);
                *token = strdup(value);
            }
            continue;
        }
        argv[kept++] = argv[i];
    }
    argv[kept] = NULL;
    *argc = kept;
    return EXIT_OK;
}

int main(int argc, char **argv)
{
    /* A write to a closed pipe (cellbox ls | head, a tar that stopped) is an error to report,
       not a reason to die silently. */
    signal(SIGPIPE, SIG_IGN);
    const char *url = getenv("CELLBOX_URL");
    char *token = NULL;
    if (take_global_options(&argc, argv, &url, &token) != EXIT_OK)
        return EXIT_USAGE;
    if (!token)
        token = default_token();
    if (!url || !*url)
        url = DEFAULT_URL;
    if (argc < 2) {
        print_help();
        return EXIT_USAGE;
    }
    const char *name = argv[1];
    if (!strcmp(name, "--version") || !strcmp(name, "version")) {
        printf("cellbox %s\n", CELLBOX_VERSION);
        return EXIT_OK;
    }
    if (!strcmp(name, "help") || !strcmp(name, "--help") || !strcmp(name, "-h")) {
        const struct command *topic = argc > 2 ? find_command(argv[2]) : NULL;
        if (topic) {
            char *help_argv[] = {(char *)topic->name, "--help", NULL};
            return topic->run(2, help_argv);
        }
        print_help();
        return argc > 2 ? EXIT_USAGE : EXIT_OK;
    }
    const struct command *command = find_command(name);
    if (!command) {
        fprintf(stderr, "cellbox: unknown command '%s'; `cellbox help` lists them\n", name);
        return EXIT_USAGE;
    }
    client_open(url, token);
    int status = command->run(argc - 1, argv + 1);
    client_close();
    free(token);
    return status;
}
