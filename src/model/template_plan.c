#include "model/template_plan.h"

#include <jansson.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ids.h"
#include "common/log.h"
#include "kernel/kernelspec.h"
#include "model/template_files.h"

#define MAX_ARGS 64

/* What a build step sees of the instructions before it. */
typedef struct plan_state {
    int env_count;
    char *env[TEMPLATES_MAX_ENV]; /* "NAME=value" */
    int arg_count;
    char *args[MAX_ARGS]; /* "NAME=value", or "NAME" declared without one */
    json_t *build_args;   /* the request's, borrowed */
    char *workdir;        /* NULL: /home/user */
    char *user;           /* NULL: user */
    char *preload_label;  /* LABEL cellbox.preload */
    int pool_size_label;  /* LABEL cellbox.pool_size; -1: none */
} plan_state;

/* Directories a COPY or WORKDIR may not name: the base's own (bound from the host, or links to
   /usr on Debian) and the sandbox's kernel file systems; /usr is a layer's to add to. */
static const char *const refused_top_dirs[] = {
    "bin", "sbin", "lib", "lib32",     "lib64", "libx32", "etc", "proc",  "sys",        "dev",
    "tmp", "run",  "var", "workspace", "boot",  "root",   "mnt", "media", "lost+found", NULL};

static char *copy_text(const char *text)
{
    char *copy = strdup(text ? text : "");
    if (!copy)
        die("out of memory");
    return copy;
}

static char *format_text(const char *format, ...) __attribute__((format(printf, 1, 2)));
static char *format_text(const char *format, ...)
{
    va_list arguments;
    va_start(arguments, format);
    char *text;
    if (vasprintf(&text, format, arguments) < 0)
        die("out of memory");
    va_end(arguments);
    return text;
}

static int refuse_at(const dockerfile_instruction *instruction, char *why, size_t why_size,
                     const char *sentence)
{
    char copy[1024];
    snprintf(copy, sizeof copy, "%s", sentence);
    snprintf(why, why_size, "line %d: %s: %s", instruction->line, instruction->text, copy);
    return -1;
}

/* ---- the state ---- */

static const char *value_in(char *const *entries, int count, const char *name)
{
    size_t length = strlen(name);
    for (int i = 0; i < count; i++)
        if (strncmp(entries[i], name, length) == 0 && entries[i][length] == '=')
            return entries[i] + length + 1;
    return NULL;
}

static const char *lookup_variable(void *arg, const char *name)
{
    const plan_state *state = arg;
    const char *value = value_in(state->env, state->env_count, name);
    return value ? value : value_in(state->args, state->arg_count, name);
}

/* Sets NAME in `entries` (replacing its earlier value); false when there is no room. */
static bool set_entry(char **entries, int *count, int max, const char *name, const char *value)
{
    size_t length = strlen(name);
    char *entry = value ? format_text("%s=%s", name, value) : copy_text(name);
    for (int i = 0; i < *count; i++)
        if (strncmp(entries[i], name, length) == 0 &&
            (entries[i][length] == '=' || entries[i][length] == '\0')) {
            free(entries[i]);
            entries[i] = entry;
            return true;
        }
    if (*count == max) {
        free(entry);
        return false;
    }
    entries[(*count)++] = entry;
    return true;
}

static void free_state(plan_state *state)
{
    for (int i = 0; i < state->env_count; i++)
        free(state->env[i]);
    for (int i = 0; i < state->arg_count; i++)
        free(state->args[i]);
    free(state->workdir);
    free(state->user);
    free(state->preload_label);
}

static bool is_variable_name(const char *name)
{
    if (!name[0] || !(name[0] == '_' || (name[0] >= 'A' && name[0] <= 'Z') ||
                      (name[0] >= 'a' && name[0] <= 'z')))
        return false;
    for (const char *c = name; *c; c++)
        if (!(*c == '_' || (*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') ||
              (*c >= '0' && *c <= '9') || *c == '.' || *c == '-'))
            return false;
    return true;
}

/* The instruction's arguments as words, variables substituted. */
static char **words_of(const dockerfile_instruction *instruction, plan_state *state, int *count,
                       char *why, size_t why_size)
{
    char **words;
    char reason[256];
    if (dockerfile_words(instruction->arguments, lookup_variable, state, &words, count, reason,
                         sizeof reason) < 0) {
        refuse_at(instruction, why, why_size, reason);
        return NULL;
    }
    return words;
}

/* ENV A=1 B="two words", or the old ENV A value with spaces. */
static int apply_env(const dockerfile_instruction *instruction, plan_state *state, char *why,
                     size_t why_size)
{
    int count;
    char **words = words_of(instruction, state, &count, why, why_size);
    if (!words)
        return -1;
    /* All of one instruction's values are substituted with the state before it, as Docker does:
       set them afterwards. */
    char *names[TEMPLATES_MAX_ENV], *values[TEMPLATES_MAX_ENV];
    int pairs = 0, rc = 0;
    if (!strchr(words[0], '=')) {
        if (count < 2) {
            rc = refuse_at(instruction, why, why_size, "give the variable a value: ENV NAME=value");
        } else {
            size_t total = 1;
            for (int i = 1; i < count; i++)
                total += strlen(words[i]) + 1;
            char *value = calloc(1, total);
            if (!value)
                die("out of memory");
            for (int i = 1; i < count; i++) {
                strcat(value, words[i]);
                if (i + 1 < count)
                    strcat(value, " ");
            }
            names[0] = copy_text(words[0]);
            values[0] = value;
            pairs = 1;
        }
    } else {
        for (int i = 0; rc == 0 && i < count; i++) {
            char *equals = strchr(words[i], '=');
            if (!equals || pairs == TEMPLATES_MAX_ENV) {
                rc = refuse_at(instruction, why, why_size,
                               equals ? "too many variables"
                                      : "give every variable a value: "
                                        "ENV A=1 B=2");
                break;
            }
            names[pairs] = format_text("%.*s", (int)(equals - words[i]), words[i]);
            values[pairs++] = copy_text(equals + 1);
        }
    }
    for (int i = 0; i < pairs; i++) {
        if (rc == 0 && !is_variable_name(names[i]))
            rc =
                refuse_at(instruction, why, why_size, "a variable's name is letters, digits and _");
        if (rc == 0 &&
            !set_entry(state->env, &state->env_count, TEMPLATES_MAX_ENV, names[i], values[i]))
            rc = refuse_at(instruction, why, why_size, "a template holds at most 64 variables");
        free(names[i]);
        free(values[i]);
    }
    dockerfile_free_words(words);
    return rc;
}

/* ARG NAME or ARG NAME=default; the request's build_args give the value. */
static int apply_arg(const dockerfile_instruction *instruction, plan_state *state, char *why,
                     size_t why_size)
{
    int count;
    char **words = words_of(instruction, state, &count, why, why_size);
    if (!words)
        return -1;
    int rc = 0;
    for (int i = 0; rc == 0 && i < count; i++) {
        char *equals = strchr(words[i], '=');
        char *name =
            equals ? format_text("%.*s", (int)(equals - words[i]), words[i]) : copy_text(words[i]);
        const char *given = json_string_value(json_object_get(state->build_args, name));
        const char *value = given ? given : equals ? equals + 1 : NULL;
        if (!is_variable_name(name))
            rc = refuse_at(instruction, why, why_size,
                           "an argument's name is letters, digits and _");
        else if (!set_entry(state->args, &state->arg_count, MAX_ARGS, name, value))
            rc = refuse_at(instruction, why, why_size, "a Dockerfile declares at most 64 ARGs");
        free(name);
    }
    dockerfile_free_words(words);
    return rc;
}

static int apply_label(const dockerfile_instruction *instruction, plan_state *state, char *why,
                       size_t why_size)
{
    int count;
    char **words = words_of(instruction, state, &count, why, why_size);
    if (!words)
        return -1;
    int rc = 0;
    for (int i = 0; rc == 0 && i < count; i++) {
        const char *value = strchr(words[i], '=');
        if (!value) {
            rc = refuse_at(instruction, why, why_size, "write LABEL name=\"value\"");
        } else if (strncmp(words[i], "cellbox.preload=", 16) == 0) {
            free(state->preload_label);
            state->preload_label = copy_text(value + 1);
        } else if (strncmp(words[i], "cellbox.pool_size=", 18) == 0) {
            char *end;
            long size = strtol(value + 1, &end, 10);
            if (*end || end == value + 1 || size < 0 || size > 64)
                rc = refuse_at(instruction, why, why_size,
                               "cellbox.pool_size is a whole number from 0 to 64");
            state->pool_size_label = (int)size;
        }
    }
    dockerfile_free_words(words);
    return rc;
}

static int apply_user(const dockerfile_instruction *instruction, plan_state *state, char *why,
                      size_t why_size)
{
    int count;
    char **words = words_of(instruction, state, &count, why, why_size);
    if (!words)
        return -1;
    int rc = 0;
    /* "root" is accepted because E2B's Dockerfiles say it; the steps still run as the sandbox
       user, never root (template_build.h). */
    const char *user = count != 1                                                       ? NULL
                       : strcmp(words[0], "root") == 0 || strcmp(words[0], "0") == 0    ? "root"
                       : strcmp(words[0], "user") == 0 || strcmp(words[0], "1000") == 0 ? "user"
                                                                                        : NULL;
    if (!user)
        rc = refuse_at(instruction, why, why_size,
                       "cellbox builds and sandboxes run as the sandbox user: write USER user "
                       "(USER root is accepted, but steps still run as the sandbox user)");
    else {
        free(state->user);
        state->user = copy_text(user);
    }
    dockerfile_free_words(words);
    return rc;
}

/* ---- paths ---- */

/* `path` made absolute (relative to `base`) and normalized: no ".", "..", or doubled '/'. */
static char *normalized_path(const char *base, const char *path)
{
    char *joined = path[0] == '/' ? copy_text(path) : format_text("%s/%s", base, path);
    char *out = calloc(1, strlen(joined) + 2);
    if (!out)
        die("out of memory");
    size_t length = 0;
    for (char *p = joined; *p;) {
        while (*p == '/')
            p++;
        size_t part = strcspn(p, "/");
        if (part == 0)
            break;
        if (part == 1 && p[0] == '.') {
        } else if (part == 2 && p[0] == '.' && p[1] == '.') {
            while (length > 0 && out[length - 1] != '/')
                length--;
            if (length > 0)
                length--;
        } else {
            out[length++] = '/';
            memcpy(out + length, p, part);
            length += part;
        }
        p += part;
    }
    if (length == 0)
        out[length++] = '/';
    out[length] = '\0';
    free(joined);
    return out;
}

/* Whether a COPY or WORKDIR may write at `path` (absolute, normalized). */
static bool writable_path(const char *path)
{
    const char *top = path + 1;
    size_t length = strcspn(top, "/");
    if (length == 0)
        return false;
    for (int i = 0; refused_top_dirs[i]; i++)
        if (strlen(refused_top_dirs[i]) == length && strncmp(top, refused_top_dirs[i], length) == 0)
            return false;
    if (length == 4 && strncmp(top, "home", 4) == 0)
        return strncmp(path, "/home/user", 10) == 0 && (path[10] == '\0' || path[10] == '/');
    return true;
}

static const char *workdir_of(const plan_state *state)
{
    return state->workdir ? state->workdir : "/home/user";
}

static void add_extra_dir(build_plan *plan, const char *dir)
{
    int count = 0;
    while (plan->extra_dirs && plan->extra_dirs[count]) {
        if (strcmp(plan->extra_dirs[count], dir) == 0)
            return;
        count++;
    }
    plan->extra_dirs = realloc(plan->extra_dirs, (size_t)(count + 2) * sizeof *plan->extra_dirs);
    if (!plan->extra_dirs)
        die("out of memory");
    plan->extra_dirs[count] = copy_text(dir);
    plan->extra_dirs[count + 1] = NULL;
}

static const char *const not_writable_sentence =
    "cellbox writes a template's files under /usr (e.g. /usr/local), /opt, /home/user or a "
    "directory of its own such as /app; the base's /etc, /var, /bin, /lib, /tmp are not a "
    "layer's";

static int apply_workdir(const dockerfile_instruction *instruction, plan_state *state,
                         build_plan *plan, char *why, size_t why_size)
{
    int count;
    char **words = words_of(instruction, state, &count, why, why_size);
    if (!words)
        return -1;
    int rc = 0;
    char *path = count == 1 ? normalized_path(workdir_of(state), words[0]) : NULL;
    if (!path)
        rc = refuse_at(instruction, why, why_size, "WORKDIR takes one directory");
    else if (!writable_path(path))
        rc = refuse_at(instruction, why, why_size, not_writable_sentence);
    if (rc == 0) {
        free(state->workdir);
        state->workdir = path;
        add_extra_dir(plan, path);
    } else {
        free(path);
    }
    dockerfile_free_words(words);
    return rc;
}

/* ---- layer steps ---- */

static char **environment_of(const plan_state *state)
{
    static const char *const defaults[] = {
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/home/user",
        "USER=user", "LANG=C.UTF-8",
        /* Debian's pip refuses to touch the system's Python (PEP 668) unless told; a step's
           /usr/local is its layer's, so it may. Caches go to /tmp, not into the layer. */
        "PIP_BREAK_SYSTEM_PACKAGES=1", "PIP_CACHE_DIR=/tmp/.cache/pip",
        "PIP_DISABLE_PIP_VERSION_CHECK=1", "npm_config_cache=/tmp/.cache/npm", NULL};
    char *entries[TEMPLATES_MAX_ENV + MAX_ARGS + 16];
    int count = 0;
    for (int i = 0; defaults[i]; i++)
        entries[count++] = copy_text(defaults[i]);
    /* ARG values reach RUN's environment (not the template's); ENV wins over them. */
    for (int pass = 0; pass < 2; pass++) {
        char *const *given = pass == 0 ? state->args : state->env;
        int given_count = pass == 0 ? state->arg_count : state->env_count;
        for (int i = 0; i < given_count; i++) {
            const char *equals = strchr(given[i], '=');
            if (!equals)
                continue; /* an ARG without a value is not in the environment */
            char *name = format_text("%.*s", (int)(equals - given[i]), given[i]);
            set_entry(entries, &count, (int)(sizeof entries / sizeof *entries) - 1, name,
                      equals + 1);
            free(name);
        }
    }
    char **env = calloc((size_t)count + 1, sizeof *env);
    if (!env)
        die("out of memory");
    memcpy(env, entries, (size_t)count * sizeof *env);
    return env;
}

static char **copy_words(char *const *words, int count)
{
    char **copy = calloc((size_t)count + 1, sizeof *copy);
    if (!copy)
        die("out of memory");
    for (int i = 0; i < count; i++)
        copy[i] = copy_text(words[i]);
    return copy;
}

static int plan_run(const dockerfile_instruction *instruction, const plan_state *state,
                    build_step *step)
{
    if (instruction->exec_form) {
        step->argv = copy_words(instruction->words, instruction->word_count);
    } else {
        char *shell[] = {"/bin/sh", "-c", instruction->arguments};
        step->argv = copy_words(shell, 3);
    }
    step->env = environment_of(state);
    return 0;
}

static int plan_copy(const dockerfile_instruction *instruction, plan_state *state,
                     const template_build_request *request, build_plan *plan, build_step *step,
                     char *why, size_t why_size)
{
    char **words;
    int count;
    if (instruction->exec_form) {
        count = instruction->word_count;
        words = calloc((size_t)count + 1, sizeof *words);
        if (!words)
            die("out of memory");
        for (int i = 0; i < count; i++) {
            char reason[256];
            words[i] = dockerfile_expand(instruction->words[i], lookup_variable, state, reason,
                                         sizeof reason);
            if (!words[i]) {
                dockerfile_free_words(words);
                return refuse_at(instruction, why, why_size, reason);
            }
        }
    } else if (!(words = words_of(instruction, state, &count, why, why_size))) {
        return -1;
    }
    int rc = 0;
    if (count < 2) {
        rc = refuse_at(instruction, why, why_size, "name a source and a destination");
    } else {
        const char *written = words[count - 1];
        step->destination = normalized_path(workdir_of(state), written);
        step->into_directory = written[strlen(written) - 1] == '/' || count > 2;
        step->sources = copy_words(words, count - 1);
        step->source_count = count - 1;
        if (!writable_path(step->destination))
            rc = refuse_at(instruction, why, why_size, not_writable_sentence);
    }
    for (int i = 0; rc == 0 && i < step->source_count; i++) {
        char reason[512];
        if (strpbrk(step->sources[i], "*?["))
            rc = refuse_at(instruction, why, why_size,
                           "wildcards in COPY sources are not supported by cellbox: name each "
                           "file or directory");
        else if (template_files_check_source(request->context_dir, step->sources[i], reason,
                                             sizeof reason) < 0)
            rc = refuse_at(instruction, why, why_size, reason);
    }
    if (rc == 0) {
        add_extra_dir(plan, step->destination);
        (void)state;
    }
    dockerfile_free_words(words);
    return rc;
}

/* The step's key: its parent's, the instruction, the state, and its sources' contents. */
static int compute_key(const char *parent, const dockerfile_instruction *instruction,
                       const plan_state *state, build_step *step,
                       const template_build_request *request, const char *nonce, char *why,
                       size_t why_size)
{
    EVP_MD_CTX *digest = EVP_MD_CTX_new();
    if (!digest || EVP_DigestInit_ex(digest, EVP_sha256(), NULL) != 1)
        die("OpenSSL cannot compute SHA-256");
#define FEED(text) EVP_DigestUpdate(digest, (text), strlen(text) + 1)
    FEED("cellbox-template-step-1");
    FEED(parent);
    FEED(instruction->text);
    for (int i = 0; i < state->env_count; i++)
        FEED(state->env[i]);
    FEED("--args");
    for (int i = 0; i < state->arg_count; i++)
        FEED(state->args[i]);
    FEED(workdir_of(state));
    FEED(state->user ? state->user : "user");
    FEED(nonce);
    int rc = 0;
    for (int i = 0; rc == 0 && i < step->source_count; i++) {
        FEED(step->sources[i]);
        char reason[512];
        if (template_files_digest(request->context_dir, step->sources[i], digest, reason,
                                  sizeof reason) < 0)
            rc = refuse_at(instruction, why, why_size, reason);
    }
    if (step->destination)
        FEED(step->destination);
#undef FEED
    unsigned char sum[EVP_MAX_MD_SIZE];
    unsigned sum_length = 0;
    EVP_DigestFinal_ex(digest, sum, &sum_length);
    EVP_MD_CTX_free(digest);
    char *key = step->key;
    for (int i = 0; i < TEMPLATE_PLAN_KEY_HEX / 2; i++)
        snprintf(key + 2 * i, 3, "%02x", sum[i]);
    return rc;
}

/* ---- FROM ---- */

static int apply_from(const dockerfile_instruction *instruction, plan_state *state,
                      build_plan *plan, char *parent, size_t parent_size, failure_kind *failure,
                      char *why, size_t why_size)
{
    int count;
    char **words = words_of(instruction, state, &count, why, why_size);
    if (!words)
        return -1;
    plan->from = copy_text(count ? words[0] : "");
    dockerfile_free_words(words);
    snprintf(parent, parent_size, "base:cellbox");
    if (templates_is_base_name(plan->from))
        return 0;
    template_definition definition = {0};
    if (!templates_definition_of(plan->from, &definition)) {
        const kernelspec *spec = kernelspec_find(plan->from);
        if (spec && !spec->argv)
            return 0; /* python3 and the templates of --templates: the base with a preload */
        *failure = FAILURE_INVALID;
        if (spec) {
            char sentence[512];
            snprintf(sentence, sizeof sentence,
                     "%s is a language, not a template: build on cellbox's base (FROM "
                     "e2bdev/code-interpreter:latest); every language's kernels run in a "
                     "template's sandboxes (a context with {\"language\": \"%s\"}), with what "
                     "its RUN steps installed (npm install -g, R packages)",
                     plan->from, spec->language);
            return refuse_at(instruction, why, why_size, sentence);
        }
        return refuse_at(instruction, why, why_size,
                         "no such template: FROM e2bdev/code-interpreter:latest (cellbox's base) "
                         "or the name of a template (GET /v1/templates)");
    }
    plan->base_template = copy_text(plan->from);
    plan->layer_count = definition.layer_count;
    memcpy(plan->layers, definition.layers, sizeof plan->layers);
    for (int i = 0; i < definition.env_count && i < TEMPLATES_MAX_ENV; i++) {
        const char *equals = strchr(definition.env[i], '=');
        if (!equals)
            continue;
        char *name = format_text("%.*s", (int)(equals - definition.env[i]), definition.env[i]);
        set_entry(state->env, &state->env_count, TEMPLATES_MAX_ENV, name, equals + 1);
        free(name);
    }
    if (definition.workdir)
        state->workdir = copy_text(definition.workdir);
    if (definition.user)
        state->user = copy_text(definition.user);
    if (plan->layer_count)
        snprintf(parent, parent_size, "%s", plan->layers[plan->layer_count - 1]);
    else
        snprintf(parent, parent_size, "template:%s", plan->from);
    return 0;
}

/* ---- the plan ---- */

static int plan_instruction(const dockerfile_instruction *instruction, plan_state *state,
                            const template_build_request *request, build_plan *plan,
                            build_step *step, char *parent, size_t parent_size, const char *nonce,
                            failure_kind *failure, char *why, size_t why_size)
{
    step->instruction = instruction;
    switch (instruction->kind) {
    case DOCKERFILE_FROM:
        return apply_from(instruction, state, plan, parent, parent_size, failure, why, why_size);
    case DOCKERFILE_ENV: return apply_env(instruction, state, why, why_size);
    case DOCKERFILE_ARG: return apply_arg(instruction, state, why, why_size);
    case DOCKERFILE_LABEL: return apply_label(instruction, state, why, why_size);
    case DOCKERFILE_USER: return apply_user(instruction, state, why, why_size);
    case DOCKERFILE_WORKDIR:
        /* As Docker's, a WORKDIR makes its directory: a layer holding just that, so a kernel
           or command that starts there finds it even when no later step writes in it. */
        if (apply_workdir(instruction, state, plan, why, why_size) < 0)
            return -1;
        break;
    case DOCKERFILE_EXPOSE: return 0; /* recorded in the Dockerfile kept with the template */
    case DOCKERFILE_RUN:
    case DOCKERFILE_COPY:
    case DOCKERFILE_ADD: break;
    }
    if (plan->layer_count == TEMPLATES_MAX_LAYERS)
        return refuse_at(instruction, why, why_size,
                         "a template holds at most 64 layers: join RUN steps with &&");
    step->has_layer = true;
    step->workdir = copy_text(workdir_of(state));
    step->lower_count = plan->layer_count;
    int rc = 0;
    if (instruction->kind == DOCKERFILE_RUN)
        rc = plan_run(instruction, state, step);
    else if (instruction->kind == DOCKERFILE_WORKDIR)
        step->destination = copy_text(workdir_of(state));
    else
        rc = plan_copy(instruction, state, request, plan, step, why, why_size);
    if (rc == 0)
        rc = compute_key(parent, instruction, state, step, request, nonce, why, why_size);
    if (rc < 0)
        return -1;
    snprintf(parent, parent_size, "%s", step->key);
    snprintf(plan->layers[plan->layer_count++], TEMPLATES_LAYER_KEY_MAX, "%s", step->key);
    return 0;
}

/* The template's settings: the state after the last instruction. */
static void keep_final_state(plan_state *state, const template_build_request *request,
                             build_plan *plan)
{
    plan->env_count = state->env_count;
    memcpy(plan->env, state->env, sizeof plan->env);
    state->env_count = 0;
    /* Said even when it is the default: the record names where kernels start. */
    plan->workdir = state->workdir ? state->workdir : copy_text("/home/user");
    state->workdir = NULL;
    plan->user = state->user ? state->user : copy_text("user");
    state->user = NULL;
    plan->preload = copy_text(request->preload       ? request->preload
                              : state->preload_label ? state->preload_label
                                                     : "");
    plan->pool_size = request->pool_size >= 0       ? request->pool_size
                      : state->pool_size_label >= 0 ? state->pool_size_label
                                                    : 0;
}

build_plan *template_plan_make(const dockerfile *file, const template_build_request *request,
                               failure_kind *failure, char *why, size_t why_size)
{
    build_plan *plan = calloc(1, sizeof *plan);
    if (!plan)
        die("out of memory");
    plan->steps = calloc((size_t)file->count, sizeof *plan->steps);
    if (!plan->steps)
        die("out of memory");
    plan_state state = {.build_args = request->build_args, .pool_size_label = -1};
    char parent[64] = "";
    char nonce[33] = "";
    if (request->no_cache)
        id_random_hex(nonce, 16);
    *failure = FAILURE_INVALID;
    int rc = 0;
    for (int i = 0; rc == 0 && i < file->count; i++) {
        plan->step_count = i + 1;
        rc = plan_instruction(&file->instructions[i], &state, request, plan, &plan->steps[i],
                              parent, sizeof parent, nonce, failure, why, why_size);
    }
    if (rc == 0)
        keep_final_state(&state, request, plan);
    free_state(&state);
    if (rc < 0) {
        template_plan_free(plan);
        return NULL;
    }
    return plan;
}

void template_plan_free(build_plan *plan)
{
    if (!plan)
        return;
    for (int i = 0; i < plan->step_count; i++) {
        build_step *step = &plan->steps[i];
        dockerfile_free_words(step->argv);
        dockerfile_free_words(step->env);
        dockerfile_free_words(step->sources);
        free(step->workdir);
        free(step->destination);
    }
    free(plan->steps);
    dockerfile_free_words(plan->extra_dirs);
    for (int i = 0; i < plan->env_count; i++)
        free(plan->env[i]);
    free(plan->from);
    free(plan->base_template);
    free(plan->workdir);
    free(plan->user);
    free(plan->preload);
    free(plan);
}
