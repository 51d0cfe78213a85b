#ifndef SBX_WATCH_H
#define SBX_WATCH_H
#include <signal.h>

/* sbx-helper watch ROOT MAX_DIRS (see watch.c); returns the helper's exit status. */
int watch_mode(const char *root, int max_dirs, volatile sig_atomic_t *stop);

#endif
