#define _GNU_SOURCE
#include "CDrowseSys.h"
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

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif

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
    int close_to; /* -1: close_range(2) closes everything above 2; else close 3...close_to one by one */
    int err; /* written by the child when a step fails; read by the parent after clone returns */
};

#define SPAWN_FAIL(a) do { (a)->err = errno ? errno : EIO; _exit(127); } while (0)

/* The child shares the parent's memory (CLONE_VM) until execve, like posix_spawn: nothing here
   may take a lock, allocate, or touch glibc's thread bookkeeping. In particular the user switch
   uses raw system calls: glibc's setuid/setgid/setgroups would "broadcast" the change to every
   thread of what it believes is its process — the parent's threads. */
static int spawn_child(void *p) {
    struct spawn_args *a = p;
    /* Default signal handling (the parent's handlers must never run here), own process group. */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (int s = 1; s < NSIG; s++) sigaction(s, &dfl, NULL);
    if (setpgid(0, 0) != 0) SPAWN_FAIL(a);
    if (dup2(a->stdin_fd, 0) < 0 || dup2(a->stdout_fd, 1) < 0 || dup2(a->stderr_fd, 2) < 0) SPAWN_FAIL(a);
    if (a->set_ids) {
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
    if (a->close_to < 0) {
        syscall(SYS_close_range, 3, ~0U, 0);
    } else {
        for (int fd = 3; fd <= a->close_to; fd++) close(fd);
    }
    umask(022); /* drowsed itself runs with 077; handlers get the usual default */
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execve(a->path, a->argv, a->envp);
    SPAWN_FAIL(a);
    return 127;
}

/* Kernels before 5.9 have no close_range(2). Probed once: closing a range where nothing is open. */
static int close_range_works(void) {
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
static int highest_fd_bound(void) {
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

int drowse_spawn(const char *path, char *const argv[], char *const envp[], const char *cwd,
                 int set_ids, uid_t uid, gid_t gid, const gid_t *groups, int ngroups,
                 int stdin_fd, int stdout_fd, int stderr_fd, pid_t *out_pid) {
    /* clone(CLONE_VM | CLONE_VFORK) instead of fork(): the daemon's page tables are not copied
       (fork of a multi-threaded process with tens of MiB mapped took ~1 ms), and this thread
       resumes once the child has called execve or failed. The child runs on its own stack. */
    enum { STACK_SIZE = 64 * 1024 };
    void *stack = mmap(NULL, STACK_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (stack == MAP_FAILED) return errno;
    struct spawn_args a = {
        .path = path, .argv = argv, .envp = envp, .cwd = cwd, .set_ids = set_ids, .uid = uid, .gid = gid,
        .groups = groups, .ngroups = ngroups, .stdin_fd = stdin_fd, .stdout_fd = stdout_fd, .stderr_fd = stderr_fd,
        .close_to = close_range_works() ? -1 : highest_fd_bound(), .err = 0,
    };
    /* No signal handler may run in the child before it has reset them all. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t pid = clone(spawn_child, (char *)stack + STACK_SIZE, CLONE_VM | CLONE_VFORK | SIGCHLD, &a);
    int clone_err = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    munmap(stack, STACK_SIZE);
    if (pid < 0) return clone_err;
    if (__atomic_load_n(&a.err, __ATOMIC_ACQUIRE) != 0) {
        int status;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
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
