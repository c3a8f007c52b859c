#include "kernel/kernelspec.h"

#include <dirent.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "http/server.h"

static const kernelspec specs[] = {
    {.name = "python3", .display_name = "Python 3 (cellbox)", .language = "python"},
};

static char kernel_binary[PATH_MAX];
static char python_dir[PATH_MAX];
static char specs_dir[PATH_MAX];

void kernelspec_init(void)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n < 0)
        die("cannot read /proc/self/exe: %s", strerror(errno));
    self[n] = '\0';
    char *bin = dirname(self);
    snprintf(kernel_binary, sizeof kernel_binary, "%s/cellbox-kernel", bin);
    snprintf(python_dir, sizeof python_dir, "%s/../share/cellbox/python", bin);
    snprintf(specs_dir, sizeof specs_dir, "%s/../share/cellbox/kernelspecs", bin);
    if (access(kernel_binary, X_OK) != 0)
        die("the kernel runtime %s is missing (run 'make build')", kernel_binary);
    char module[PATH_MAX + 32];
    snprintf(module, sizeof module, "%s/cellbox_kernel/__init__.py", python_dir);
    if (access(module, R_OK) != 0)
        die("the kernel's Python package %s is missing (run 'make build')", module);
}

const kernelspec *kernelspec_find(const char *name)
{
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++)
        if (strcmp(specs[i].name, name) == 0)
            return &specs[i];
    return NULL;
}

const char *kernelspec_kernel_binary(void) { return kernel_binary; }
const char *kernelspec_python_dir(void) { return python_dir; }

static bool is_plain_file_name(const char *file)
{
    return *file && file[0] != '.' && !strchr(file, '/') && strlen(file) < 128;
}

char *kernelspec_resource_path(const char *name, const char *file)
{
    if (!kernelspec_find(name) || !is_plain_file_name(file))
        return NULL;
    char *path;
    if (asprintf(&path, "%s/%s/%s", specs_dir, name, file) < 0)
        die("out of memory");
    if (access(path, R_OK) != 0) {
        free(path);
        return NULL;
    }
    return path;
}

/* resources maps each file's stem to its URL, as jupyter_server does for logos. */
static json_t *resources_model(const kernelspec *spec)
{
    json_t *resources = json_object();
    char dir_path[PATH_MAX + 64];
    snprintf(dir_path, sizeof dir_path, "%s/%s", specs_dir, spec->name);
    DIR *dir = opendir(dir_path);
    if (!dir)
        return resources;
    struct dirent *entry;
    while ((entry = readdir(dir)) != NULL) {
        if (!is_plain_file_name(entry->d_name) || strcmp(entry->d_name, "kernel.json") == 0)
            continue;
        char key[128], url[512];
        snprintf(key, sizeof key, "%.100s", entry->d_name);
        char *dot = strrchr(key, '.');
        if (dot)
            *dot = '\0';
        snprintf(url, sizeof url, "%.200skernelspecs/%s/%.100s", http_base_url(), spec->name, entry->d_name);
        json_object_set_new(resources, key, json_string(url));
    }
    closedir(dir);
    return resources;
}

json_t *kernelspec_model(const kernelspec *spec)
{
    char channel_arg[] = "--channel-fd=3";
    char python_arg[PATH_MAX + 16];
    snprintf(python_arg, sizeof python_arg, "--python-dir=%s", python_dir);
    json_t *inner = json_pack(
        "{s:[s,s,s], s:{}, s:s, s:s, s:s, s:{s:s}}", "argv", kernel_binary, channel_arg, python_arg,
        "env", "display_name", spec->display_name, "language", spec->language, "interrupt_mode",
        "signal", "metadata", "cellbox_runtime", "python-embedded");
    return json_pack("{s:s, s:o, s:o}", "name", spec->name, "spec", inner, "resources",
                     resources_model(spec));
}

json_t *kernelspec_all_models(void)
{
    json_t *all = json_object();
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++)
        json_object_set_new(all, specs[i].name, kernelspec_model(&specs[i]));
    return all;
}
