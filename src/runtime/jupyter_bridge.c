/* jupyter_bridge — placeholder until the Jupyter bridge lands (issue 23). */
#include <stdio.h>

#include "runtime/kernel_runtime.h"

int jupyter_bridge_main(int argc, char **argv)
{
    (void)argc, (void)argv;
    fprintf(stderr, "cellbox-kernel: --jupyter is not built yet\n");
    return 2;
}
