#define _GNU_SOURCE
/* drowse-spawner: the spawn helper as a program of its own, a few pages of C and libc, so that
   cloning a handler from it copies next to nothing (drowsed's own binary, run as the helper,
   maps every library drowsed links). drowsed starts it with the request socket as standard input
   when it is installed beside drowse (or in ../libexec/drowse/); docs/architecture.md, "Starting
   a handler". Not for running by hand: it serves one drowsed and ends with it. */
#include "drowse_spawn.h"
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

int main(void) {
    /* drowsed's death ends the helper (and if it died before this line, its end of the socket is
       closed: the first read ends the helper too). */
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    signal(SIGPIPE, SIG_IGN);
    return drowse_spawner_serve(0);
}
