#define _GNU_SOURCE
#include "drowse_spawn.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>


/* The child's side of every handler start, drowsed's own or the spawn helper's. */

/* A child that shares the parent's memory writes err and step there; one that has its own copy
   (clone3 into a cgroup) sends them through err_pipe, which its execve would have closed. */
#define SPAWN_FAIL(a) do { \
        (a)->err = errno ? errno : EIO; \
        if ((a)->err_pipe >= 0) { int rep_[2] = { (a)->err, (a)->step }; ssize_t w_ = write((a)->err_pipe, rep_, sizeof rep_); (void)w_; } \
        _exit(127); \
    } while (0)

/* The child shares the parent's memory (CLONE_VM) until execve, like posix_spawn: nothing here
   may take a lock, allocate, or touch glibc's thread bookkeeping. In particular the user switch
   uses raw system calls: glibc's setuid/setgid/setgroups would "broadcast" the change to every
   thread of what it believes is its process — the parent's threads. */
int drowse_internal_spawn_child(void *p) {
    struct spawn_args *a = p;
    /* Default signal handling (the parent's handlers must never run here), own process group. */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    if (a->reset_signals) {
        for (const int *s = a->reset_signals; *s; s++) sigaction(*s, &dfl, NULL);
    } else {
        for (int s = 1; s < NSIG; s++) sigaction(s, &dfl, NULL);
    }
    if (a->set_ids & DROWSE_SPAWN_NEW_SESSION) {
        if (setsid() < 0) SPAWN_FAIL(a);
    } else if (setpgid(0, 0) != 0) {
        SPAWN_FAIL(a);
    }
    if (dup2(a->stdin_fd, 0) < 0 || dup2(a->stdout_fd, 1) < 0 || dup2(a->stderr_fd, 2) < 0) SPAWN_FAIL(a);
    /* Into the run's cgroup before anything of the handler runs, and while still privileged
       (the app's user may not write cgroup.procs): from here on its whole tree is in the leaf. */
    if (a->cgroup_fd >= 0) {
        a->step = DROWSE_SPAWN_STEP_CGROUP;
        if (write(a->cgroup_fd, "0", 1) != 1) SPAWN_FAIL(a);
        a->step = DROWSE_SPAWN_STEP_OTHER;
    }
    if (a->set_ids & 1) {
#if defined(SYS_setresuid32)
        /* 32-bit ARM and x86: the plain calls take 16-bit ids. */
        if (syscall(SYS_setgroups32, (size_t)a->ngroups, a->groups) != 0) SPAWN_FAIL(a);
        if (syscall(SYS_setresgid32, a->gid, a->gid, a->gid) != 0) SPAWN_FAIL(a);
        if (syscall(SYS_setresuid32, a->uid, a->uid, a->uid) != 0) SPAWN_FAIL(a);
#else
        if (syscall(SYS_setgroups, (size_t)a->ngroups, a->groups) != 0) SPAWN_FAIL(a);
        if (syscall(SYS_setresgid, a->gid, a->gid, a->gid) != 0) SPAWN_FAIL(a);
        if (syscall(SYS_setresuid, a->uid, a->uid, a->uid) != 0) SPAWN_FAIL(a);
#endif
    }
    /* After the user switch: the handler may only start where its user can go. */
    if (a->cwd && chdir(a->cwd) != 0) SPAWN_FAIL(a);
    /* Close every inherited descriptor but stdio (our pipes are CLOEXEC anyway; others may not be). */
    /* (err_pipe stays open: it reports a failed execve, and closes itself at a good one.) */
    if (a->close_to < 0) {
        if (a->err_pipe > 3) syscall(SYS_close_range, 3, (unsigned)a->err_pipe - 1, 0);
        syscall(SYS_close_range, a->err_pipe >= 3 ? (unsigned)a->err_pipe + 1 : 3U, ~0U, 0);
    } else {
        for (int fd = 3; fd <= a->close_to; fd++) if (fd != a->err_pipe) close(fd);
    }
    umask(022); /* drowsed itself runs with 077; handlers get the usual default */
    /* The handler adopts its own orphans (the bit survives execve): what it starts stays in its
       tree even when a middle process exits, so drowsed can tell whose leftovers are whose. */
    syscall(SYS_prctl, PR_SET_CHILD_SUBREAPER, 1UL, 0UL, 0UL, 0UL);
    /* drowsed may run with a high descriptor limit (LimitNOFILE); handlers get the usual soft
       limit, which select()-based code expects. The hard limit stays, so a handler may raise it. */
    struct rlimit nofile;
    if (syscall(SYS_prlimit64, 0, RLIMIT_NOFILE, NULL, &nofile) == 0 && nofile.rlim_cur > 1024) {
        nofile.rlim_cur = 1024;
        syscall(SYS_prlimit64, 0, RLIMIT_NOFILE, &nofile, NULL);
    }
    /* Per-app limits where the app's cgroup has no pids/memory controller. Set before execve and
       after the user switch (a root child is not held to RLIMIT_NPROC anyway); the hard limit too,
       so the handler cannot lift them. */
    if (a->nproc_limit >= 0) {
        struct rlimit rl = { (rlim_t)a->nproc_limit, (rlim_t)a->nproc_limit };
        a->step = DROWSE_SPAWN_STEP_LIMITS;
        if (syscall(SYS_prlimit64, 0, RLIMIT_NPROC, &rl, NULL) != 0) SPAWN_FAIL(a);
    }
    if (a->data_limit >= 0) {
        struct rlimit rl = { (rlim_t)a->data_limit, (rlim_t)a->data_limit };
        a->step = DROWSE_SPAWN_STEP_LIMITS;
        if (syscall(SYS_prlimit64, 0, RLIMIT_DATA, &rl, NULL) != 0) SPAWN_FAIL(a);
    }
    a->step = DROWSE_SPAWN_STEP_OTHER;
    if ((a->set_ids & DROWSE_SPAWN_NO_NEW_PRIVS) && syscall(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1UL, 0UL, 0UL, 0UL) != 0) SPAWN_FAIL(a);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execve(a->path, a->argv, a->envp);
    SPAWN_FAIL(a);
    return 127;
}

/* Kernels before 5.9 have no close_range(2). Probed once: closing a range where nothing is open. */
int drowse_internal_close_range_works(void) {
    static int state; /* 0 unknown, 1 yes, 2 no */
    int s = __atomic_load_n(&state, __ATOMIC_RELAXED);
    if (s == 0) {
        s = syscall(SYS_close_range, 0x7ffffff0U, 0x7ffffff0U, 0) == 0 ? 1 : 2;
        __atomic_store_n(&state, s, __ATOMIC_RELAXED);
    }
    return s == 1;
}

/* Without close_range the child closes descriptors one by one: up to the highest one open now
   (plus room for any another thread opens meanwhile), not to an arbitrary 65536. */
int drowse_internal_highest_fd_bound(void) {
    int hi = -1;
    DIR *d = opendir("/proc/self/fd");
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            int fd = atoi(e->d_name);
            if (fd > hi) hi = fd;
        }
        closedir(d);
        return hi + 64;
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < 65536) return (int)rl.rlim_cur - 1;
    return 65535;
}

/* Starts the child inside the cgroup whose directory is `cgroup_dir` with clone3(CLONE_INTO_CGROUP).
   Moving a process into a cgroup afterwards (writing cgroup.procs) takes the kernel's threadgroup
   write lock, which waits for an RCU grace period: ~10 ms per handler when runs are spaced out
   (measured: 10.8 ms p50 against 1.2 ms for clone3 into the cgroup). Without CLONE_VM the child
   has a copy of the parent's memory, as after fork, so it can return from the system call and run
   spawn_child on its copy of this stack; CLONE_VFORK still holds this thread until its execve.
   Returns the pid, or -1 with errno (ENOSYS, E2BIG, EINVAL: a kernel before 5.7). */
pid_t drowse_internal_clone3_into_cgroup(struct spawn_args *a, int cgroup_dir, unsigned long long extra_flags) {
    int errp[2];
    if (pipe2(errp, O_CLOEXEC) != 0) return -1;
    a->err_pipe = errp[1];
    struct drowse_clone_args ca;
    memset(&ca, 0, sizeof ca);
    ca.flags = CLONE_VFORK | CLONE_INTO_CGROUP | extra_flags;
    /* With CLONE_PARENT the kernel takes the caller's own exit signal (and refuses another). */
    ca.exit_signal = (extra_flags & CLONE_PARENT) ? 0 : SIGCHLD;
    ca.cgroup = (unsigned long long)cgroup_dir;
    long pid = syscall(SYS_clone3, &ca, sizeof ca);
    if (pid == 0) {
        close(errp[0]);
        drowse_internal_spawn_child(a);
        _exit(127);
    }
    int clone_err = errno;
    close(errp[1]);
    a->err_pipe = -1;
    if (pid < 0) {
        close(errp[0]);
        errno = clone_err;
        return -1;
    }
    int rep[2];
    ssize_t n;
    while ((n = read(errp[0], rep, sizeof rep)) < 0 && errno == EINTR) {}
    close(errp[0]);
    if (n == (ssize_t)sizeof rep) {
        a->err = rep[0];
        a->step = rep[1];
    }
    return (pid_t)pid;
}

