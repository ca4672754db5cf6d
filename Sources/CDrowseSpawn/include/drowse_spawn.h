/* The spawn of a handler: the child's side (drowse_internal_spawn_child), the clone3 into a
   cgroup, and the spawn helper's serving loop with its protocol. Shared by drowsed (CDrowseSys:
   its own spawns, and the helper's client) and the small drowse-spawner program
   (Sources/drowse-spawner), so both start a child with the same code. docs/architecture.md,
   "Starting a handler". */
#ifndef DROWSE_SPAWN_H
#define DROWSE_SPAWN_H
#include <stdint.h>
#include <sys/syscall.h>
#include <sys/types.h>

/* For C libraries and kernels' headers older than these calls (clone3: Linux 5.3, close_range:
   5.9, CLONE_INTO_CGROUP: 5.7). */
#ifndef SYS_clone3
#define SYS_clone3 435
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#ifndef CLONE_PARENT
#define CLONE_PARENT 0x00008000
#endif
#ifndef PR_SET_NO_NEW_PRIVS
#define PR_SET_NO_NEW_PRIVS 38
#endif
#ifndef PR_SET_CHILD_SUBREAPER
#define PR_SET_CHILD_SUBREAPER 36
#endif

/* Which step of a spawn failed (reported with its errno). */
enum {
    DROWSE_SPAWN_STEP_OTHER = 0,
    /// Writing to the cgroup's cgroup.procs failed.
    DROWSE_SPAWN_STEP_CGROUP = 1,
    /// Setting the handler's rlimits failed.
    DROWSE_SPAWN_STEP_LIMITS = 2,
};

/* Bits of spawn_args.set_ids beside 1 (switch to uid, gid and groups). */
#define DROWSE_SPAWN_NEW_SESSION 2  /* setsid(): a session of its own, no controlling terminal */
#define DROWSE_SPAWN_NO_NEW_PRIVS 4 /* PR_SET_NO_NEW_PRIVS before execve */

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
    const int *reset_signals; /* the signals to set to SIG_DFL, ending with 0; NULL: every signal */
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

/* ---- The spawn helper's protocol (one SOCK_SEQPACKET message each way per start). */

#define SPAWNER_NAME "drowse-spawner"
#define SPAWNER_MAGIC 0x44535031u /* "DSP1" */
/* A request's strings: far more than a handler's command and environment need. Larger
   requests are started by drowsed itself. */
#define SPAWNER_MAX (64 * 1024) /* well under a socket buffer (net.core.wmem_default, ~208 KiB) */
#define SPAWNER_MAX_STRINGS 8192
#define SPAWNER_MAX_GROUPS 1024

struct spawner_request {
    uint32_t magic;
    int32_t set_ids;
    uint32_t uid, gid;
    int32_t ngroups, argc, envc, has_cwd;
    int64_t nproc_limit, data_limit;
    int32_t close_to;
    /* then: gid_t groups[ngroups], path\0, cwd\0 (if has_cwd), argv[0..argc)\0..., envp[0..envc)\0... */
};

struct spawner_reply {
    int32_t clone_errno; /* clone3 failed: its errno (pid is -1) */
    int32_t pid;
    int32_t err, step; /* the child failed before execve (or execve failed): errno and step */
};


/* Serves start requests on `fd` until it closes; the process's exit status. */
int drowse_spawner_serve(int fd);

#endif
