/* The tools of cellbox's MCP server: what each does, its JSON schema, and how its result reads to
 * a model — plain text first (what was printed, the value, the error), charts as image content,
 * and errors as tool errors (isError) whose text says what to do next. */
#include <errno.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "api/mcp_tools.h"
#include "common/buffer.h"
#include "common/log.h"
#include "common/loop.h"
#include "common/text.h"
#include "kernel/kernelspec.h"
#include "model/box.h"
#include "model/command.h"
#include "model/execution.h"
#include "model/manager.h"
#include "model/pause.h"
#include "model/snapshots.h"
#include "model/stateless_run.h"
#include "model/templates.h"
#include "model/ttl.h"
#include "sandbox/confined.h"

#define TEXT_CAP (100 * 1024)      /* of each stream in a tool result: a model reads it all */
#define READ_CAP (1024 * 1024)     /* read_file */
#define DEFAULT_SANDBOX_TTL_S 3600 /* a session's own sandbox, renewed by use */
#define DEFAULT_COMMAND_TIMEOUT_S 60
#define DEFAULT_RUN_TIMEOUT_S 30
#define FORK_COUNT_MAX 16 /* model/snapshots.h's bound of one fork */

/* ---- the catalogue ---- */

static json_t *schema(const char *json)
{
    json_error_t error;
    json_t *value = json_loads(json, 0, &error);
    if (!value)
        die("BUG: a tool schema is not JSON: %s", error.text);
    return value;
}

#define SANDBOX_ID_PROPERTY                                                                        \
    "\"sandbox_id\": {\"type\": \"string\", \"description\": \"The sandbox to use; omit it to use "  \
    "this session's own sandbox (made on first use).\"}"

#define EGRESS_LIST_PROPERTIES                                                                     \
    "\"allowOut\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}, \"description\": "       \
    "\"Addresses or CIDRs the sandbox may reach even when denyOut covers them, e.g. "              \
    "[\\\"203.0.113.20\\\"].\"}, \"denyOut\": {\"type\": \"array\", \"items\": {\"type\": "          \
    "\"string\"}, \"description\": \"Addresses or CIDRs it may not reach, e.g. "                     \
    "[\\\"0.0.0.0/0\\\"] for everything but allowOut.\"}"

static const struct tool {
    const char *name, *title, *description, *input_schema;
    bool read_only, destructive;
} tools[] = {
    {"create_sandbox", "Create a sandbox",
     "Creates a new isolated Python sandbox (its own files, processes and memory limit) and "
     "returns its id. Use it when you need a clean environment or several independent ones, or "
     "a template's packages (list_templates names them); otherwise the other tools use this "
     "session's own sandbox.",
     "{\"type\": \"object\", \"properties\": {\"timeout_s\": {\"type\": \"integer\", "
     "\"minimum\": 0, \"description\": \"Seconds until it is deleted (default 3600, 0 = "
     "never).\"}, \"metadata\": "
     "{\"type\": \"object\", \"additionalProperties\": {\"type\": \"string\"}}, \"template\": "
     "{\"type\": \"string\", \"description\": \"The template to make it from (list_templates): "
     "its packages are installed and its preload list imported before it starts. Default: the "
     "daemon's default one, python3 unless configured, with numpy, pandas, matplotlib and "
     "IPython. A template with other packages is built from a Dockerfile (FROM python3, RUN pip "
     "install ...) by the daemon's user: cellbox template build NAME -f Dockerfile.\"}, "
     "\"network\": {\"type\": "
     "[\"boolean\", \"object\"], \"properties\": {" EGRESS_LIST_PROPERTIES "}, \"description\": "
     "\"true to let it reach the network (pip install, downloads), or {allowOut, denyOut} to let "
     "it reach only some of it; default: no network. Needs a daemon started with "
     "--allow-network.\"}}}",
     false, false},
    {"update_network", "Change a sandbox's network access",
     "Replaces the egress lists of a sandbox created with network: denyOut names what it may not "
     "reach, allowOut what it may reach even so (e.g. allowOut [\"203.0.113.20\"] with denyOut "
     "[\"0.0.0.0/0\"]: only that host). A list left out is cleared. In effect at once.",
     "{\"type\": \"object\", \"properties\": {" EGRESS_LIST_PROPERTIES ", " SANDBOX_ID_PROPERTY
     "}}",
     false, false},
    {"list_templates", "List templates",
     "Lists the templates a sandbox can be made from (create_sandbox's template): name, kind "
     "(built-in, modules, dockerfile, rootfs), what it was built from, and the Python packages "
     "it adds to the base (numpy, pandas, matplotlib, IPython). To get a package no template "
     "has, the daemon's user builds one from a Dockerfile (FROM python3, RUN pip install ...) "
     "with `cellbox template build NAME -f Dockerfile` or POST /v1/templates; inside a sandbox "
     "with network, pip install works for that sandbox alone.",
     "{\"type\": \"object\", \"properties\": {}}", true, false},
    {"list_sandboxes", "List sandboxes",
     "Lists the sandboxes that exist: id, state (running, paused, dead), when they expire and "
     "their metadata.",
     "{\"type\": \"object\", \"properties\": {}}", true, false},
    {"run_code", "Run code",
     "Runs code in a sandbox's kernel, like a notebook cell: variables, imports and files "
     "persist between calls. Returns what was printed, the value of the last expression, and the "
     "error with its traceback if one was raised. Languages: python (default; numpy, pandas and "
     "matplotlib installed, charts come back as images, shell commands with a leading '!'), "
     "javascript and typescript (Node.js), bash (sh), and r where the daemon's host has R. Each "
     "language has its own kernel in the sandbox, all of them sharing its files.",
     "{\"type\": \"object\", \"properties\": {\"code\": {\"type\": \"string\", \"description\": "
     "\"Source to run.\"}, \"language\": {\"type\": \"string\", \"enum\": [\"python\", "
     "\"javascript\", \"typescript\", \"bash\", \"sh\", \"r\"], \"description\": \"Default "
     "python.\"}, \"context_id\": {\"type\": \"string\", \"description\": \"Run in this "
     "context (create_context) instead of the language's default one; not with language.\"}, "
     SANDBOX_ID_PROPERTY ", \"timeout_s\": {\"type\": \"integer\", "
     "\"minimum\": 1, \"description\": \"Interrupt the code after this many seconds.\"}}, "
     "\"required\": [\"code\"]}",
     false, false},
    {"create_context", "Create a code context",
     "Starts another kernel in a sandbox, of any language (python, javascript, typescript, bash, "
     "sh, r where the daemon's host has R), with state of its own but the sandbox's files; "
     "returns its id for run_code's context_id.",
     "{\"type\": \"object\", \"properties\": {\"language\": {\"type\": \"string\", "
     "\"enum\": [\"python\", \"javascript\", \"typescript\", \"bash\", \"sh\", \"r\"], "
     "\"description\": \"Default python.\"}, \"cwd\": {\"type\": \"string\", \"description\": "
     "\"Absolute working directory (default /workspace).\"}, " SANDBOX_ID_PROPERTY "}}",
     false, false},
    {"run_command", "Run a shell command",
     "Runs a shell command (/bin/bash -c) inside a sandbox, in /workspace unless cwd is given, and "
     "returns its exit code, stdout and stderr.",
     "{\"type\": \"object\", \"properties\": {\"cmd\": {\"type\": \"string\"}, " SANDBOX_ID_PROPERTY
     ", \"cwd\": {\"type\": \"string\", \"description\": \"Absolute working directory.\"}, "
     "\"timeout_s\": {\"type\": \"integer\", \"minimum\": 1, \"description\": \"Kill it after this "
     "many seconds (default 60).\"}, \"stdin\": {\"type\": \"string\"}}, \"required\": [\"cmd\"]}",
     false, false},
    {"read_file", "Read a file",
     "Reads a file from a sandbox. Text comes back as text, PNG and JPEG images as images. Relative "
     "paths are relative to /workspace.",
     "{\"type\": \"object\", \"properties\": {\"path\": {\"type\": \"string\"}, " SANDBOX_ID_PROPERTY
     "}, \"required\": [\"path\"]}",
     true, false},
    {"write_file", "Write a file",
     "Writes a file in a sandbox (parent directories are made), replacing it if it exists. "
     "Relative paths are relative to /workspace. Use encoding 'base64' for binary content.",
     "{\"type\": \"object\", \"properties\": {\"path\": {\"type\": \"string\"}, \"content\": "
     "{\"type\": \"string\"}, \"encoding\": {\"type\": \"string\", \"enum\": [\"utf-8\", "
     "\"base64\"]}, " SANDBOX_ID_PROPERTY "}, \"required\": [\"path\", \"content\"]}",
     false, false},
    {"list_files", "List files",
     "Lists a directory of a sandbox (default /workspace): type, size and path of each entry, "
     "depth levels deep (default 1).",
     "{\"type\": \"object\", \"properties\": {\"path\": {\"type\": \"string\"}, \"depth\": "
     "{\"type\": \"integer\", \"minimum\": 1, \"maximum\": 10}, " SANDBOX_ID_PROPERTY "}}",
     true, false},
    {"pause_sandbox", "Pause a sandbox",
     "Freezes every process of a sandbox (no CPU, memory kept) until resume_sandbox; its expiry "
     "clock stops meanwhile.",
     "{\"type\": \"object\", \"properties\": {" SANDBOX_ID_PROPERTY "}}", false, false},
    {"resume_sandbox", "Resume a sandbox", "Thaws a paused sandbox: its processes run on.",
     "{\"type\": \"object\", \"properties\": {" SANDBOX_ID_PROPERTY "}}", false, false},
    {"delete_sandbox", "Delete a sandbox",
     "Deletes a sandbox with its files and processes. This cannot be undone.",
     "{\"type\": \"object\", \"properties\": {" SANDBOX_ID_PROPERTY "}}", false, true},
    {"snapshot_sandbox", "Snapshot a sandbox",
     "Keeps a sandbox's live state on disk: every kernel's variables, imports, objects and open "
     "files, and the sandbox's files. The sandbox goes on running. Returns the snapshot's id "
     "for restore_snapshot, which brings that state back later (also after a daemon restart), "
     "as a new sandbox or the same one rewound. Not while code runs in it.",
     "{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\", "
     "\"description\": \"A name to recognise it by.\"}, " SANDBOX_ID_PROPERTY "}}",
     false, false},
    {"restore_snapshot", "Restore a snapshot",
     "Brings back the state a snapshot_sandbox kept: by default as a new sandbox (its id is "
     "returned; the snapshot's own sandbox is untouched), or with in_place the snapshot's own "
     "sandbox rewound to it (what it did since is lost). Says, per kernel, whether its live "
     "state came back whole or only its variables.",
     "{\"type\": \"object\", \"properties\": {\"snapshot_id\": {\"type\": \"string\"}, "
     "\"in_place\": {\"type\": \"boolean\", \"description\": \"Rewind the sandbox the "
     "snapshot was taken of instead of making a new one (default false).\"}}, \"required\": "
     "[\"snapshot_id\"]}",
     false, true},
    {"fork_sandbox", "Fork a sandbox",
     "Copies a running sandbox's live state (every kernel's variables and objects) and files "
     "into count new sandboxes, each isolated from the original and from the others, in "
     "milliseconds. Use it to try several approaches from one state. Returns the new ids: pass "
     "one as sandbox_id to the other tools; delete_sandbox the ones you do not keep.",
     "{\"type\": \"object\", \"properties\": {\"count\": {\"type\": \"integer\", "
     "\"minimum\": 1, \"maximum\": 16, \"description\": \"How many forks (default 1).\"}, "
     SANDBOX_ID_PROPERTY "}}",
     false, false},
    {"run_code_in_fork", "Run code in a fork",
     "Tries code without risk: forks the sandbox (a copy of its live state and files) and runs "
     "the code in the fork only, like run_code. The original sandbox is unchanged whatever the "
     "code does. Returns the output and the fork's id: keep working in the fork (sandbox_id) if "
     "the result is good, or delete it with delete_sandbox.",
     "{\"type\": \"object\", \"properties\": {\"code\": {\"type\": \"string\"}, "
     "\"language\": {\"type\": \"string\", \"enum\": [\"python\", \"javascript\", "
     "\"typescript\", \"bash\", \"sh\", \"r\"], \"description\": \"Default python.\"}, "
     SANDBOX_ID_PROPERTY ", \"timeout_s\": {\"type\": \"integer\", \"minimum\": 1, "
     "\"description\": \"Interrupt the code after this many seconds.\"}}, \"required\": "
     "[\"code\"]}",
     false, false},
    {"run", "Run once in a fresh sandbox",
     "Runs code once in a brand-new sandbox that is deleted afterwards (nothing persists). "
     "Languages: python, bash, sh, javascript, typescript, r (where the host has R). Returns "
     "the exit code and the output (stdout and stderr interleaved); a timeout gives exit code "
     "124.",
     "{\"type\": \"object\", \"properties\": {\"code\": {\"type\": \"string\"}, \"language\": "
     "{\"type\": \"string\", \"enum\": [\"python\", \"bash\", \"sh\", \"javascript\", "
     "\"typescript\", \"r\"]}, \"timeout_s\": {\"type\": "
     "\"integer\", \"minimum\": 1, \"description\": \"Default 30.\"}}, \"required\": [\"code\"]}",
     false, false},
};

#define TOOL_COUNT (sizeof tools / sizeof tools[0])

json_t *mcp_tools_list(void)
{
    json_t *list = json_array();
    for (size_t i = 0; i < TOOL_COUNT; i++)
        json_array_append_new(
            list, json_pack("{s:s, s:s, s:s, s:o, s:{s:b, s:b, s:b}}", "name", tools[i].name,
                            "title", tools[i].title, "description", tools[i].description,
                            "inputSchema", schema(tools[i].input_schema), "annotations",
                            "readOnlyHint", tools[i].read_only, "destructiveHint",
                            tools[i].destructive, "openWorldHint", 0));
    return list;
}

/* ---- results ---- */

static json_t *text_block(const char *text)
{
    return json_pack("{s:s, s:o}", "type", "text", "text", text_json_string(text));
}

static void finish_text(mcp_call *call, bool is_error, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void finish_text(mcp_call *call, bool is_error, const char *fmt, ...)
{
    char *text = NULL;
    va_list ap;
    va_start(ap, fmt);
    if (vasprintf(&text, fmt, ap) < 0)
        die("out of memory");
    va_end(ap);
    mcp_call_finish(call, json_pack("{s:[o], s:b}", "content", text_block(text), "isError", is_error));
    free(text);
}

static void append_capped(buffer *out, const char *text, size_t length, bool *truncated)
{
    if (!buffer_append_capped(out, text, length, TEXT_CAP))
        *truncated = true;
}

static void append_text(buffer *out, const char *text) { buffer_append(out, text, strlen(text)); }

/* "stdout:\n<text>\n" — one labelled part of a tool's text, when there is something in it. */
static void append_section(buffer *out, const char *label, const buffer *part)
{
    if (!buffer_size(part))
        return;
    append_text(out, label);
    append_text(out, ":\n");
    buffer_append(out, buffer_head(part), buffer_size(part));
    append_text(out, "\n");
}

static json_t *buffer_string(const buffer *b)
{
    return text_json_stringn(buffer_size(b) ? buffer_head(b) : "", buffer_size(b));
}

/* ---- which sandbox ---- */

/* The sandbox a tool works on: args.sandbox_id, else the session's own (made when `create`).
   NULL after finishing the call with a tool error saying why. A paused sandbox is resumed: a
   model asking for work wants it done. */
static box *sandbox_for(mcp_call *call, json_t *args, char default_sandbox[64], bool create)
{
    json_t *given = json_object_get(args, "sandbox_id");
    char why[512];
    box *b = NULL;
    if (given && !json_is_null(given)) {
        if (!json_is_string(given)) {
            finish_text(call, true, "sandbox_id must be a string (an id from create_sandbox or "
                                    "list_sandboxes)");
            return NULL;
        }
        if (!(b = box_find(json_string_value(given)))) {
            finish_text(call, true, "sandbox %s does not exist (it may have expired): call "
                        "list_sandboxes, or omit sandbox_id to use this session's sandbox",
                        json_string_value(given));
            return NULL;
        }
    } else if (default_sandbox[0] && (b = box_find(default_sandbox))) {
        box_set_timeout(b, DEFAULT_SANDBOX_TTL_S); /* used: it lives on */
    } else if (!create) {
        finish_text(call, true, "this session has no sandbox yet: give sandbox_id, or run code first");
        return NULL;
    } else {
        failure_kind failure;
        kernel *k = manager_create(manager_default_kernel(), NULL, NULL, NULL, NULL, &failure, why, sizeof why);
        if (!k) {
            finish_text(call, true, "cannot create a sandbox: %s", why);
            return NULL;
        }
        b = box_of(k);
        json_t *metadata = json_pack("{s:s}", "created_by", "mcp");
        box_configure(b, metadata, NULL, DEFAULT_SANDBOX_TTL_S);
        json_decref(metadata);
        snprintf(default_sandbox, 64, "%s", box_id(b));
    }
    if (box_get_state(b) == BOX_PAUSED && box_resume(b, why, sizeof why) < 0) {
        finish_text(call, true, "sandbox %s is paused and could not be resumed: %s", box_id(b), why);
        return NULL;
    }
    if (box_get_state(b) == BOX_DEAD) {
        box_describe_death(b, why, sizeof why);
        finish_text(call, true, "%s; delete it (delete_sandbox) and create another", why);
        return NULL;
    }
    return b;
}

/* ---- calls that wait for their sandbox to start ---- */

/* Commands and files need a sandbox whose kernel has reported in (its pid known, its root
   pivoted); the session's own sandbox, made by the call itself when no pooled one was ready, or
   any fresh one, is still starting for some milliseconds (a second, started by exec). Such a
   call waits here and runs again, whole, once the kernel leaves "starting" or is gone (it then
   says so). */
typedef struct parked_call {
    mcp_call *call;
    char tool[32];
    json_t *args;         /* the call's, naming the sandbox (sandbox_id) */
    box_start_wait *wait; /* until the kernel leaves "starting"; then NULL */
    bool abandoned;       /* the client went away after that, before the call ran again */
} parked_call;

static void resume_parked(void *arg)
{
    parked_call *p = arg;
    if (!p->abandoned) {
        mcp_call_on_abandon(p->call, NULL, NULL);
        char no_default[64] = ""; /* sandbox_id names it */
        mcp_tools_call(p->call, p->tool, p->args, no_default);
    }
    json_decref(p->args);
    free(p);
}

/* Not from inside the kernel's own message or teardown: from the loop. */
static void on_parked_started(void *arg)
{
    parked_call *p = arg;
    p->wait = NULL;
    loop_defer(resume_parked, p);
}

static void on_parked_abandon(void *arg)
{
    parked_call *p = arg;
    if (!p->wait) {
        p->abandoned = true; /* freed by resume_parked */
        return;
    }
    box_start_wait_cancel(p->wait);
    json_decref(p->args);
    free(p);
}

/* True when `b` is still starting: the call is parked, to run again with `args` once it is not. */
static bool park_until_started(mcp_call *call, const char *tool, json_t *args, box *b)
{
    kernel *k = box_default_kernel(b);
    if (kernel_get_state(k) != KERNEL_STARTING)
        return false;
    parked_call *p = calloc(1, sizeof *p);
    if (!p)
        die("out of memory");
    p->wait = box_when_started(k, on_parked_started, p);
    p->call = call;
    snprintf(p->tool, sizeof p->tool, "%s", tool);
    p->args = json_copy(args);
    json_object_set_new(p->args, "sandbox_id", json_string(box_id(b)));
    mcp_call_on_abandon(call, on_parked_abandon, p);
    return true;
}

/* sandbox_for, for a tool that needs the sandbox started: NULL also when the call waits for it. */
static box *started_sandbox_for(mcp_call *call, const char *tool, json_t *args,
                                char default_sandbox[64], bool create)
{
    box *b = sandbox_for(call, args, default_sandbox, create);
    return b && park_until_started(call, tool, args, b) ? NULL : b;
}

static const char *string_arg(mcp_call *call, json_t *args, const char *name, bool required)
{
    json_t *value = json_object_get(args, name);
    if ((!value || json_is_null(value)) && !required)
        return NULL;
    if (!json_is_string(value)) {
        finish_text(call, true, "'%s' is required and must be a string", name);
        return NULL;
    }
    return json_string_value(value);
}

/* -1 with the call finished on a bad value; `fallback` when absent. */
static int int_arg(mcp_call *call, json_t *args, const char *name, int minimum, int maximum, int fallback)
{
    json_t *value = json_object_get(args, name);
    if (!value || json_is_null(value))
        return fallback;
    if (!json_is_integer(value) || json_integer_value(value) < minimum ||
        json_integer_value(value) > maximum) {
        finish_text(call, true, "'%s' must be an integer from %d to %d", name, minimum, maximum);
        return -1;
    }
    return (int)json_integer_value(value);
}

/* ---- run_code ---- */

typedef struct code_run {
    mcp_call *call;
    execution *execution;
    char preface[256]; /* said before the output (run_code_in_fork: which fork ran it), or "" */
    buffer out, err, values;
    buffer charts; /* each figure's structured chart, one JSON line each */
    bool truncated;
    json_t *images;
    json_t *error;
} code_run;

/* A figure's chart (type, title, axes, data) as one line of JSON: a model reads the numbers
   behind a plot it cannot see. Whole or not at all: JSON cut at the cap would mislead. */
static void append_chart(code_run *run, json_t *chart)
{
    char *line = json_dumps(chart, JSON_COMPACT);
    if (!line)
        return;
    size_t length = strlen(line);
    if (buffer_size(&run->charts) + length + 1 <= TEXT_CAP) {
        buffer_append(&run->charts, line, length);
        buffer_append(&run->charts, "\n", 1);
    } else {
        const char *type = json_string_value(json_object_get(chart, "type"));
        char note[160];
        snprintf(note, sizeof note,
                 "[a %s chart of %zu bytes is left out: past the %d KiB a tool result lists]\n",
                 type ? type : "figure's", length, TEXT_CAP / 1024);
        append_capped(&run->charts, note, strlen(note), &run->truncated);
    }
    free(line);
}

static void code_on_event(void *arg, json_t *event)
{
    code_run *run = arg;
    const char *type = json_string_value(json_object_get(event, "type"));
    if (!type)
        return;
    if (strcmp(type, "stdout") == 0 || strcmp(type, "stderr") == 0) {
        json_t *text = json_object_get(event, "text");
        append_capped(strcmp(type, "stdout") == 0 ? &run->out : &run->err, json_string_value(text),
                      json_string_length(text), &run->truncated);
    } else if (strcmp(type, "result") == 0) {
        static const struct { const char *field, *mime; } images[] = {
            {"png", "image/png"}, {"jpeg", "image/jpeg"}};
        bool had_image = false;
        for (size_t i = 0; i < 2; i++) {
            const char *data = json_string_value(json_object_get(event, images[i].field));
            if (data) {
                json_array_append_new(run->images, json_pack("{s:s, s:s, s:s}", "type", "image",
                                                             "data", data, "mimeType", images[i].mime));
                had_image = true;
            }
        }
        json_t *chart = json_object_get(event, "chart");
        if (json_is_object(chart))
            append_chart(run, chart);
        const char *text = json_string_value(json_object_get(event, "text"));
        const char *html = json_string_value(json_object_get(event, "html"));
        if (had_image)
            return; /* its text is a repr like "<Figure size ...>" */
        if (text) {
            append_capped(&run->values, text, strlen(text), &run->truncated);
            append_capped(&run->values, "\n", 1, &run->truncated);
        } else if (html) {
            append_capped(&run->values, html, strlen(html), &run->truncated);
            append_capped(&run->values, "\n", 1, &run->truncated);
        }
    } else if (strcmp(type, "error") == 0) {
        json_decref(run->error);
        run->error = json_incref(event);
    }
}

static void code_on_end(void *arg)
{
    code_run *run = arg;
    buffer text = {0};
    append_text(&text, run->preface);
    append_section(&text, "stdout", &run->out);
    append_section(&text, "stderr", &run->err);
    append_section(&text, "result", &run->values);
    append_section(&text, "chart", &run->charts);
    if (run->error) {
        const char *traceback = json_string_value(json_object_get(run->error, "traceback"));
        append_text(&text, "error: ");
        text_append_without_ansi(&text, json_string_value(json_object_get(run->error, "name")));
        append_text(&text, ": ");
        text_append_without_ansi(&text, json_string_value(json_object_get(run->error, "value")));
        append_text(&text, "\n");
        const char *value = json_string_value(json_object_get(run->error, "value"));
        if (traceback && (!value || strcmp(traceback, value) != 0)) {
            append_text(&text, traceback); /* without colours: execution.c took them out */
            append_text(&text, "\n");
        }
    }
    if (run->truncated)
        append_text(&text, "[output truncated]\n");
    if (buffer_size(&text) == 0)
        append_text(&text, json_array_size(run->images) ? "(a chart)" : "(no output)");
    json_t *content = json_array();
    json_array_append_new(content, json_pack("{s:s, s:o}", "type", "text", "text", buffer_string(&text)));
    json_array_extend(content, run->images);
    mcp_call_finish(run->call, json_pack("{s:o, s:b}", "content", content, "isError", run->error != NULL));
    buffer_free(&text);
    buffer_free(&run->out);
    buffer_free(&run->err);
    buffer_free(&run->values);
    buffer_free(&run->charts);
    json_decref(run->images);
    json_decref(run->error);
    run->execution = NULL;
    free(run);
}

static void code_on_abandon(void *arg)
{
    code_run *run = arg;
    execution *e = run->execution;
    run->call = NULL;
    execution_abandon(e); /* no more events: the run record is freed below */
    buffer_free(&run->out);
    buffer_free(&run->err);
    buffer_free(&run->values);
    buffer_free(&run->charts);
    json_decref(run->images);
    json_decref(run->error);
    free(run);
}

static const execution_sink code_sink = {code_on_event, code_on_end};

/* NULL after a false string_arg answered; `*value` NULL when absent. */
static bool optional_string_arg(mcp_call *call, json_t *args, const char *name, const char **value)
{
    json_t *given = json_object_get(args, name);
    *value = string_arg(call, args, name, false);
    return *value || !given || json_is_null(given);
}

/* The sandbox's default context for `language` (made on first use); NULL with the call finished. */
static kernel *language_context(mcp_call *call, box *b, const char *language)
{
    const kernelspec *spec = box_spec_for_language(b, language);
    failure_kind failure;
    char why[512];
    kernel *context = spec ? box_context_for_language(b, spec, &failure, why, sizeof why) : NULL;
    if (!spec)
        finish_text(call, true, "language '%s' is not available: use %s", language,
                    kernelspec_language_list());
    else if (!context)
        finish_text(call, true, "cannot start a %s kernel: %s", language, why);
    return context;
}

static void create_context(mcp_call *call, json_t *args, char default_sandbox[64])
{
    const char *language, *cwd;
    if (!optional_string_arg(call, args, "language", &language) ||
        !optional_string_arg(call, args, "cwd", &cwd))
        return;
    if (cwd && (cwd[0] != '/' || strstr(cwd, ".."))) {
        finish_text(call, true, "cwd must be an absolute path without '..'");
        return;
    }
    box *b = sandbox_for(call, args, default_sandbox, true);
    if (!b)
        return;
    const kernelspec *spec = box_spec_for_language(b, language ? language : "python");
    if (!spec) {
        finish_text(call, true, "language '%s' is not available: use %s", language,
                    kernelspec_language_list());
        return;
    }
    failure_kind failure;
    char why[512];
    kernel *k = box_add_context(b, spec, cwd ? cwd : "/workspace", &failure, why, sizeof why);
    if (!k)
        finish_text(call, true, "cannot start the context: %s", why);
    else
        finish_text(call, false, "sandbox %s has a new %s context in %s; pass its id as "
                    "run_code's context_id: %s",
                    box_id(b), spec->language, cwd ? cwd : "/workspace", kernel_id(k));
}

/* Runs `code` in `context` of b; the call is finished with its output (after `preface`). */
static void start_code_run(mcp_call *call, box *b, kernel *context, const char *code,
                           int timeout_s, const char *preface)
{
    code_run *run = calloc(1, sizeof *run);
    if (!run)
        die("out of memory");
    run->call = call;
    run->images = json_array();
    snprintf(run->preface, sizeof run->preface, "%s", preface);
    execution_request request = {.code = code, .timeout_s = timeout_s};
    run->execution = execution_start(b, context, &request, &code_sink, run);
    mcp_call_on_abandon(call, code_on_abandon, run);
}

static void run_code(mcp_call *call, json_t *args, char default_sandbox[64])
{
    const char *code = string_arg(call, args, "code", true);
    int timeout_s = code ? int_arg(call, args, "timeout_s", 1, 86400, 0) : -1;
    if (!code || timeout_s < 0)
        return;
    const char *language, *context_id;
    if (!optional_string_arg(call, args, "language", &language) ||
        !optional_string_arg(call, args, "context_id", &context_id))
        return;
    if (language && context_id) {
        finish_text(call, true, "give language or context_id, not both");
        return;
    }
    box *b = sandbox_for(call, args, default_sandbox, true);
    if (!b)
        return;
    kernel *context = context_id ? box_find_context(b, context_id)
                                 : language_context(call, b, language ? language : "python");
    if (context_id && !context)
        finish_text(call, true, "context %s does not exist in sandbox %s: create_context makes one",
                    context_id, box_id(b));
    if (!context)
        return;
    start_code_run(call, b, context, code, timeout_s, "");
}

/* ---- run_command ---- */

typedef struct command_run {
    mcp_call *call;
    command *command;
    buffer out, err;
    bool truncated;
} command_run;

static void command_run_free(command_run *run)
{
    buffer_free(&run->out);
    buffer_free(&run->err);
    free(run);
}

static void command_on_output(void *arg, const char *stream, const char *text, size_t length)
{
    command_run *run = arg;
    append_capped(strcmp(stream, "stderr") == 0 ? &run->err : &run->out, text, length, &run->truncated);
}

static void command_on_exit(void *arg, command *c)
{
    command_run *run = arg;
    json_t *model = command_model(c, false);
    int exit_code = (int)json_integer_value(json_object_get(model, "exit_code"));
    bool timed_out = json_is_true(json_object_get(model, "timed_out"));
    const char *reason = json_string_value(json_object_get(model, "reason"));
    buffer text = {0};
    char line[160];
    snprintf(line, sizeof line, "exit code: %d%s\n", exit_code,
             timed_out ? " (timed out: the command was killed)" : "");
    append_text(&text, line);
    if (reason) { /* its sandbox ended it */
        append_text(&text, reason);
        append_text(&text, "\n");
    }
    json_decref(model);
    append_section(&text, "stdout", &run->out);
    append_section(&text, "stderr", &run->err);
    if (run->truncated)
        append_text(&text, "[output truncated]\n");
    mcp_call_finish(run->call, json_pack("{s:[{s:s, s:o}], s:b}", "content", "type", "text", "text",
                                         buffer_string(&text), "isError", exit_code != 0));
    buffer_free(&text);
    command_detach(c);
    command_run_free(run);
}

static void command_on_abandon(void *arg)
{
    command_run *run = arg;
    command_detach(run->command); /* the client went away: the command is killed */
    command_run_free(run);
}

static const command_sink command_sink_for_mcp = {command_on_output, command_on_exit};

static void run_command(mcp_call *call, json_t *args, char default_sandbox[64])
{
    const char *cmd = string_arg(call, args, "cmd", true);
    const char *cwd = cmd ? string_arg(call, args, "cwd", false) : NULL;
    const char *stdin_text = cmd ? string_arg(call, args, "stdin", false) : NULL;
    int timeout_s = cmd ? int_arg(call, args, "timeout_s", 1, 86400, DEFAULT_COMMAND_TIMEOUT_S) : -1;
    if (!cmd || timeout_s < 0)
        return;
    if (cwd && (cwd[0] != '/' || strstr(cwd, ".."))) {
        finish_text(call, true, "cwd must be an absolute path without '..'");
        return;
    }
    box *b = started_sandbox_for(call, "run_command", args, default_sandbox, true);
    if (!b)
        return;
    command_run *run = calloc(1, sizeof *run);
    if (!run)
        die("out of memory");
    run->call = call;
    command_request request = {.cmd = cmd, .cwd = cwd, .timeout_s = timeout_s,
                               .stdin_data = stdin_text,
                               .stdin_length = stdin_text ? strlen(stdin_text) : 0};
    failure_kind failure;
    char why[512];
    run->command = command_start(b, &request, &command_sink_for_mcp, run, &failure, why, sizeof why);
    if (!run->command) {
        command_run_free(run);
        finish_text(call, true, "cannot start the command: %s", why);
        return;
    }
    mcp_call_on_abandon(call, command_on_abandon, run);
}

/* ---- files ---- */

/* Through box_open_files, as /v1 and E2B's files: the same checks and the same refusals. */
static bool open_files(mcp_call *call, box *b, confined *c)
{
    char why[512];
    if (box_open_files(b, c, why, sizeof why))
        return true;
    finish_text(call, true, "%s", why);
    return false;
}

static void close_files(confined *c) { box_close_files(c); }

static bool is_utf8_text(const unsigned char *data, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = data[i];
        size_t extra = ch < 0x80 ? 0 : (ch & 0xE0) == 0xC0 ? 1 : (ch & 0xF0) == 0xE0 ? 2
                                     : (ch & 0xF8) == 0xF0 ? 3 : 9;
        if (extra == 9 || (ch == 0))
            return false;
        for (size_t k = 1; k <= extra; k++)
            if (i + k >= n || (data[i + k] & 0xC0) != 0x80)
                return false;
        i += extra;
    }
    return true;
}

static void read_file(mcp_call *call, json_t *args, char default_sandbox[64])
{
    const char *path = string_arg(call, args, "path", true);
    box *b = path ? started_sandbox_for(call, "read_file", args, default_sandbox, false) : NULL;
    confined c;
    if (!b || !open_files(call, b, &c))
        return;
    struct stat st;
    int fd = confined_open_read(&c, path, &st);
    if (fd < 0) {
        finish_text(call, true, "%s", c.why);
        close_files(&c);
        return;
    }
    size_t size = st.st_size > READ_CAP ? READ_CAP : (size_t)st.st_size;
    unsigned char *data = malloc(size + 1);
    size_t got = 0;
    while (data && got < size) {
        ssize_t n = read(fd, data + got, size - got);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    close_files(&c);
    if (!data)
        die("out of memory");
    const char *dot = strrchr(path, '.');
    const char *image = dot && strcasecmp(dot, ".png") == 0 ? "image/png"
                        : dot && (strcasecmp(dot, ".jpg") == 0 || strcasecmp(dot, ".jpeg") == 0) ? "image/jpeg"
                                                                                                  : NULL;
    if (image && (long long)got == (long long)st.st_size) {
        char *encoded = malloc(4 * ((got + 2) / 3) + 1);
        if (!encoded)
            die("out of memory");
        EVP_EncodeBlock((unsigned char *)encoded, data, (int)got);
        mcp_call_finish(call, json_pack("{s:[{s:s, s:s, s:s}]}", "content", "type", "image", "data",
                                        encoded, "mimeType", image));
        free(encoded);
    } else if (is_utf8_text(data, got)) {
        data[got] = '\0';
        if ((long long)got < (long long)st.st_size)
            finish_text(call, false, "%s\n[only the first %zu of %lld bytes]", (char *)data, got,
                        (long long)st.st_size);
        else
            mcp_call_finish(call, json_pack("{s:[{s:s, s:s%}]}", "content", "type", "text", "text",
                                            (char *)data, got));
    } else {
        finish_text(call, false, "%s is a binary file of %lld bytes (not shown); use run_code to "
                    "inspect it", path, (long long)st.st_size);
    }
    free(data);
}

static void write_file(mcp_call *call, json_t *args, char default_sandbox[64])
{
    const char *path = string_arg(call, args, "path", true);
    const char *content = path ? string_arg(call, args, "content", true) : NULL;
    const char *encoding = content ? string_arg(call, args, "encoding", false) : NULL;
    if (!content)
        return;
    bool base64 = encoding && strcmp(encoding, "base64") == 0;
    if (encoding && !base64 && strcmp(encoding, "utf-8") != 0) {
        finish_text(call, true, "encoding must be 'utf-8' or 'base64'");
        return;
    }
    size_t length = strlen(content);
    unsigned char *bytes = (unsigned char *)strdup(content);
    if (!bytes)
        die("out of memory");
    if (base64) {
        EVP_ENCODE_CTX *ctx = EVP_ENCODE_CTX_new();
        int n = 0, tail = 0;
        EVP_DecodeInit(ctx);
        if (EVP_DecodeUpdate(ctx, bytes, &n, (const unsigned char *)content, (int)length) < 0 ||
            EVP_DecodeFinal(ctx, bytes + n, &tail) < 0) {
            EVP_ENCODE_CTX_free(ctx);
            free(bytes);
            finish_text(call, true, "content is not valid base64");
            return;
        }
        EVP_ENCODE_CTX_free(ctx);
        length = (size_t)(n + tail);
    }
    box *b = started_sandbox_for(call, "write_file", args, default_sandbox, true);
    confined c;
    if (!b || !open_files(call, b, &c)) {
        free(bytes);
        return;
    }
    bool existed;
    int fd = confined_open_write(&c, path, 0644, &existed);
    size_t done = 0;
    while (fd >= 0 && done < length) {
        ssize_t n = write(fd, bytes + done, length - done);
        if (n <= 0) {
            confined_fail(&c, n < 0 ? errno : EIO, path);
            confined_discard(&c, path, fd);
            close(fd);
            fd = -1;
            break;
        }
        done += (size_t)n;
    }
    free(bytes);
    if (fd < 0)
        finish_text(call, true, "%s", c.why);
    else
        finish_text(call, false, "wrote %zu bytes to %s", length, path);
    if (fd >= 0)
        close(fd);
    close_files(&c);
}

static void list_files(mcp_call *call, json_t *args, char default_sandbox[64])
{
    const char *path = string_arg(call, args, "path", false);
    int depth = int_arg(call, args, "depth", 1, CONFINED_MAX_DEPTH, 1);
    if (depth < 0)
        return;
    box *b = started_sandbox_for(call, "list_files", args, default_sandbox, false);
    confined c;
    if (!b || !open_files(call, b, &c))
        return;
    json_t *entries = confined_list(&c, path ? path : "/workspace", depth);
    if (!entries) {
        finish_text(call, true, "%s", c.why);
        close_files(&c);
        return;
    }
    close_files(&c);
    buffer text = {0};
    size_t i;
    json_t *entry;
    json_array_foreach(entries, i, entry)
    {
        char line[4300];
        snprintf(line, sizeof line, "%-7s %10lld  %s\n",
                 json_string_value(json_object_get(entry, "type")),
                 (long long)json_integer_value(json_object_get(entry, "size")),
                 json_string_value(json_object_get(entry, "path")));
        append_text(&text, line);
    }
    if (!buffer_size(&text))
        append_text(&text, "(empty directory)");
    mcp_call_finish(call, json_pack("{s:[{s:s, s:o}]}", "content", "type", "text", "text",
                                    buffer_string(&text)));
    buffer_free(&text);
    json_decref(entries);
}

/* ---- sandboxes ---- */

static void create_sandbox(mcp_call *call, json_t *args)
{
    int timeout_s = int_arg(call, args, "timeout_s", 0, 86400 * 30, DEFAULT_SANDBOX_TTL_S);
    json_t *metadata = json_object_get(args, "metadata");
    if (timeout_s < 0)
        return;
    if (metadata && !json_is_object(metadata)) {
        finish_text(call, true, "metadata must be an object of strings");
        return;
    }
    const char *template_name = manager_default_kernel();
    if (json_object_get(args, "template") &&
        !(template_name = string_arg(call, args, "template", false)))
        return;
    if (!kernelspec_find(template_name)) {
        buffer names = {0};
        for (size_t i = 0; i < kernelspec_count(); i++) {
            append_text(&names, i ? ", " : "");
            append_text(&names, kernelspec_at(i)->name);
        }
        finish_text(call, true,
                    "there is no template '%s' (there are: %.*s; list_templates "
                    "describes them)",
                    template_name, (int)buffer_size(&names), buffer_head(&names));
        buffer_free(&names);
        return;
    }
    /* network: true, or {allowOut, denyOut}, which asks for network too (as on /v1) */
    json_t *network = json_object_get(args, "network");
    json_t *allow_out = json_object_get(network, "allowOut"), *deny_out = json_object_get(network, "denyOut");
    if (network && !json_is_null(network) && !json_is_boolean(network) && !json_is_object(network)) {
        finish_text(call, true, "network must be true, false or {\"allowOut\": [...], \"denyOut\": [...]}");
        return;
    }
    failure_kind failure;
    char why[512];
    kernel *k = manager_create(template_name, NULL, NULL, json_is_object(network) ? json_true() : network,
                               NULL, &failure, why, sizeof why);
    if (k && (allow_out || deny_out) && manager_set_egress(k, allow_out, deny_out, why, sizeof why) < 0) {
        manager_delete(k);
        finish_text(call, true, "cannot create a sandbox: %s", why);
        return;
    }
    if (!k) {
        finish_text(call, true, "cannot create a sandbox: %s", why);
        return;
    }
    box *b = box_of(k);
    box_configure(b, metadata, NULL, timeout_s);
    finish_text(call, false,
                "created sandbox %s from template %s (Python; %s; %s). Pass it as "
                "sandbox_id to run_code, run_command and the file tools.",
                box_id(b), template_name, box_limits(b)->network ? "with network" : "no network",
                timeout_s ? "deleted after the timeout unless used" : "kept until deleted");
}

/* ---- templates ---- */

/* One line a template: "NAME  KIND  from FROM  packages a==1, b==2  preloads m, n". */
static void append_template_line(buffer *text, json_t *model)
{
    const char *from = json_string_value(json_object_get(model, "from"));
    const char *preload = json_string_value(json_object_get(model, "preload"));
    json_t *packages = json_object_get(model, "packages"), *package;
    size_t i;
    append_text(text, json_string_value(json_object_get(model, "name")));
    append_text(text, "  ");
    append_text(text, json_string_value(json_object_get(model, "kind")));
    if (from) {
        append_text(text, "  from ");
        append_text(text, from);
    }
    append_text(text, "  packages: ");
    json_array_foreach(packages, i, package)
    {
        append_text(text, i ? ", " : "");
        append_text(text, json_string_value(package));
    }
    if (!json_array_size(packages))
        append_text(text, "the base's only");
    if (preload && *preload) {
        append_text(text, "  preloads: ");
        append_text(text, preload);
    }
    append_text(text, "\n");
}

static void list_templates(mcp_call *call)
{
    json_t *models = templates_list_model(), *model; /* python3 first */
    buffer text = {0};
    size_t i;
    json_array_foreach(models, i, model) append_template_line(&text, model);
    append_text(&text, "Pass a name as create_sandbox's template.");
    mcp_call_finish(call,
                    json_pack("{s:[{s:s, s:o}], s:{s:o}}", "content", "type", "text", "text",
                              buffer_string(&text), "structuredContent", "templates", models));
    buffer_free(&text);
}

static void update_network(mcp_call *call, json_t *args, char default_sandbox[64])
{
    box *b = sandbox_for(call, args, default_sandbox, false);
    if (!b)
        return;
    if (!box_limits(b)->network) {
        finish_text(call, true, "sandbox %s has no network: create one with create_sandbox "
                    "{\"network\": true} (the daemon must run with --allow-network)", box_id(b));
        return;
    }
    char why[512];
    json_t *allow_out = json_object_get(args, "allowOut"), *deny_out = json_object_get(args, "denyOut");
    if (manager_set_egress(box_default_kernel(b), allow_out, deny_out, why, sizeof why) < 0) {
        finish_text(call, true, "%s", why);
        return;
    }
    json_t *network = kernel_network_model(box_default_kernel(b));
    char *lists = json_dumps(network, JSON_COMPACT);
    finish_text(call, false, "sandbox %s's network is now %s", box_id(b), lists ? lists : "set");
    free(lists);
    json_decref(network);
}

static void list_sandboxes(mcp_call *call)
{
    buffer text = {0};
    for (size_t i = 0; i < manager_count(); i++) {
        box *b = box_of(manager_at(i));
        json_t *model = box_model(b);
        char *metadata = json_dumps(json_object_get(model, "metadata"), JSON_COMPACT);
        char line[512];
        const char *ends = json_string_value(json_object_get(model, "ends_at"));
        snprintf(line, sizeof line, "%s  %-7s  expires %s  metadata %s\n", box_id(b),
                 box_state_name(box_get_state(b)), ends ? ends : "never", metadata ? metadata : "{}");
        append_text(&text, line);
        free(metadata);
        json_decref(model);
    }
    if (!buffer_size(&text))
        append_text(&text, "no sandboxes");
    mcp_call_finish(call, json_pack("{s:[{s:s, s:o}]}", "content", "type", "text", "text",
                                    buffer_string(&text)));
    buffer_free(&text);
}

static void sandbox_action(mcp_call *call, json_t *args, char default_sandbox[64], const char *action)
{
    char why[512];
    json_t *given = json_object_get(args, "sandbox_id");
    bool is_default = !given || json_is_null(given);
    if (!is_default && !json_is_string(given)) {
        finish_text(call, true, "sandbox_id must be a string (an id from create_sandbox or "
                                "list_sandboxes)");
        return;
    }
    box *b = !is_default ? box_find(json_string_value(given))
                         : (default_sandbox[0] ? box_find(default_sandbox) : NULL);
    if (!b) {
        finish_text(call, true, "%s", !is_default ? "no such sandbox: call list_sandboxes"
                                                  : "this session has no sandbox yet: give sandbox_id");
        return;
    }
    if (strcmp(action, "delete") == 0) {
        char id[64];
        snprintf(id, sizeof id, "%s", box_id(b));
        manager_delete(box_default_kernel(b));
        if (is_default || strcmp(id, default_sandbox) == 0)
            default_sandbox[0] = '\0';
        finish_text(call, false, "deleted sandbox %s", id);
        return;
    }
    if (box_get_state(b) == BOX_DEAD) {
        finish_text(call, true, "sandbox %s is dead: delete it", box_id(b));
        return;
    }
    int rc = strcmp(action, "pause") == 0 ? box_pause(b, why, sizeof why) : box_resume(b, why, sizeof why);
    if (rc < 0)
        finish_text(call, true, "%s", why);
    else
        finish_text(call, false, "sandbox %s is %s", box_id(b), box_state_name(box_get_state(b)));
}

/* ---- snapshots and forks (model/snapshots.h) ----
   Each waits for the model's answer; a client that goes away meanwhile leaves what was made
   (a snapshot, a restored sandbox, forks: list_sandboxes and the /v1 API still show them). */

typedef struct snapshot_call {
    mcp_call *call;  /* NULL once the client went away */
    char source[64]; /* the sandbox it began from, or "" */
    char *code;      /* run_code_in_fork: what to run in the fork, else NULL */
    char *language;
    int timeout_s;
} snapshot_call;

static void snapshot_call_abandoned(void *arg)
{
    snapshot_call *p = arg;
    p->call = NULL;
}

static snapshot_call *snapshot_call_new(mcp_call *call, box *source)
{
    snapshot_call *p = calloc(1, sizeof *p);
    if (!p)
        die("out of memory");
    p->call = call;
    snprintf(p->source, sizeof p->source, "%s", source ? box_id(source) : "");
    mcp_call_on_abandon(call, snapshot_call_abandoned, p);
    return p;
}

static void snapshot_call_free(snapshot_call *p)
{
    free(p->code);
    free(p->language);
    free(p);
}

/* A model call that could not start: the call is finished with why. */
static void snapshot_call_refused(snapshot_call *p, const char *what, const char *why)
{
    mcp_call_on_abandon(p->call, NULL, NULL);
    finish_text(p->call, true, "cannot %s: %s", what, why);
    snapshot_call_free(p);
}

/* "process, python (x, y not carried)" — how each context was kept or came back. */
static void append_carried(buffer *text, json_t *contexts)
{
    size_t index;
    json_t *context;
    json_array_foreach(contexts, index, context) {
        const char *carried = json_string_value(json_object_get(context, "carried"));
        const char *language = json_string_value(json_object_get(context, "language"));
        char *report = json_dumps(json_object_get(context, "report"), JSON_COMPACT);
        char line[512];
        snprintf(line, sizeof line, "\n  context %s (%s): %s%s%s",
                 json_string_value(json_object_get(context, "context_id")),
                 language ? language : "?",
                 carried && strcmp(carried, "process") == 0 ? "its live state, whole"
                 : carried && strcmp(carried, "python") == 0
                     ? "its variables only (a new process)"
                     : "a fresh kernel (its state could not be kept)",
                 report && strcmp(report, "{}") != 0 ? "; " : "",
                 report && strcmp(report, "{}") != 0 ? report : "");
        append_text(text, line);
        free(report);
    }
}

static void on_snapshot_taken(void *arg, json_t *result, failure_kind failure, const char *why)
{
    snapshot_call *p = arg;
    if (p->call && !result) {
        finish_text(p->call, true, "cannot snapshot sandbox %s: %s", p->source, why);
    } else if (p->call) {
        buffer text = {0};
        char line[512];
        snprintf(line, sizeof line,
                 "snapshot %s of sandbox %s (which goes on running); restore_snapshot with "
                 "this snapshot_id brings it back:",
                 json_string_value(json_object_get(result, "snapshot_id")), p->source);
        append_text(&text, line);
        append_carried(&text, json_object_get(result, "contexts"));
        mcp_call_finish(p->call, json_pack("{s:[{s:s, s:o}]}", "content", "type", "text", "text",
                                           buffer_string(&text)));
        buffer_free(&text);
    }
    snapshot_call_free(p);
}

static void snapshot_sandbox(mcp_call *call, json_t *args, char default_sandbox[64])
{
    const char *name;
    if (!optional_string_arg(call, args, "name", &name))
        return;
    box *b = sandbox_for(call, args, default_sandbox, false);
    if (!b)
        return;
    snapshot_call *p = snapshot_call_new(call, b);
    failure_kind failure;
    char why[512];
    if (snapshot_create(b, name, NULL, on_snapshot_taken, p, &failure, why, sizeof why) < 0)
        snapshot_call_refused(p, "snapshot the sandbox", why);
}

static void on_restored(void *arg, json_t *result, failure_kind failure, const char *why)
{
    snapshot_call *p = arg;
    if (p->call && !result) {
        finish_text(p->call, true, "cannot restore snapshot %s: %s", p->source, why);
    } else if (p->call) {
        buffer text = {0};
        char line[512];
        snprintf(line, sizeof line, "sandbox %s is snapshot %s's state again; pass it as "
                 "sandbox_id:", json_string_value(json_object_get(result, "id")), p->source);
        append_text(&text, line);
        append_carried(&text, json_object_get(json_object_get(result, "restore"), "contexts"));
        mcp_call_finish(p->call, json_pack("{s:[{s:s, s:o}]}", "content", "type", "text", "text",
                                           buffer_string(&text)));
        buffer_free(&text);
    }
    snapshot_call_free(p);
}

static void restore_snapshot(mcp_call *call, json_t *args)
{
    const char *snapshot_id = string_arg(call, args, "snapshot_id", true);
    json_t *in_place = json_object_get(args, "in_place");
    if (!snapshot_id)
        return;
    if (in_place && !json_is_boolean(in_place)) {
        finish_text(call, true, "'in_place' must be true or false");
        return;
    }
    json_t *snapshot = snapshot_get(snapshot_id);
    if (!snapshot) {
        finish_text(call, true, "snapshot %s does not exist: snapshot_sandbox makes one", snapshot_id);
        return;
    }
    /* a rewind keeps its sandbox's timeout and metadata; a new sandbox is the session's kind */
    json_t *options = json_is_true(in_place)
                          ? json_pack("{s:O}", "sandbox_id", json_object_get(snapshot, "sandbox_id"))
                          : json_pack("{s:i, s:{s:s}}", "timeout", DEFAULT_SANDBOX_TTL_S,
                                      "metadata", "created_by", "mcp");
    snapshot_call *p = snapshot_call_new(call, NULL);
    snprintf(p->source, sizeof p->source, "%s", snapshot_id);
    failure_kind failure;
    char why[512];
    if (snapshot_restore(snapshot_id, options, on_restored, p, &failure, why, sizeof why) < 0)
        snapshot_call_refused(p, "restore the snapshot", why);
    json_decref(options);
    json_decref(snapshot);
}

/* The first fork that started, from box_fork's answer; NULL when none did (*why says why). */
static box *first_fork(json_t *result, const char **why)
{
    size_t index;
    json_t *entry;
    *why = "the fork ended before it could run";
    json_array_foreach(result, index, entry) {
        json_t *sandbox = json_object_get(entry, "sandbox");
        box *b = sandbox ? box_find(json_string_value(json_object_get(sandbox, "id"))) : NULL;
        if (b)
            return b;
        json_t *message = json_object_get(json_object_get(entry, "error"), "message");
        if (json_is_string(message))
            *why = json_string_value(message);
    }
    return NULL;
}

/* run_code_in_fork, once the fork exists: the code runs in its context for the language. */
static void run_in_fork(snapshot_call *p, json_t *result)
{
    const char *why;
    box *fork = first_fork(result, &why);
    if (!fork) {
        finish_text(p->call, true, "cannot fork sandbox %s: %s", p->source, why);
        return;
    }
    mcp_call_on_abandon(p->call, NULL, NULL);
    kernel *context = language_context(p->call, fork, p->language ? p->language : "python");
    if (!context)
        return; /* finished with why; the fork is left for the agent to delete */
    char preface[256];
    snprintf(preface, sizeof preface,
             "ran in fork %s (a copy of sandbox %s, which is unchanged): keep working in it with "
             "sandbox_id, or delete it with delete_sandbox\n",
             box_id(fork), p->source);
    start_code_run(p->call, fork, context, p->code, p->timeout_s, preface);
}

static void on_forked(void *arg, json_t *result, failure_kind failure, const char *why)
{
    snapshot_call *p = arg;
    if (p->call && !result) {
        finish_text(p->call, true, "cannot fork sandbox %s: %s", p->source, why);
    } else if (p->call && p->code) {
        run_in_fork(p, result);
    } else if (p->call) {
        buffer text = {0};
        size_t index;
        json_t *entry;
        append_text(&text, "forks of sandbox ");
        append_text(&text, p->source);
        append_text(&text, " (each its own copy; pass one as sandbox_id, delete_sandbox the "
                           "others):");
        json_array_foreach(result, index, entry) {
            json_t *sandbox = json_object_get(entry, "sandbox");
            const char *message =
                json_string_value(json_object_get(json_object_get(entry, "error"), "message"));
            append_text(&text, "\n  ");
            if (sandbox) {
                append_text(&text, json_string_value(json_object_get(sandbox, "id")));
            } else {
                append_text(&text, "(did not start: ");
                append_text(&text, message ? message : "unknown");
                append_text(&text, ")");
            }
        }
        mcp_call_finish(p->call, json_pack("{s:[{s:s, s:o}]}", "content", "type", "text", "text",
                                           buffer_string(&text)));
        buffer_free(&text);
    }
    snapshot_call_free(p);
}

/* fork_sandbox, and run_code_in_fork when `code` is given. */
static void fork_sandbox(mcp_call *call, json_t *args, char default_sandbox[64], const char *code)
{
    const char *language = NULL;
    int count = code ? 1 : int_arg(call, args, "count", 1, FORK_COUNT_MAX, 1);
    int timeout_s = code ? int_arg(call, args, "timeout_s", 1, 86400, 0) : 0;
    if (count < 0 || timeout_s < 0 || (code && !optional_string_arg(call, args, "language", &language)))
        return;
    box *b = sandbox_for(call, args, default_sandbox, false);
    if (!b)
        return;
    snapshot_call *p = snapshot_call_new(call, b);
    p->timeout_s = timeout_s;
    if (code && (!(p->code = strdup(code)) || (language && !(p->language = strdup(language)))))
        die("out of memory");
    json_t *options = json_pack("{s:i, s:{s:s, s:s}}", "timeout", DEFAULT_SANDBOX_TTL_S,
                                "metadata", "created_by", "mcp", "forked_from", box_id(b));
    failure_kind failure;
    char why[512];
    if (box_fork(b, count, options, on_forked, p, &failure, why, sizeof why) < 0)
        snapshot_call_refused(p, "fork the sandbox", why);
    json_decref(options);
}

/* ---- run ---- */

static void on_run_done(void *arg, json_t *answer)
{
    mcp_call *call = arg;
    int exit_code = (int)json_integer_value(json_object_get(answer, "exit_code"));
    const char *output = json_string_value(json_object_get(answer, "output"));
    finish_text(call, exit_code != 0, "exit code: %d\n%s", exit_code, output ? output : "");
}

static void on_run_abandon(void *arg) { stateless_run_abandon(arg); }

static void run_once(mcp_call *call, json_t *args)
{
    const char *code = string_arg(call, args, "code", true);
    const char *language = code ? string_arg(call, args, "language", false) : NULL;
    int timeout_s = code ? int_arg(call, args, "timeout_s", 1, 3600, DEFAULT_RUN_TIMEOUT_S) : -1;
    if (!code || timeout_s < 0)
        return;
    if (!language)
        language = "python";
    static const char *const run_languages[] = {"python", "bash",       "sh", "javascript",
                                                "typescript", "r", NULL};
    size_t known = 0;
    while (run_languages[known] && strcmp(run_languages[known], language) != 0)
        known++;
    if (!run_languages[known]) {
        finish_text(call, true, "language must be python, bash, sh, javascript, typescript or r");
        return;
    }
    json_t *blocks = json_pack("[{s:s, s:s}]", "language", language, "code", code);
    stateless_run_plan plan = {.blocks = blocks, .timeout_s = timeout_s, .max_output = TEXT_CAP};
    failure_kind failure;
    char why[512];
    stateless_run *run = stateless_run_start(&plan, on_run_done, call, &failure, why, sizeof why);
    json_decref(blocks);
    if (run)
        mcp_call_on_abandon(call, on_run_abandon, run);
    else
        finish_text(call, true, "cannot run: %s", why);
}

/* ---- dispatch ---- */

/* A tool call for a hibernated sandbox (model/snapshots.h: kept only on disk) waits while the
   sandbox wakes, then runs again, whole, naming it by sandbox_id. */
typedef struct waking_call {
    mcp_call *call; /* NULL once the client went away */
    char tool[32];
    json_t *args;
} waking_call;

static void on_waking_abandon(void *arg)
{
    waking_call *w = arg;
    w->call = NULL;
}

static void on_woken(void *arg, json_t *result, failure_kind failure, const char *why)
{
    waking_call *w = arg;
    if (w->call) {
        mcp_call_on_abandon(w->call, NULL, NULL);
        char no_default[64] = ""; /* sandbox_id names it */
        if (result)
            mcp_tools_call(w->call, w->tool, w->args, no_default);
        else
            finish_text(w->call, true, "sandbox %s is hibernated and could not be woken: %s",
                        json_string_value(json_object_get(w->args, "sandbox_id")), why);
    }
    json_decref(w->args);
    free(w);
}

/* Tools of the catalogue that work on a sandbox's processes or files; the rest (listing,
   creating, deleting, restoring, one-shot runs) do not wake one, nor does an unknown tool. */
static bool tool_needs_awake_sandbox(const char *name)
{
    static const char *const not_waking[] = {"create_sandbox",   "list_sandboxes", "list_templates",
                                             "restore_snapshot", "delete_sandbox", "run", NULL};
    for (size_t i = 0; not_waking[i]; i++)
        if (strcmp(name, not_waking[i]) == 0)
            return false;
    for (size_t i = 0; i < TOOL_COUNT; i++)
        if (strcmp(name, tools[i].name) == 0)
            return true;
    return false;
}

/* True when the call's sandbox is hibernated: it is woken and the call runs again after. */
static bool wake_before_call(mcp_call *call, const char *name, json_t *arguments,
                             const char *default_sandbox)
{
    json_t *given = json_object_get(arguments, "sandbox_id");
    const char *id = json_is_string(given) ? json_string_value(given) : default_sandbox;
    box *b = id && id[0] && tool_needs_awake_sandbox(name) ? box_find(id) : NULL;
    if (!b || !box_is_hibernated(b))
        return false;
    waking_call *w = calloc(1, sizeof *w);
    if (!w)
        die("out of memory");
    w->call = call;
    snprintf(w->tool, sizeof w->tool, "%s", name);
    w->args = json_is_object(arguments) ? json_copy(arguments) : json_object();
    json_object_set_new(w->args, "sandbox_id", json_string(box_id(b)));
    failure_kind failure;
    char why[512];
    if (box_wake(b, on_woken, w, &failure, why, sizeof why) < 0) {
        finish_text(call, true, "sandbox %s is hibernated and could not be woken: %s", box_id(b),
                    why);
        json_decref(w->args);
        free(w);
        return true;
    }
    mcp_call_on_abandon(call, on_waking_abandon, w);
    return true;
}

int mcp_tools_call(mcp_call *call, const char *name, json_t *arguments, char default_sandbox[64])
{
    if (wake_before_call(call, name, arguments, default_sandbox))
        return 0;
    if (strcmp(name, "create_sandbox") == 0)
        create_sandbox(call, arguments);
    else if (strcmp(name, "list_sandboxes") == 0)
        list_sandboxes(call);
    else if (strcmp(name, "list_templates") == 0)
        list_templates(call);
    else if (strcmp(name, "run_code") == 0)
        run_code(call, arguments, default_sandbox);
    else if (strcmp(name, "create_context") == 0)
        create_context(call, arguments, default_sandbox);
    else if (strcmp(name, "run_command") == 0)
        run_command(call, arguments, default_sandbox);
    else if (strcmp(name, "read_file") == 0)
        read_file(call, arguments, default_sandbox);
    else if (strcmp(name, "write_file") == 0)
        write_file(call, arguments, default_sandbox);
    else if (strcmp(name, "list_files") == 0)
        list_files(call, arguments, default_sandbox);
    else if (strcmp(name, "update_network") == 0)
        update_network(call, arguments, default_sandbox);
    else if (strcmp(name, "pause_sandbox") == 0)
        sandbox_action(call, arguments, default_sandbox, "pause");
    else if (strcmp(name, "resume_sandbox") == 0)
        sandbox_action(call, arguments, default_sandbox, "resume");
    else if (strcmp(name, "delete_sandbox") == 0)
        sandbox_action(call, arguments, default_sandbox, "delete");
    else if (strcmp(name, "snapshot_sandbox") == 0)
        snapshot_sandbox(call, arguments, default_sandbox);
    else if (strcmp(name, "restore_snapshot") == 0)
        restore_snapshot(call, arguments);
    else if (strcmp(name, "fork_sandbox") == 0)
        fork_sandbox(call, arguments, default_sandbox, NULL);
    else if (strcmp(name, "run_code_in_fork") == 0) {
        const char *code = string_arg(call, arguments, "code", true);
        if (code)
            fork_sandbox(call, arguments, default_sandbox, code);
    } else if (strcmp(name, "run") == 0)
        run_once(call, arguments);
    else
        return -1;
    return 0;
}

void mcp_tools_session_ended(const char *default_sandbox)
{
    box *b = default_sandbox[0] ? box_find(default_sandbox) : NULL;
    if (b)
        manager_delete(box_default_kernel(b));
}
