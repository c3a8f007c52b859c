/* Templates from the command line: cellbox templates (the list), cellbox template show|delete|
   import NAME. A template with files of its own is built from a Dockerfile or imported from a
   root filesystem tarball; python3 and the daemon's --templates are the base with a preload
   list. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/args.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/output.h"

#define PACKAGES_SHOWN 3

/* ------------------------------------------------------------------ templates */

static const char templates_usage[] =
    "usage: cellbox templates\n"
    "\n"
    "Lists the templates a sandbox can be created from (cellbox create --template NAME): the\n"
    "default one, its kind (built-in, modules: --templates, dockerfile: built, rootfs:\n"
    "imported), what it was made from, the size of its files, how long its build took, the\n"
    "Python packages its files hold, what each one's kernels have imported before they start,\n"
    "and how many of them the daemon keeps started ahead of time (its warm pool).\n";

static const char *string_or_dash(json_t *model, const char *field)
{
    const char *value = json_string_value(json_object_get(model, field));
    return value && *value ? value : "-";
}

/* "a==1, b==2, c==3 (+4)", or "-". */
static void format_packages(json_t *packages, char *out, size_t size)
{
    size_t count = json_array_size(packages), used = 0;
    out[0] = '\0';
    for (size_t i = 0; i < count && i < PACKAGES_SHOWN && used < size; i++)
        used += (size_t)snprintf(out + used, size - used, "%s%s", i ? "," : "",
                                 json_string_value(json_array_get(packages, i)));
    if (count > PACKAGES_SHOWN && used < size)
        snprintf(out + used, size - used, ",(+%zu)", count - PACKAGES_SHOWN);
    if (!count)
        snprintf(out, size, "-");
}

static void add_template_row(output_table *table, json_t *model)
{
    char pool[32], size[32] = "-", build[32] = "-", packages[256];
    snprintf(pool, sizeof pool, "%lld",
             (long long)json_integer_value(json_object_get(model, "pool_size")));
    long long bytes = json_integer_value(json_object_get(model, "size_bytes"));
    if (bytes > 0)
        output_format_size(bytes, size, sizeof size);
    json_t *seconds = json_object_get(model, "build_seconds");
    if (json_is_number(seconds) && json_number_value(seconds) > 0)
        snprintf(build, sizeof build, "%.1fs", json_number_value(seconds));
    format_packages(json_object_get(model, "packages"), packages, sizeof packages);
    const char *row[] = {json_string_value(json_object_get(model, "name")),
                         json_is_true(json_object_get(model, "default")) ? "yes" : "",
                         string_or_dash(model, "kind"),
                         string_or_dash(model, "from"),
                         size,
                         build,
                         packages,
                         string_or_dash(model, "preload"),
                         pool};
    output_table_add(table, row);
}

int command_templates(int argc, char **argv)
{
    if (args_wants_help(argc, argv, templates_usage))
        return EXIT_OK;
    int status = args_positional("templates", argc, argv, 0, "");
    json_t *list = NULL;
    if (status == EXIT_OK)
        status = client_get_list("/v1/templates", &list);
    if (status != EXIT_OK || !list)
        return status;
    static const char *const headers[] = {"NAME",  "DEFAULT",  "KIND",      "FROM", "SIZE",
                                          "BUILD", "PACKAGES", "PRELOADED", "POOL"};
    output_table table;
    output_table_begin(&table, 9, headers);
    size_t index;
    json_t *model;
    json_array_foreach(list, index, model) add_template_row(&table, model);
    output_table_print(&table);
    json_decref(list);
    return EXIT_OK;
}

/* ------------------------------------------------------------------ template */

static const char template_usage[] =
    "usage: cellbox template build NAME -f Dockerfile [CONTEXT_DIR] (see cellbox template build "
    "--help)\n"
    "       cellbox template show NAME\n"
    "       cellbox template delete NAME\n"
    "       cellbox template import NAME FILE.tar [--preload M,..] [--pool-size N] [--replace]\n"
    "\n"
    "build    builds a template from a Dockerfile, without Docker: each RUN in a sandbox.\n"
    "show     prints a template's model (JSON): its kind, base, layers, size, packages, ENV,\n"
    "         WORKDIR, preload list, warm pool and the sandboxes using it.\n"
    "delete   removes a template with files of its own: refused while sandboxes use it (it\n"
    "         names them: remove them first); python3 and the daemon's --templates cannot be.\n"
    "import   makes a template of a Debian root filesystem tarball (tar, optionally gzip, xz,\n"
    "         zstd or bzip2 compressed; e.g. `docker export` of a container), which must hold\n"
    "         python3.11 with libpython3.11 and IPython; its kernels run in that tree.\n"
    "\n"
    "  --preload M,..   modules its kernels import before they start\n"
    "  --pool-size N    kernels of it kept started ahead of time (default 0)\n"
    "  --replace        replace a template of that name (refused while sandboxes use it)\n";

static char *template_path(const char *name, const char *rest)
{
    char *escaped = client_escape(name), *path = NULL;
    if (asprintf(&path, "/v1/templates/%s%s", escaped, rest) < 0)
        path = NULL;
    free(escaped);
    return path;
}

static int show_template(int argc, char **argv)
{
    int status = args_positional("template show", argc, argv, 1, "NAME");
    if (status != EXIT_OK)
        return status;
    char *path = template_path(argv[optind], "");
    json_t *model = NULL;
    status = client_call("GET", path, NULL, &model);
    free(path);
    if (status == EXIT_OK)
        output_print_json(model);
    json_decref(model);
    return status;
}

static char *delete_path(const char *name, const void *context)
{
    return template_path(name, "");
}

static int delete_template(int argc, char **argv)
{
    if (argc < 2)
        return output_usage_error("template delete",
                                  "missing the template NAME (see `cellbox templates`)");
    return client_delete_each(argv + 1, argc - 1, delete_path, NULL);
}

/* The query of an import: "?preload=...&pool_size=N&replace=true" (escaped). */
static char *import_query(const char *preload, const char *pool_size, bool replace)
{
    char *escaped = client_escape(preload ? preload : ""), *query = NULL;
    if (asprintf(&query, "/import?preload=%s&pool_size=%s%s", escaped, pool_size ? pool_size : "0",
                 replace ? "&replace=true" : "") < 0)
        query = NULL;
    free(escaped);
    return query;
}

static int import_template(int argc, char **argv)
{
    static const struct option options[] = {{"preload", required_argument, NULL, 'p'},
                                            {"pool-size", required_argument, NULL, 'n'},
                                            {"replace", no_argument, NULL, 'r'},
                                            {NULL, 0, NULL, 0}};
    const char *preload = NULL, *pool_size = NULL;
    bool replace = false;
    int option;
    while ((option = getopt_long(argc, argv, ":p:n:r", options, NULL)) != -1) {
        if (option == 'p')
            preload = optarg;
        else if (option == 'n')
            pool_size = optarg;
        else if (option == 'r')
            replace = true;
        else
            return args_bad_option("template import", argv, option);
    }
    if (argc - optind != 2)
        return output_usage_error("template import", "give the template's NAME and the "
                                                     "root filesystem tarball FILE.tar");
    const char *name = argv[optind], *file = argv[optind + 1];
    FILE *source = fopen(file, "rb");
    struct stat st;
    if (!source || fstat(fileno(source), &st) < 0) {
        output_error("cannot read %s: %s", file, strerror(errno));
        if (source)
            fclose(source);
        return EXIT_FAILED;
    }
    char *query = import_query(preload, pool_size, replace);
    char *path = template_path(name, query ? query : "/import");
    json_t *model = NULL;
    int status = client_send_file("POST", path, source, (long long)st.st_size, &model);
    fclose(source);
    free(query);
    free(path);
    if (status == EXIT_OK && output_json)
        output_print_json(model);
    else if (status == EXIT_OK)
        printf("%s\n", json_string_value(json_object_get(model, "name")));
    json_decref(model);
    return status;
}

int command_template(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs(template_usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? EXIT_USAGE : EXIT_OK;
    }
    const char *verb = argv[1];
    if (strcmp(verb, "build") == 0)
        return command_template_build(argc - 1, argv + 1); /* argv[0] = "build" */
    if (args_wants_help(argc - 1, argv + 1, template_usage))
        return EXIT_OK;
    if (strcmp(verb, "show") == 0)
        return show_template(argc - 1, argv + 1);
    if (strcmp(verb, "delete") == 0)
        return delete_template(argc - 1, argv + 1);
    if (strcmp(verb, "import") == 0)
        return import_template(argc - 1, argv + 1);
    return output_usage_error("template", "unknown action '%s': use build, show, delete or import",
                              verb);
}
