#include "common/descriptors.h"

#include <stdio.h>

#include "common/fs.h"

static int budget;

void descriptors_set_budget(int descriptors) { budget = descriptors; }

bool descriptors_available(int needed, char *why, size_t why_size)
{
    if (budget <= 0)
        return true;
    int open = fs_count_open_descriptors(); /* a readdir: cheap beside starting anything */
    if (open >= 0 && open + needed <= budget)
        return true;
    snprintf(why, why_size, "the server is near its open-file limit: %d descriptors open, "
             "sandboxes and their commands may bring it to %d (the rest is kept for client "
             "connections); delete sandboxes you no longer need, or raise the daemon's limit "
             "(ulimit -n, LimitNOFILE=)", open, budget);
    return false;
}
