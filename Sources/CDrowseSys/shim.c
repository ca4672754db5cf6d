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

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif

static void write_errno_and_exit(int fd, int err) {
    ssize_t r = write(fd, &err, sizeof err);
    (void)r;
    _exit(127);
}

int drowse_spawn(const char *path, char *const argv[], char *const envp[], const char *cwd,
                 int set_ids, uid_t uid, gid_t gid, const gid_t *groups, int ngroups,
                 int stdin_fd, int stdout_fd, int stderr_fd, pid_t *out_pid) {
    int errpipe[2];
    if (pipe2(errpipe, O_CLOEXEC) != 0) return errno;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        close(errpipe[0]); close(errpipe[1]);
        return e;
    }
    if (pid == 0) {
        /* Child: default signal handling, empty mask, own process group. */
        for (int s = 1; s < NSIG; s++) signal(s, SIG_DFL);
        sigset_t none; sigemptyset(&none);
        if (setpgid(0, 0) != 0) write_errno_and_exit(errpipe[1], errno);
        if (dup2(stdin_fd, 0) < 0 || dup2(stdout_fd, 1) < 0 || dup2(stderr_fd, 2) < 0)
            write_errno_and_exit(errpipe[1], errno);
        if (set_ids) {
            if (setgroups((size_t)ngroups, groups) != 0) write_errno_and_exit(errpipe[1], errno);
            if (setgid(gid) != 0) write_errno_and_exit(errpipe[1], errno);
            if (setuid(uid) != 0) write_errno_and_exit(errpipe[1], errno);
        }
        /* After the user switch: the handler may only start where its user can go. */
        if (cwd && chdir(cwd) != 0) write_errno_and_exit(errpipe[1], errno);
        /* Close every inherited descriptor but stdio and the error pipe (CLOEXEC). */
        int errfd = errpipe[1];
        if (syscall(SYS_close_range, 3, errfd > 3 ? errfd - 1 : 2, 0) != 0 && errfd > 3) {
            for (int fd = 3; fd < errfd; fd++) close(fd);
        }
        syscall(SYS_close_range, errfd + 1, ~0U, 0);
        sigprocmask(SIG_SETMASK, &none, NULL);
        umask(022);  /* drowsed itself runs with 077; handlers get the usual default */
        execve(path, argv, envp);
        write_errno_and_exit(errfd, errno);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    close(errpipe[1]);
    int child_err = 0;
    ssize_t n;
    do { n = read(errpipe[0], &child_err, sizeof child_err); } while (n < 0 && errno == EINTR);
    close(errpipe[0]);
    if (n == sizeof child_err) {
        int status;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
        return child_err ? child_err : EIO;
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
