/* language_host — placeholder until the language host lands (issue 23). */
#include <stdio.h>

#include "runtime/kernel_runtime.h"

int language_host_main(int argc, char **argv)
{
    (void)argc, (void)argv;
    fprintf(stderr, "cellbox-kernel: --language is not built yet\n");
    return 2;
}
