/* cellbox cp: files and directories between here and a sandbox, both ways. A file travels as
 * its raw bytes; a directory as a tar made and unpacked by the system's `tar` on this side and
 * by `tar` inside the sandbox on the other. Paths follow `docker cp`: copying onto an existing
 * directory puts the source inside it, and "DIR/." copies DIR's contents. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/output.h"

static const char cp_usage[] =
    "usage: cellbox cp SOURCE DESTINATION\n"
    "\n"
    "Copies a file or a directory into a sandbox or out of one; ID:PATH names a path in\n"
    "sandbox ID (a relative PATH is relative to /workspace):\n"
    "\n"
    "  cellbox cp data.csv ID:data.csv       cellbox cp ID:out.png .\n"
    "  cellbox cp ./project ID:/workspace/   cellbox cp ID:results ./results\n"
    "  cellbox cp ID:log.txt -               (to stdout)\n"
    "\n"
    "Copying onto an existing directory puts the source inside it; DIR/. copies DIR's contents.\n";

/* One side of the copy. */
typedef struct location {
    char *sandbox;    /* the sandbox's id, or NULL for a local path */
    const char *path; /* the path within it, or the local path */
} location;

/* "ID:PATH" names a sandbox path; a word with a '/' before its ':' stays local ("./a:b"). */
static location parse_location(const char *word)
{
    const char *colon = strchr(word, ':');
    if (!colon || colon == word || memchr(word, '/', (size_t)(colon - word)))
        return (location){NULL, word};
    return (location){strndup(word, (size_t)(colon - word)), colon + 1};
}

static bool names_contents(const char *path)
{
    size_t length = strlen(path);
    return length >= 2 && !strcmp(path + length - 2, "/.");
}

/* The last component of a path, without trailing slashes ("" for "/"); free() it. */
static char *last_component(const char *path)
{
    char *copy = strdup(path);
    size_t length = strlen(copy);
    while (length > 1 && copy[length - 1] == '/')
        copy[--length] = '\0';
    char *name = strdup(basename(copy));
    free(copy);
    if (!strcmp(name, "/") || !strcmp(name, "."))
        name[0] = '\0';
    return name;
}

static char *join(const char *directory, const char *name)
{
    char *path;
    size_t length = strlen(directory);
    bool slash = length > 0 && directory[length - 1] == '/';
    if (asprintf(&path, "%s%s%s", directory, slash || !length ? "" : "/", name) < 0)
        exit(EXIT_FAILED);
    return path;
}

static char *files_path(const char *id, const char *route, const char *sandbox_path)
{
    char *escaped = client_escape(*sandbox_path ? sandbox_path : ".");
    char *rest, *path;
    if (asprintf(&rest, "%s?path=%s", route, escaped) < 0)
        exit(EXIT_FAILED);
    path = client_sandbox_path(id, rest);
    free(escaped);
    free(rest);
    return path;
}

/* The entry at a sandbox path: *entry is NULL when nothing is there (404). */
static int stat_in_sandbox(const char *id, const char *path, json_t **entry)
{
    char *url = files_path(id, "/files/stat", path);
    long status;
    int result = client_call_status("GET", url, NULL, &status, entry);
    free(url);
    if (result != EXIT_OK)
        return result;
    if (status == 404) {
        /* The sandbox itself missing is the user's real problem: report that one. */
        const char *message = json_string_value(json_object_get(*entry, "message"));
        if (message && strstr(message, "sandbox") && strstr(message, "does not exist"))
            result = client_report_refusal(status, *entry);
        json_decref(*entry);
        *entry = NULL;
        return result;
    }
    if (status >= 300) {
        result = client_report_refusal(status, *entry);
        json_decref(*entry);
        *entry = NULL;
    }
    return result;
}

static bool is_directory_entry(json_t *entry)
{
    const char *type = json_string_value(json_object_get(entry, "type"));
    return type && !strcmp(type, "dir");
}

/* Starts `tar` with one end of a pipe as its stdin (extracting) or stdout (creating); *stream
   is our end. */
static pid_t start_tar(char *const argv[], bool tar_reads, FILE **stream)
{
    int ends[2];
    if (pipe2(ends, O_CLOEXEC) < 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(ends[tar_reads ? 0 : 1], tar_reads ? STDIN_FILENO : STDOUT_FILENO);
        execvp("tar", argv);
        fprintf(stderr, "cellbox: cannot run tar: %s; install it (apt-get install tar)\n",
                strerror(errno));
        _exit(127);
    }
    close(ends[tar_reads ? 0 : 1]);
    if (pid < 0) {
        close(ends[tar_reads ? 1 : 0]);
        return -1;
    }
    *stream = fdopen(ends[tar_reads ? 1 : 0], tar_reads ? "wb" : "rb");
    return pid;
}

static bool tar_succeeded(pid_t pid, const char *doing)
{
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return true;
    output_error("tar failed %s (%s %d)", doing, WIFEXITED(status) ? "exit status" : "signal",
                 WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    return false;
}

static void report_copied(json_t *entry, const char *from, const char *id, const char *to)
{
    if (output_json) {
        output_print_json(entry);
        return;
    }
    const char *where = json_string_value(json_object_get(entry, "path"));
    fprintf(stderr, "copied %s to %s:%s\n", from, id, where ? where : to);
}

/* ------------------------------------------------------------------ into the sandbox */

static int upload_file(const char *local, const char *id, const char *target)
{
    FILE *source = fopen(local, "rb");
    struct stat info;
    if (!source || fstat(fileno(source), &info) < 0) {
        output_error("cannot read %s: %s", local, strerror(errno));
        if (source)
            fclose(source);
        return EXIT_FAILED;
    }
    json_t *entry = NULL;
    char *url = files_path(id, "/files", target);
    int status = client_upload(url, source, (long long)info.st_size, &entry);
    free(url);
    fclose(source);
    if (status == EXIT_OK)
        report_copied(entry, local, id, target);
    json_decref(entry);
    return status;
}

static int upload_directory(const char *local, const char *id, const char *target)
{
    json_t *body = json_pack("{s:s}", "path", *target ? target : "."), *entry = NULL;
    char *url = client_sandbox_path(id, "/files/mkdir");
    int status = client_call("POST", url, body, &entry);
    free(url);
    json_decref(body);
    json_decref(entry);
    if (status != EXIT_OK)
        return status;
    /* The daemon takes regular files, directories and symlinks only: hard links go as the
       files they share. */
    char *argv[] = {"tar", "-C", (char *)local, "--hard-dereference", "-cf", "-", ".", NULL};
    FILE *tar_output = NULL;
    pid_t tar = start_tar(argv, false, &tar_output);
    if (tar < 0 || !tar_output) {
        output_error("cannot start tar to pack %s: %s", local, strerror(errno));
        return EXIT_FAILED;
    }
    url = files_path(id, "/files/tar", target);
    entry = NULL;
    status = client_upload(url, tar_output, -1, &entry);
    free(url);
    fclose(tar_output);
    bool packed = tar_succeeded(tar, "packing the directory");
    if (status == EXIT_OK && !packed)
        status = EXIT_FAILED;
    if (status == EXIT_OK)
        report_copied(entry, local, id, target);
    json_decref(entry);
    return status;
}

static int copy_in(const char *local, const location *to)
{
    struct stat info;
    if (stat(local, &info) < 0) {
        output_error("cannot copy %s: %s", local, strerror(errno));
        return EXIT_FAILED;
    }
    bool directory = S_ISDIR(info.st_mode);
    char *name = last_component(local);
    char *target = strdup(to->path);
    /* Onto an existing directory (or a path ending in '/'), the source goes inside it. */
    size_t length = strlen(target);
    bool inside = length == 0 || target[length - 1] == '/';
    if (!inside) {
        json_t *entry = NULL;
        int status = stat_in_sandbox(to->sandbox, target, &entry);
        inside = is_directory_entry(entry);
        json_decref(entry);
        if (status != EXIT_OK) {
            free(name);
            free(target);
            return status;
        }
    }
    if (inside && !(directory && names_contents(local)) && *name) {
        char *inner = join(target, name);
        free(target);
        target = inner;
    }
    int status = directory ? upload_directory(local, to->sandbox, target)
                           : upload_file(local, to->sandbox, target);
    free(name);
    free(target);
    return status;
}

/* ------------------------------------------------------------------ out of the sandbox */

/* Downloads into a temporary file beside `target`, renamed over it only once complete: a
   failed copy never leaves half a file where the old one was. */
static int download_file(const char *id, const char *path, const char *target)
{
    if (!strcmp(target, "-")) {
        char *url = files_path(id, "/files", path);
        int status = client_download(url, stdout, "stdout");
        free(url);
        fflush(stdout);
        return status;
    }
    char *partial;
    if (asprintf(&partial, "%s.cellbox-XXXXXX", target) < 0)
        return EXIT_FAILED;
    int fd = mkstemp(partial);
    FILE *sink = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!sink) {
        output_error("cannot write beside %s: %s", target, strerror(errno));
        free(partial);
        return EXIT_FAILED;
    }
    mode_t mask = umask(0);
    umask(mask);
    fchmod(fd, 0666 & ~mask); /* as a file made by cp would be, not mkstemp's 0600 */
    char *url = files_path(id, "/files", path);
    int status = client_download(url, sink, target);
    free(url);
    if (fclose(sink) != 0 && status == EXIT_OK) {
        output_error("cannot write %s: %s", target, strerror(errno));
        status = EXIT_FAILED;
    }
    if (status == EXIT_OK && rename(partial, target) < 0) {
        output_error("cannot write %s: %s", target, strerror(errno));
        status = EXIT_FAILED;
    }
    if (status != EXIT_OK)
        unlink(partial);
    else if (!output_json)
        fprintf(stderr, "copied %s:%s to %s\n", id, path, target);
    free(partial);
    return status;
}

/* The sandbox is not trusted, nor is the tar it makes: GNU tar refuses members with ".." and
   absolute names, and holds back links that point outside until the end, so nothing lands
   outside `target`; --no-same-owner keeps the files ours even when we are root. */
static int download_directory(const char *id, const char *path, const char *target)
{
    if (mkdir(target, 0777) < 0 && errno != EEXIST) {
        output_error("cannot create %s: %s", target, strerror(errno));
        return EXIT_FAILED;
    }
    char *argv[] = {"tar", "-C", (char *)target, "--no-same-owner", "-xf", "-", NULL};
    FILE *tar_input = NULL;
    pid_t tar = start_tar(argv, true, &tar_input);
    if (tar < 0 || !tar_input) {
        output_error("cannot start tar to unpack into %s: %s", target, strerror(errno));
        return EXIT_FAILED;
    }
    char *url = files_path(id, "/files/tar", path);
    int status = client_download(url, tar_input, "tar");
    free(url);
    fclose(tar_input);
    bool unpacked = tar_succeeded(tar, "unpacking the directory");
    if (status == EXIT_OK && !unpacked)
        status = EXIT_FAILED;
    if (status == EXIT_OK && !output_json)
        fprintf(stderr, "copied %s:%s to %s\n", id, path, target);
    return status;
}

static int copy_out(const location *from, const char *local)
{
    json_t *entry = NULL;
    int status = stat_in_sandbox(from->sandbox, from->path, &entry);
    if (status != EXIT_OK)
        return status;
    if (!entry) {
        output_error("%s:%s does not exist (`cellbox sh %s ls` shows what is there)", from->sandbox,
                     from->path, from->sandbox);
        return EXIT_REFUSED;
    }
    bool directory = is_directory_entry(entry);
    json_decref(entry);
    char *name = last_component(from->path);
    struct stat info;
    bool onto_directory = strcmp(local, "-") && stat(local, &info) == 0 && S_ISDIR(info.st_mode);
    char *target = strdup(local);
    if (onto_directory && !(directory && names_contents(from->path)) && *name) {
        free(target);
        target = join(local, name);
    }
    if (directory && !strcmp(local, "-"))
        status = output_usage_error("cp", "%s:%s is a directory: copy it to a local directory",
                                    from->sandbox, from->path);
    else
        status = directory ? download_directory(from->sandbox, from->path, target)
                           : download_file(from->sandbox, from->path, target);
    free(name);
    free(target);
    return status;
}

int command_cp(int argc, char **argv)
{
    if (args_wants_help(argc, argv, cp_usage))
        return EXIT_OK;
    int status = args_positional("cp", argc, argv, 2, "SOURCE and DESTINATION");
    if (status != EXIT_OK)
        return status;
    location from = parse_location(argv[optind]), to = parse_location(argv[optind + 1]);
    if (from.sandbox && to.sandbox)
        status = output_usage_error("cp", "both sides are in a sandbox: copy through a local "
                                          "directory, or use `cellbox sh ID cp ...` inside one");
    else if (!from.sandbox && !to.sandbox)
        status =
            output_usage_error("cp", "one side must be a sandbox path, ID:PATH (see `cellbox ls`)");
    else
        status = from.sandbox ? copy_out(&from, to.path) : copy_in(from.path, &to);
    free(from.sandbox);
    free(to.sandbox);
    return status;
}
