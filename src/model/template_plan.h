/* template_plan — a Dockerfile turned into the steps of a template build (template_build.h),
 * before any of them runs: the ENV/ARG/WORKDIR/USER/LABEL state followed instruction by
 * instruction, variables substituted where Docker substitutes them, COPY sources checked in the
 * context, and each layer step's cache key computed (SHA-256, OpenSSL) from its parent's key,
 * the instruction, the state and the sources' names, modes and contents. Everything a client can
 * get wrong before a step runs is found here and said with the instruction's line. */
#ifndef CELLBOX_MODEL_TEMPLATE_PLAN_H
#define CELLBOX_MODEL_TEMPLATE_PLAN_H

#include <stdbool.h>
#include <stddef.h>

#include "model/dockerfile.h"
#include "model/template_build.h"
#include "model/templates.h"

/* The variables every step starts with (Docker's PATH, the sandbox user's home, and pip/npm
   caches kept out of the layer); ENV adds to them. */
#define TEMPLATE_PLAN_KEY_HEX 16

typedef struct build_step {
    const dockerfile_instruction *instruction;
    bool has_layer;                      /* RUN, COPY, ADD, WORKDIR */
    char key[TEMPLATE_PLAN_KEY_HEX + 1]; /* its layer's, when it has one */
    char **argv;                         /* RUN: the program (NULL-terminated) */
    char **env;                          /* RUN: its environment (NULL-terminated) */
    char *workdir;                       /* where RUN starts; COPY's relative destinations */
    char **sources;                      /* COPY/ADD: as written, substituted (NULL-terminated) */
    int source_count;
    char *destination;   /* COPY/ADD: absolute; WORKDIR: the directory it makes */
    bool into_directory; /* the destination ends in '/' */
    int lower_count;     /* the layers beneath this step's (the plan's first ones) */
} build_step;

typedef struct build_plan {
    char *from;          /* as written */
    char *base_template; /* FROM a template with files: its name; NULL: the base */
    int step_count;
    build_step *steps; /* one per instruction */
    int layer_count;   /* the template's layers, FROM's first, bottom to top */
    char layers[TEMPLATES_MAX_LAYERS][TEMPLATES_LAYER_KEY_MAX];
    char **extra_dirs; /* the WORKDIR and COPY destinations (NULL-terminated) */
    /* the state after the last instruction: the template's settings */
    int env_count;
    char *env[TEMPLATES_MAX_ENV]; /* "NAME=value" in the order ENV set them */
    char *workdir;                /* NULL: /home/user */
    char *user;                   /* "user" or "root" */
    char *preload;                /* the request's, or LABEL cellbox.preload's, or "" */
    int pool_size;
} build_plan;

/* The plan of `file` for `request`, or NULL with a kind (invalid, or not found for FROM a
   template that does not exist) and `why` naming the line. */
build_plan *template_plan_make(const dockerfile *file, const template_build_request *request,
                               failure_kind *failure, char *why, size_t why_size);
void template_plan_free(build_plan *plan);

#endif
