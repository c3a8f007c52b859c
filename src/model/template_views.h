/* template_views — the files of templates with their own (templates.h): where the layers live
 * under DATA_DIR/templates, and the overlay mounts that make a template's read-only view or a
 * build step's writable one. templates.c keeps the records and calls these; the layer and build
 * view verbs of templates.h are implemented here. */
#ifndef CELLBOX_MODEL_TEMPLATE_VIEWS_H
#define CELLBOX_MODEL_TEMPLATE_VIEWS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* Called once by templates_init: DATA_DIR/templates and its folders (layers, staging, views,
   skeleton); what a previous daemon left in staging is removed, and any view it left mounted is
   unmounted. -1 with errno. */
int template_views_init(const char *data_dir);
/* DATA_DIR/templates (set by template_views_init). */
const char *template_views_root(void);
/* Whether `key` can name a layer: 16 lowercase hex digits, or "root-" and 16. */
bool template_views_is_layer_key(const char *key);
/* Mounts template `name`'s read-only view at DATA_DIR/templates/views/<name> from its layers
   (bottom to top; an imported root filesystem's "root-" layer first, when it has one) and writes
   its path into `view`. -1 with `why`; nothing stays mounted then. */
int template_views_mount(const char *name, const char *const *layers, int layer_count,
                         char *view, size_t view_size, char *why, size_t why_size);
/* Unmounts the view (every mount under it) and removes its directories. */
void template_views_unmount(const char *name);
/* The bytes of the files in a layer (what `du --apparent-size` counts), 0 if it has none. */
long long template_views_layer_bytes(const char *key);
/* Adds the Python distributions a layer holds ("name==version", from its *.dist-info
   directories in usr/local/lib/python3*\/dist-packages and usr/lib/python3/dist-packages) to
   `packages`, a JSON array, once each. */
void template_views_layer_packages(const char *key, json_t *packages);
/* Removes a layer's directory (templates.c knows no template uses it any more). */
void template_views_remove_layer(const char *key);

/* templates.c's, for template_import.c: removes a layer no template's record names. */
void templates_remove_layer_if_unused(const char *key);

#endif
