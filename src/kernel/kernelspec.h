/* kernelspec — the kernels cellbox can start, and where their files live. */
#ifndef CELLBOX_KERNEL_KERNELSPEC_H
#define CELLBOX_KERNEL_KERNELSPEC_H

#include <jansson.h>

typedef struct kernelspec {
    const char *name;         /* "python3" */
    const char *display_name;
    const char *language;
} kernelspec;

/* Finds the kernel runtime next to the daemon binary: BIN/cellbox-kernel and
   BIN/../share/cellbox/{python,kernelspecs}. Exits with a clear message if they are missing. */
void kernelspec_init(void);
const kernelspec *kernelspec_find(const char *name);
const char *kernelspec_kernel_binary(void);
const char *kernelspec_python_dir(void);
json_t *kernelspec_model(const kernelspec *spec); /* {name, spec: {...}, resources: {...}} */
json_t *kernelspec_all_models(void);              /* {"python3": model, ...} */
/* Path of a resource file (e.g. logo-64x64.png) or NULL; `file` must be a plain name. */
char *kernelspec_resource_path(const char *name, const char *file);

#endif
