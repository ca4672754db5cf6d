/* Shared between shim.c (drowse_spawn) and spawner.c (the spawn helper); not part of the
   module's interface. */
#ifndef DROWSE_SPAWN_INTERNAL_H
#define DROWSE_SPAWN_INTERNAL_H
#include <pthread.h>
#include <sys/types.h>

/* What the child of drowse_spawn needs; it lives on the parent's (suspended) stack. */
struct spawn_args {
    const char *path;
    char *const *argv;
    char *const *envp;
    const char *cwd;
    int set_ids;
    uid_t uid;
    gid_t gid;
    const gid_t *groups;
    int ngroups;
    int stdin_fd, stdout_fd, stderr_fd;
    int cgroup_fd; /* an open cgroup.procs to join, or -1 (clone3 puts the child in its cgroup itself) */
    int err_pipe; /* the write end of a CLOEXEC pipe for err and step (a child without CLONE_VM), or -1 */
    int close_to; /* -1: close_range(2) closes everything above 2; else close 3...close_to one by one */
    int err; /* written by the child when a step fails; read by the parent after clone returns */
    int step; /* the DROWSE_SPAWN_STEP_* the child was at (set before each step that names itself) */
    long long nproc_limit; /* RLIMIT_NPROC for the handler (counted per user, not per app), or -1 */
    long long data_limit; /* RLIMIT_DATA in bytes (heap and private writable mappings), or -1 */
};

/* struct clone_args of clone3(2), as of Linux 5.7 (CLONE_INTO_CGROUP). */
struct drowse_clone_args {
    unsigned long long flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid, set_tid_size,
        cgroup;
};

#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif

/* The child's side of a spawn: signals, stdio, cgroup, user, limits, execve. */
int drowse_internal_spawn_child(void *p);
/* clone3(CLONE_VFORK | CLONE_INTO_CGROUP | extra_flags) running drowse_internal_spawn_child;
   the pid, or -1 with errno. */
pid_t drowse_internal_clone3_into_cgroup(struct spawn_args *a, int cgroup_dir, unsigned long long extra_flags);
int drowse_internal_close_range_works(void);
int drowse_internal_highest_fd_bound(void);

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
