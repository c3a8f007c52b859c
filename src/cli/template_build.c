/* cellbox template build: a template built by the daemon from a Dockerfile (POST /v1/templates),
 * its progress printed per step as it streams, the failing step's output shown. The context
 * directory is sent as a tar made here with libarchive (links stored as links, never followed). */
#include <archive.h>
#include <archive_entry.h>
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

static const char build_usage[] =
    "usage: cellbox template build NAME -f DOCKERFILE [CONTEXT_DIR] [OPTIONS]\n"
    "\n"
    "Builds template NAME from a Dockerfile, without Docker: each RUN runs in a build sandbox\n"
    "(as isolated as a sandbox; with network when cellboxd has --allow-network) and what it\n"
    "installs becomes a layer of the template. COPY and ADD take files from CONTEXT_DIR. Steps\n"
    "whose inputs did not change are reused from earlier builds. Prints each step as it runs\n"
    "and exits 0 once the template is registered, 1 when a step failed (its output shown).\n"
    "Then: cellbox create --template NAME.\n"
    "\n"
    "options:\n"
    "  -f, --file DOCKERFILE  the Dockerfile (\"-\" reads stdin)\n"
    "  --preload M1,M2        modules its kernels import ahead (else LABEL cellbox.preload)\n"
    "  --pool-size N          kernels kept started ahead (else LABEL cellbox.pool_size, or 0)\n"
    "  --replace              replace an existing template of that name\n"
    "  --no-cache             run every step again\n"
    "  --build-arg NAME=VALUE a value for ARG NAME (repeatable)\n"
    "  --allow-out DEST       what RUN steps may reach: IP, CIDR or domain (repeatable)\n"
    "  --deny-out DEST        what RUN steps may not reach (repeatable; --allow-out wins)\n"
    "  --no-network           RUN steps have loopback only\n"
    "  --step-timeout SECONDS each RUN's time limit (default 600)\n"
    "  -q, --quiet            print only the steps and a failure's output, not every line\n";

typedef struct build_progress {
    bool quiet;
    bool done;
    bool failed;
    int exit_code;
} build_progress;

static void show_event(json_t *event, const char *line, size_t length, void *context)
{
    build_progress *progress = context;
    const char *type = json_string_value(json_object_get(event, "type"));
    if (!type || output_json)
        return;
    json_int_t step = json_integer_value(json_object_get(event, "step"));
    if (!strcmp(type, "step")) {
        bool cached = json_is_true(json_object_get(event, "cached"));
        printf("Step %lld/%lld : %s%s\n", (long long)step,
               (long long)json_integer_value(json_object_get(event, "steps")),
               json_string_value(json_object_get(event, "instruction")),
               cached ? "  (cached)" : "");
    } else if (!strcmp(type, "output") && !progress->quiet) {
        fputs(json_string_value(json_object_get(event, "text")), stdout);
    } else if (!strcmp(type, "done")) {
        progress->done = true;
        json_t *template = json_object_get(event, "template");
        printf("built template %s in %.1f s (%lld steps cached)\n",
               json_string_value(json_object_get(template, "name")),
               json_real_value(json_object_get(event, "seconds")),
               (long long)json_integer_value(json_object_get(event, "cached_steps")));
    } else if (!strcmp(type, "error")) {
        progress->failed = true;
        json_t *code = json_object_get(event, "exit_code");
        progress->exit_code = code ? (int)json_integer_value(code) : -1;
        const char *output = json_string_value(json_object_get(event, "output"));
        if (progress->quiet && output && *output)
            fprintf(stderr, "%s%s", output, output[strlen(output) - 1] == '\n' ? "" : "\n");
        output_error("step %lld (line %lld: %s) failed: %s", (long long)step,
                     (long long)json_integer_value(json_object_get(event, "line")),
                     json_string_value(json_object_get(event, "instruction")),
                     json_string_value(json_object_get(event, "message")));
    }
    fflush(stdout);
    (void)line;
    (void)length;
}

/* ---- the context as a tar ---- */

static int add_entry(struct archive *out, struct archive *disk, struct archive_entry *entry,
                     const char *directory)
{
    /* Names relative to the context: "DIR/a/b" -> "a/b". */
    const char *path = archive_entry_pathname(entry);
    size_t prefix = strlen(directory);
    if (strncmp(path, directory, prefix) == 0) {
        path += prefix;
        while (*path == '/')
            path++;
    }
    if (!*path)
        return 0; /* the context directory itself */
    char *relative = strdup(path);
    archive_entry_set_pathname(entry, relative);
    free(relative);
    archive_entry_set_uid(entry, 0);
    archive_entry_set_gid(entry, 0);
    archive_entry_set_uname(entry, NULL);
    archive_entry_set_gname(entry, NULL);
    if (archive_write_header(out, entry) != ARCHIVE_OK)
        return -1;
    if (archive_entry_filetype(entry) != AE_IFREG || archive_entry_size(entry) == 0)
        return 0;
    const void *block;
    size_t size;
    la_int64_t offset;
    int rc;
    while ((rc = archive_read_data_block(disk, &block, &size, &offset)) == ARCHIVE_OK)
        if (archive_write_data(out, block, size) < 0)
            return -1;
    return rc == ARCHIVE_EOF ? 0 : -1;
}

/* Writes a tar of `directory` into the temporary file `tar_path` (made here). */
static int tar_context(const char *directory, char *tar_path)
{
    int fd = mkstemp(tar_path);
    if (fd < 0) {
        output_error("cannot make a temporary file for the context: %s", strerror(errno));
        return -1;
    }
    struct archive *out = archive_write_new();
    struct archive *disk = archive_read_disk_new();
    archive_write_set_format_pax_restricted(out);
    archive_read_disk_set_symlink_physical(disk); /* links stay links */
    int rc = archive_write_open_fd(out, fd) == ARCHIVE_OK &&
                     archive_read_disk_open(disk, directory) == ARCHIVE_OK
                 ? 0
                 : -1;
    struct archive_entry *entry = archive_entry_new();
    while (rc == 0) {
        int next = archive_read_next_header2(disk, entry);
        if (next == ARCHIVE_EOF)
            break;
        if (next != ARCHIVE_OK && next != ARCHIVE_WARN) {
            rc = -1;
            break;
        }
        archive_read_disk_descend(disk);
        rc = add_entry(out, disk, entry, directory);
    }
    if (rc < 0)
        output_error("cannot pack the context %s: %s", directory,
                     archive_error_string(disk)  ? archive_error_string(disk)
                     : archive_error_string(out) ? archive_error_string(out)
                                                 : "unknown error");
    archive_entry_free(entry);
    archive_read_free(disk);
    if (archive_write_close(out) != ARCHIVE_OK)
        rc = -1;
    archive_write_free(out);
    close(fd);
    return rc;
}

/* ---- options ---- */

typedef struct build_options {
    const char *dockerfile_path;
    const char *context_dir;
    bool quiet;
} build_options;

static int read_build_options(int argc, char **argv, build_options *chosen, json_t *body)
{
    static const struct option options[] = {
        {"file", required_argument, NULL, 'f'},
        {"preload", required_argument, NULL, 'p'},
        {"pool-size", required_argument, NULL, 's'},
        {"replace", no_argument, NULL, 'r'},
        {"no-cache", no_argument, NULL, 'n'},
        {"build-arg", required_argument, NULL, 'a'},
        {"quiet", no_argument, NULL, 'q'},
        {"allow-out", required_argument, NULL, 'A'},
        {"deny-out", required_argument, NULL, 'D'},
        {"no-network", no_argument, NULL, 'N'},
        {"step-timeout", required_argument, NULL, 'T'},
        {NULL, 0, NULL, 0},
    };
    /* Held in the body (which owns it) until the options are read: then kept, or replaced. */
    json_t *lists = json_pack("{s:[], s:[]}", "allowOut", "denyOut");
    json_object_set_new(body, "network", lists);
    bool no_network = false;
    json_t *build_args = json_object();
    json_object_set_new(body, "build_args", build_args);
    long long count;
    int option;
    while ((option = getopt_long(argc, argv, ":f:q", options, NULL)) != -1) {
        switch (option) {
        case 'f': chosen->dockerfile_path = optarg; break;
        case 'p': json_object_set_new(body, "preload", json_string(optarg)); break;
        case 's':
            if (!args_count(optarg, &count) || count > 64)
                return output_usage_error("template build", "--pool-size is 0 to 64, not '%s'",
                                          optarg);
            json_object_set_new(body, "pool_size", json_integer(count));
            break;
        case 'r': json_object_set_new(body, "replace", json_true()); break;
        case 'n': json_object_set_new(body, "no_cache", json_true()); break;
        case 'a':
            if (!args_key_value(optarg, build_args))
                return output_usage_error("template build", "--build-arg is NAME=VALUE, not '%s'",
                                          optarg);
            break;
        case 'q': chosen->quiet = true; break;
        case 'A':
            json_array_append_new(json_object_get(lists, "allowOut"), json_string(optarg));
            break;
        case 'D':
            json_array_append_new(json_object_get(lists, "denyOut"), json_string(optarg));
            break;
        case 'N': no_network = true; break;
        case 'T':
            if (!args_count(optarg, &count) || count < 1 || count > 3600)
                return output_usage_error("template build",
                                          "--step-timeout is 1 to 3600 seconds, not '%s'", optarg);
            json_object_set_new(body, "step_timeout_s", json_integer(count));
            break;
        default: return args_bad_option("template build", argv, option);
        }
    }
    bool has_lists = json_array_size(json_object_get(lists, "allowOut")) ||
                     json_array_size(json_object_get(lists, "denyOut"));
    if (no_network && has_lists)
        return output_usage_error("template build",
                                  "--no-network and --allow-out/--deny-out contradict each other");
    if (no_network)
        json_object_set_new(body, "network", json_false());
    else if (!has_lists)
        json_object_del(body, "network"); /* the daemon's default: network when it gives one */
    if (optind >= argc)
        return output_usage_error("template build", "name the template: cellbox template build "
                                                    "NAME -f Dockerfile [CONTEXT_DIR]");
    json_object_set_new(body, "name", json_string(argv[optind++]));
    if (optind < argc)
        chosen->context_dir = argv[optind++];
    if (optind < argc)
        return output_usage_error("template build", "unexpected '%s' after the context directory",
                                  argv[optind]);
    if (!chosen->dockerfile_path)
        return output_usage_error("template build", "give the Dockerfile with -f DOCKERFILE");
    if (json_object_size(build_args) == 0)
        json_object_del(body, "build_args");
    return EXIT_OK;
}

int command_template_build(int argc, char **argv)
{
    if (args_wants_help(argc, argv, build_usage))
        return EXIT_OK;
    json_t *body = json_object();
    build_options chosen = {0};
    int status = read_build_options(argc, argv, &chosen, body);
    size_t length;
    char *dockerfile = status == EXIT_OK ? args_read_file(chosen.dockerfile_path, &length) : NULL;
    if (status == EXIT_OK && !dockerfile) {
        output_error("cannot read %s: %s", chosen.dockerfile_path, strerror(errno));
        status = EXIT_USAGE;
    }
    char tar_path[] = "/tmp/cellbox-context-XXXXXX";
    bool packed = false;
    if (status == EXIT_OK && chosen.context_dir) {
        packed = tar_context(chosen.context_dir, tar_path) == 0;
        if (!packed)
            status = EXIT_FAILED;
    }
    build_progress progress = {.quiet = chosen.quiet};
    if (status == EXIT_OK) {
        json_object_set_new(body, "dockerfile", json_string(dockerfile));
        status = client_stream_form("/v1/templates", body, "context", packed ? tar_path : NULL,
                                    show_event, &progress);
    }
    if (strcmp(tar_path + strlen(tar_path) - 6, "XXXXXX") != 0) /* mkstemp made it */
        unlink(tar_path);
    free(dockerfile);
    json_decref(body);
    if (status != EXIT_OK)
        return status;
    if (progress.failed)
        return EXIT_FAILED;
    if (!progress.done) {
        output_error("the build's stream ended before it said how the build ended; see the "
                     "daemon's log");
        return EXIT_FAILED;
    }
    return EXIT_OK;
}
