/* cellbox-jupyter-bridge — the program `cellbox-kernel --jupyter ...` execs (kernel_main.c), with
 * the same command line: the Jupyter bridge (jupyter_bridge.c) alone, without CPython. */
#include <signal.h>

#include "runtime/kernel_runtime.h"

int main(int argc, char **argv)
{
    /* As cellbox-kernel's main: an interrupt before the bridge runs must not end it (exec keeps
       SIGINT ignored; this holds when the program is run directly too). */
    signal(SIGINT, SIG_IGN);
    return jupyter_bridge_main(argc, argv);
}
