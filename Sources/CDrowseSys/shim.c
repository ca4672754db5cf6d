#define _GNU_SOURCE
#include "CDrowseSys.h"
#include "spawn_internal.h"
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/eventfd.h>
#include <sys/un.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <stdlib.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <dirent.h>
#include <stdio.h>
#include <stdint.h>
#include <sys/timerfd.h>
#include <time.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

/* ---- Children drowse_spawn started, told apart from orphans drowsed adopts as a subreaper.

   Every child of drowsed that is not in this registry is an orphan left by a handler that has
   ended (handlers adopt their own orphans while they run), and drowse_kill_adopted kills it.
   Entries hold the start time too, so a reused pid is never mistaken for a registered child
   (0 when it could not be read, e.g. out of descriptors: then the pid alone identifies it).
   The lock is held across clone and registration, and across every scan, kill and reap of
   adopted children: a new child can never be seen unregistered, and an adopted child's pid
   cannot be reused between the scan that finds it and the kill. */

static int spawn_locked(const char *path, char *const argv[], char *const envp[], const char *cwd,
                        int set_ids, uid_t uid, gid_t gid, const gid_t *groups, int ngroups,
                        int stdin_fd, int stdout_fd, int stderr_fd, int cgroup_fd, long long nproc_limit,
                        long long data_limit, int *out_step, pid_t *out_pid);

struct child_entry { pid_t pid; unsigned long long start; };
pthread_mutex_t drowse_internal_children_lock = PTHREAD_MUTEX_INITIALIZER;
#define children_lock drowse_internal_children_lock
static struct child_entry *children;
static size_t children_count, children_cap;

/* Reads /proc/PID/stat: state, parent and start time (clock ticks since boot). 0 or -1. */
static int proc_stat_ids(pid_t pid, char *state, pid_t *ppid, pid_t *pgrp, pid_t *session, unsigned long long *start);
static int proc_stat(pid_t pid, char *state, pid_t *ppid, unsigned long long *start) {
    return proc_stat_ids(pid, state, ppid, NULL, NULL, start);
}

/* Reads /proc/PID/stat: state, parent, process group, session and start time. 0 or -1. */
static int proc_stat_ids(pid_t pid, char *state, pid_t *ppid, pid_t *pgrp, pid_t *session, unsigned long long *start) {
    char path[40], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1; /* errno: ENOENT when the process is gone, EMFILE... */
    ssize_t n = read(fd, buf, sizeof buf - 1);
    int e = errno;
    close(fd);
    if (n <= 0) { errno = n == 0 ? ESRCH : e; return -1; }
    buf[n] = 0;
    char *p = strrchr(buf, ')'); /* the command name may hold spaces and parentheses */
    if (!p || p[1] != ' ') { errno = EIO; return -1; }
    p += 2;
    /* Field 3 is the state, 4 the parent, 22 the start time. */
    char st = *p;
    long long parent = 0, group = 0, sess = 0;
    unsigned long long started = 0;
    for (int field = 3; field <= 22 && *p; field++) {
        if (field == 4) parent = strtoll(p, NULL, 10);
        if (field == 5) group = strtoll(p, NULL, 10);
        if (field == 6) sess = strtoll(p, NULL, 10);
        if (field == 22) started = strtoull(p, NULL, 10);
        char *sp = strchr(p, ' ');
        if (!sp) break;
        p = sp + 1;
    }
    if (state) *state = st;
    if (ppid) *ppid = (pid_t)parent;
    if (pgrp) *pgrp = (pid_t)group;
    if (session) *session = (pid_t)sess;
    if (start) *start = started;
    return 0;
}

void drowse_internal_register_locked(pid_t pid) {
    unsigned long long start = 0;
    proc_stat(pid, NULL, NULL, &start);
    if (children_count == children_cap) {
        size_t cap = children_cap ? children_cap * 2 : 64;
        struct child_entry *grown = realloc(children, cap * sizeof *grown);
        if (!grown) return; /* unregistered: a sweep would take it for an orphan; only under OOM */
        children = grown;
        children_cap = cap;
    }
    children[children_count++] = (struct child_entry){ pid, start };
}

void drowse_internal_forget_locked(pid_t pid) {
    for (size_t i = 0; i < children_count; i++) {
        if (children[i].pid == pid) { children[i] = children[--children_count]; break; }
    }
}

void drowse_forget_child(pid_t pid) {
    pthread_mutex_lock(&children_lock);
    drowse_internal_forget_locked(pid);
    pthread_mutex_unlock(&children_lock);
}

int drowse_set_child_subreaper(void) {
    return prctl(PR_SET_CHILD_SUBREAPER, 1UL, 0UL, 0UL, 0UL) == 0 ? 0 : errno;
}

/* Calls visit(pid) for every process in /proc; stops early when it returns non-zero.
   Returns 0 when /proc could not be read. */
static int for_each_process(int (*visit)(pid_t, void *), void *ctx) {
    DIR *d = opendir("/proc");
    if (!d) return 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
        if (visit((pid_t)atoi(e->d_name), ctx)) break;
    }
    closedir(d);
    return 1;
}

/* Calls visit(pid) for every child of this process, read from /proc/self/task/TID/children of
   each thread (an orphan is adopted by one thread of the subreaper): a few small reads instead of
   the stat file of every process on the board. Returns 1 when read, 0 when the kernel has no such
   files (CONFIG_PROC_CHILDREN unset) or the task folder could not be read. The kernel walks the
   list by position, so a child whose sibling exits during the read may be missed: that scan is
   incomplete, and the next one finds it. */
static int for_each_child(int (*visit)(pid_t, void *), void *ctx) {
    static int available = -1;
    if (available < 0) {
        char self[64];
        snprintf(self, sizeof self, "/proc/self/task/%ld/children", (long)syscall(SYS_gettid));
        available = access(self, R_OK) == 0;
    }
    if (!available) return 0;
    DIR *d = opendir("/proc/self/task");
    if (!d) return 0;
    struct dirent *e;
    int stop = 0;
    while (!stop && (e = readdir(d)) != NULL) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
        char path[64], buf[1024];
        snprintf(path, sizeof path, "/proc/self/task/%s/children", e->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue; /* the thread has ended: its children went to another thread */
        long pid = 0;
        int digits = 0;
        ssize_t n;
        while (!stop && (n = read(fd, buf, sizeof buf)) > 0) {
            for (ssize_t i = 0; i < n && !stop; i++) {
                char c = buf[i];
                if (c >= '0' && c <= '9') { pid = pid * 10 + (c - '0'); digits++; continue; }
                if (digits) stop = visit((pid_t)pid, ctx);
                pid = 0;
                digits = 0;
            }
        }
        if (!stop && digits) stop = visit((pid_t)pid, ctx);
        close(fd);
    }
    closedir(d);
    return 1;
}

struct adopted_scan {
    pid_t self;
    pid_t pgrp, sid;  /* drowsed's own process group and session */
    int incomplete;   /* some /proc entry could not be read (not because it ended) */
    int sig;          /* 0: reap zombies only */
    int *pidfds;
    int max, found;
    unsigned char *seen; /* registry entries still alive as our children */
};

/* Whether drowsed's child PID (with its process group, session and start time) is what a handler
   run left behind, now drowsed's as subreaper: not a registered child (the same pid, and the same
   start time when that is known), and not in drowsed's own group and session. Handlers run in
   process groups of their own, so whatever a handler leaves behind is in another group (or, after
   setsid, another session). A child in drowsed's own group and session was started by drowsed's
   process itself by other means (in the unit tests: swift-testing's exit-test children), is not a
   leftover, and is not ours to kill or reap. *slot: the registry entry it matched, else -1.
   Called with children_lock held. */
static int is_adopted_leftover(pid_t pid, pid_t pgrp, pid_t sid, unsigned long long start,
                               pid_t own_pgrp, pid_t own_sid, long *slot) {
    *slot = -1;
    if (pgrp == own_pgrp && sid == own_sid) return 0;
    for (size_t i = 0; i < children_count; i++) {
        if (children[i].pid == pid && (children[i].start == 0 || children[i].start == start)) {
            *slot = (long)i;
            return 0;
        }
    }
    return 1;
}

static int visit_adopted(pid_t pid, void *p) {
    struct adopted_scan *s = p;
    char state;
    pid_t ppid;
    unsigned long long start;
    pid_t pgrp, sid;
    if (proc_stat_ids(pid, &state, &ppid, &pgrp, &sid, &start) != 0) {
        if (errno != ENOENT && errno != ESRCH) s->incomplete = 1;
        return 0;
    }
    if (ppid != s->self) return 0;
    long slot;
    if (!is_adopted_leftover(pid, pgrp, sid, start, s->pgrp, s->sid, &slot)) {
        if (slot >= 0) s->seen[slot] = 1;
        return 0;
    }
    if (s->sig == 0) {
        if (state == 'Z') {
            int status;
            waitpid(pid, &status, WNOHANG);
            s->found++;
        }
        return 0;
    }
    if (s->found < s->max) {
        int fd = (int)syscall(SYS_pidfd_open, pid, 0);
        kill(pid, s->sig);
        s->pidfds[s->found] = fd;
    } else {
        kill(pid, s->sig);
    }
    s->found++;
    return 0;
}

static int scan_adopted(int sig, int *pidfds, int max) {
    pthread_mutex_lock(&children_lock);
    unsigned char *seen = children_count ? calloc(children_count, 1) : NULL;
    struct adopted_scan s = { getpid(), getpgrp(), getsid(0), 0, sig, pidfds, max, 0, seen };
    if (children_count && !seen) { pthread_mutex_unlock(&children_lock); return -1; }
    /* The children lists first; the whole process table where the kernel has none. The lists
       are not exact (a concurrent exit can hide a sibling): never a reason to prune the registry
       (its entries leave it when their owners reap them, drowse_forget_child). */
    if (for_each_child(visit_adopted, &s)) s.incomplete = 1;
    else if (!for_each_process(visit_adopted, &s)) s.incomplete = 1;
    /* Registered children already reaped by their owner (or whose pid now names another
       process) leave the registry; not after a partial scan, which may have missed live ones. */
    if (!s.incomplete) {
        size_t kept = 0;
        for (size_t i = 0; i < children_count; i++) if (seen[i]) children[kept++] = children[i];
        children_count = kept;
    }
    free(seen);
    pthread_mutex_unlock(&children_lock);
    return s.found;
}

int drowse_kill_adopted(int sig, int *pidfds, int max) { return scan_adopted(sig, pidfds, max); }

int drowse_reap_adopted(void) { return scan_adopted(0, NULL, 0); }

int drowse_reap_ended_adopted(void) {
    /* waitid with WNOWAIT names an ended child and leaves it waitable: an adopted leftover
       (is_adopted_leftover) is reaped here; then the next. Any other ended child is its owner's
       to reap, and waitid would name it again: only a scan looks past it. */
    for (int round = 0; round < 4096; round++) {
        siginfo_t si;
        memset(&si, 0, sizeof si);
        if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT | __WALL) != 0) return errno == ECHILD ? 0 : -1;
        if (si.si_pid == 0) return 0;
        pid_t pid = si.si_pid;
        pthread_mutex_lock(&children_lock);
        pid_t pgrp, sid;
        unsigned long long start;
        long slot;
        int adopted = proc_stat_ids(pid, NULL, NULL, &pgrp, &sid, &start) == 0 &&
                      is_adopted_leftover(pid, pgrp, sid, start, getpgrp(), getsid(0), &slot);
        if (adopted) {
            int status;
            waitpid(pid, &status, WNOHANG | __WALL);
        }
        pthread_mutex_unlock(&children_lock);
        if (!adopted) return -1;
    }
    return -1;
}

struct table_scan { pid_t *pids, *ppids; int max, count; };

static int visit_table(pid_t pid, void *p) {
    struct table_scan *t = p;
    pid_t ppid;
    if (proc_stat(pid, NULL, &ppid, NULL) != 0) return 0;
    if (t->count >= t->max) return 1;
    t->pids[t->count] = pid;
    t->ppids[t->count] = ppid;
    t->count++;
    return 0;
}

int drowse_process_table(pid_t *pids, pid_t *ppids, int max) {
    struct table_scan t = { pids, ppids, max, 0 };
    for_each_process(visit_table, &t);
    return t.count;
}

int drowse_spawn(const char *path, char *const argv[], char *const envp[], const char *cwd,
                 int set_ids, uid_t uid, gid_t gid, const gid_t *groups, int ngroups,
                 int stdin_fd, int stdout_fd, int stderr_fd, int cgroup_fd, int *out_failed_step, pid_t *out_pid) {
    return drowse_spawn_limited(path, argv, envp, cwd, set_ids, uid, gid, groups, ngroups, stdin_fd, stdout_fd, stderr_fd,
                                cgroup_fd, -1, -1, out_failed_step, out_pid);
}

int drowse_spawn_limited(const char *path, char *const argv[], char *const envp[], const char *cwd,
                         int set_ids, uid_t uid, gid_t gid, const gid_t *groups, int ngroups,
                         int stdin_fd, int stdout_fd, int stderr_fd, int cgroup_fd, long long nproc_limit,
                         long long data_limit, int *out_failed_step, pid_t *out_pid) {
    pthread_mutex_lock(&children_lock);
    int rc = spawn_locked(path, argv, envp, cwd, set_ids, uid, gid, groups, ngroups, stdin_fd, stdout_fd, stderr_fd,
                          cgroup_fd, nproc_limit, data_limit, out_failed_step, out_pid);
    if (rc == 0) drowse_internal_register_locked(*out_pid);
    pthread_mutex_unlock(&children_lock);
    return rc;
}


static int spawn_locked(const char *path, char *const argv[], char *const envp[], const char *cwd,
                        int set_ids, uid_t uid, gid_t gid, const gid_t *groups, int ngroups,
                        int stdin_fd, int stdout_fd, int stderr_fd, int cgroup_fd, long long nproc_limit,
                        long long data_limit, int *out_step, pid_t *out_pid) {
    /* clone(CLONE_VM | CLONE_VFORK) instead of fork(): the daemon's page tables are not copied
       (fork of a multi-threaded process with tens of MiB mapped took ~1 ms), and this thread
       resumes once the child has called execve or failed. The child runs on its own stack. */
    enum { STACK_SIZE = 64 * 1024 };
    void *stack = NULL; /* only for clone() below: clone3 and the spawn helper need none */
    struct spawn_args a = {
        .path = path, .argv = argv, .envp = envp, .cwd = cwd, .set_ids = set_ids, .uid = uid, .gid = gid,
        .groups = groups, .ngroups = ngroups, .stdin_fd = stdin_fd, .stdout_fd = stdout_fd, .stderr_fd = stderr_fd,
        .cgroup_fd = -1, .err_pipe = -1, .step = DROWSE_SPAWN_STEP_OTHER,
        .close_to = drowse_internal_close_range_works() ? -1 : drowse_internal_highest_fd_bound(), .err = 0,
        .nproc_limit = nproc_limit, .data_limit = data_limit,
    };
    /* No signal handler may run in the child before it has reset them all. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t pid = -1;
    int clone_err = 0;
    int tried_clone3 = 0;
    if (cgroup_fd >= 0) {
        static int clone3_state; /* 0 unknown, 1 works, 2 missing */
        if (__atomic_load_n(&clone3_state, __ATOMIC_RELAXED) != 2) {
            tried_clone3 = 1;
            /* From the spawn helper when it runs (a small process: no copy of drowsed's page
               tables), else from here. */
            int via = drowse_internal_spawner_clone3(&a, cgroup_fd, &pid);
            /* No helper, or its clone3 refused what this one may still do (a refusal here is
               what says a kernel has no clone3). */
            if (via != 0 || (pid < 0 && (errno == ENOSYS || errno == E2BIG || errno == EINVAL))) {
                a.err = 0;
                a.step = DROWSE_SPAWN_STEP_OTHER;
                pid = drowse_internal_clone3_into_cgroup(&a, cgroup_fd, 0);
            }
            clone_err = errno;
            if (pid < 0 && (clone_err == ENOSYS || clone_err == E2BIG || clone_err == EINVAL)) {
                __atomic_store_n(&clone3_state, 2, __ATOMIC_RELAXED);
                tried_clone3 = 0;
            } else if (pid >= 0) {
                __atomic_store_n(&clone3_state, 1, __ATOMIC_RELAXED);
            }
        }
        if (!tried_clone3) {
            /* The fallback: the child writes itself into cgroup.procs (the slow migration). */
            a.cgroup_fd = openat(cgroup_fd, "cgroup.procs", O_WRONLY | O_CLOEXEC);
            if (a.cgroup_fd < 0) {
                clone_err = errno;
                pthread_sigmask(SIG_SETMASK, &old, NULL);
                if (out_step) *out_step = DROWSE_SPAWN_STEP_CGROUP;
                return clone_err;
            }
        }
    }
    if (!tried_clone3) {
        stack = mmap(NULL, STACK_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
        if (stack == MAP_FAILED) {
            stack = NULL;
            clone_err = errno;
        } else {
            pid = clone(drowse_internal_spawn_child, (char *)stack + STACK_SIZE, CLONE_VM | CLONE_VFORK | SIGCHLD, &a);
            clone_err = errno;
        }
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (stack) munmap(stack, STACK_SIZE);
    if (a.cgroup_fd >= 0) close(a.cgroup_fd);
    if (pid < 0) {
        /* clone3 refused the cgroup itself (removed, or not a cgroup directory). */
        if (tried_clone3 && out_step && (clone_err == ENOENT || clone_err == EBADF || clone_err == EOPNOTSUPP || clone_err == EBUSY))
            *out_step = DROWSE_SPAWN_STEP_CGROUP;
        return clone_err;
    }
    if (__atomic_load_n(&a.err, __ATOMIC_ACQUIRE) != 0) {
        int status;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
        if (out_step) *out_step = a.step;
        return a.err;
    }
    *out_pid = pid;
    return 0;
}

int drowse_peercred(int fd, pid_t *pid, uid_t *uid, gid_t *gid) {
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return errno;
    *pid = cred.pid; *uid = cred.uid; *gid = cred.gid;
    return 0;
}

int drowse_pidfd_open(pid_t pid) {
    return (int)syscall(SYS_pidfd_open, pid, 0);
}

int drowse_eventfd(void) { return eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK); }
int drowse_eventfd_blocking(void) { return eventfd(0, EFD_CLOEXEC); }

void drowse_set_thread_name(const char *name) { prctl(PR_SET_NAME, name, 0, 0, 0); }

int drowse_sd_notify(const char *state) {
    const char *path = getenv("NOTIFY_SOCKET");
    if (!path || !*path) return 0;
    struct sockaddr_un addr;
    memset(&addr, 0, sizeof addr);
    addr.sun_family = AF_UNIX;
    size_t len = strlen(path);
    if (len >= sizeof addr.sun_path) return ENAMETOOLONG;
    memcpy(addr.sun_path, path, len);
    if (addr.sun_path[0] == '@') addr.sun_path[0] = 0;
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return errno;
    ssize_t n = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&addr,
                       (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len));
    int e = n < 0 ? errno : 0;
    close(fd);
    return e;
}

int drowse_pipe(int fds[2]) { return pipe2(fds, O_CLOEXEC) == 0 ? 0 : errno; }

static int netlink_socket(int protocol, unsigned groups) {
    int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, protocol);
    if (fd < 0) return -1;
    struct sockaddr_nl addr;
    memset(&addr, 0, sizeof addr);
    addr.nl_family = AF_NETLINK;
    addr.nl_groups = groups;
    if (bind(fd, (struct sockaddr *)&addr, sizeof addr) != 0) { close(fd); return -1; }
    return fd;
}

int drowse_netlink_route_socket(void) {
    return netlink_socket(NETLINK_ROUTE, RTMGRP_LINK | RTMGRP_IPV4_ROUTE | RTMGRP_IPV6_ROUTE | RTMGRP_IPV4_IFADDR);
}

int drowse_netlink_uevent_socket(void) {
    return netlink_socket(NETLINK_KOBJECT_UEVENT, 1);
}

/* A timerfd on CLOCK_REALTIME armed far in the future with TFD_TIMER_CANCEL_ON_SET: it becomes
   readable, and read(2) fails with ECANCELED, whenever the wall clock is set (settimeofday,
   clock_settime, adjtimex ADJ_SETOFFSET: a time sync's step). Slewing does not wake it. */
int drowse_clock_step_fd(void) {
    int fd = timerfd_create(CLOCK_REALTIME, TFD_NONBLOCK | TFD_CLOEXEC);
    if (fd < 0) return -1;
    if (drowse_clock_step_rearm(fd) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

int drowse_clock_step_rearm(int fd) {
    struct itimerspec its;
    memset(&its, 0, sizeof its);
    /* The far future, but within a 32-bit time_t (2038-01-19): expiry is never reached in practice,
       and a clock set beyond it makes the fd readable too, which is handled the same way. */
    its.it_value.tv_sec = 0x7ffffff0;
    return timerfd_settime(fd, TFD_TIMER_ABSTIME | TFD_TIMER_CANCEL_ON_SET, &its, NULL);
}

/* 1: the clock was set since the last call (the fd is re-armed); 0: nothing to read; -1: error. */
int drowse_clock_step_read(int fd) {
    uint64_t expirations;
    ssize_t r = read(fd, &expirations, sizeof expirations);
    if (r < 0 && errno == EAGAIN) return 0;
    if (r < 0 && errno != ECANCELED) return -1;
    /* ECANCELED: the clock was set. A read of 8 bytes: the timer expired (a clock beyond 2038). */
    return drowse_clock_step_rearm(fd) == 0 ? 1 : -1;
}
