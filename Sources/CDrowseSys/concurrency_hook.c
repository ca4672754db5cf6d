#include "CDrowseSys.h"

/* The Swift runtime's global-enqueue hook. With a statically linked Swift runtime the symbol
   has hidden visibility, so dlsym (what NIO's installer uses) cannot find it; a reference
   from code linked into the same executable can. */
extern void *swift_task_enqueueGlobal_hook;

int drowse_set_enqueue_global_hook(void *hook) {
    if (swift_task_enqueueGlobal_hook != 0) return 0;
    swift_task_enqueueGlobal_hook = hook;
    return 1;
}
