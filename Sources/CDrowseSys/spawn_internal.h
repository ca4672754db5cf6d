/* Shared between shim.c (drowse_spawn) and spawner.c (the spawn helper's client); not part of
   the module's interface. The child's side and the helper's loop are in CDrowseSpawn. */
#ifndef DROWSE_SPAWN_INTERNAL_H
#define DROWSE_SPAWN_INTERNAL_H
#include <pthread.h>
#include <sys/types.h>

#include "drowse_spawn.h"

/* The registry of children drowse_spawn started (shim.c); the lock is held across every spawn. */
extern pthread_mutex_t drowse_internal_children_lock;
void drowse_internal_register_locked(pid_t pid);
void drowse_internal_forget_locked(pid_t pid);

/* Asks the spawn helper to clone3 the child (as a child of this process: CLONE_PARENT). Called
   with the children lock held. 0 with *pid set (or -1 and errno set, as clone3 would), and a's err
   and step filled; non-zero when there is no helper or it could not be reached (it is restarted):
   the caller spawns the child itself. */
int drowse_internal_spawner_clone3(struct spawn_args *a, int cgroup_dir, pid_t *pid);

#endif
