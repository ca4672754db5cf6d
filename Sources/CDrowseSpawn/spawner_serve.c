#define _GNU_SOURCE
/* The spawn helper's loop: one start request in, the clone3 into the run's cgroup (the child a
   child of drowsed: CLONE_PARENT), the pid out. Run by the drowse-spawner program, or by drowsed's
   own binary executed as "drowse-spawner" when that program is not installed beside it. */
#include "drowse_spawn.h"
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>


int drowse_spawner_serve(int fd) {
    /* This process installs no handler, and what it inherited across execve is either default or
       ignored (SIGPIPE): the children reset only those not default, not all 64 (each a system
       call on the way to a handler's start). */
    static int reset[NSIG];
    int nreset = 0;
    for (int s = 1; s < NSIG; s++) {
        struct sigaction cur;
        if (sigaction(s, NULL, &cur) == 0 && cur.sa_handler != SIG_DFL) reset[nreset++] = s;
    }
    reset[nreset] = 0;
    static char buf[SPAWNER_MAX];
    static char *strings[SPAWNER_MAX_STRINGS + 2];
    for (;;) {
        struct iovec iov = { buf, sizeof buf };
        union { char buf[CMSG_SPACE(4 * sizeof(int))]; struct cmsghdr align; } control;
        struct msghdr msg;
        memset(&msg, 0, sizeof msg);
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.buf;
        msg.msg_controllen = sizeof control.buf;
        ssize_t n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return 0; /* drowsed closed its end */
        int fds[4] = { -1, -1, -1, -1 };
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS && c->cmsg_len == CMSG_LEN(sizeof fds))
            memcpy(fds, CMSG_DATA(c), sizeof fds);
        struct spawner_reply rep = { EINVAL, -1, 0, DROWSE_SPAWN_STEP_OTHER };
        struct spawner_request req;
        int ok = (size_t)n >= sizeof req && fds[0] >= 0 && fds[3] >= 0 && !(msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC));
        if (ok) {
            memcpy(&req, buf, sizeof req);
            ok = req.magic == SPAWNER_MAGIC && req.ngroups >= 0 && req.ngroups <= SPAWNER_MAX_GROUPS && req.argc >= 1 &&
                 req.envc >= 0 && req.argc + req.envc <= SPAWNER_MAX_STRINGS;
        }
        gid_t groups[SPAWNER_MAX_GROUPS];
        const char *path = NULL, *cwd = NULL;
        if (ok) {
            size_t at = sizeof req, end = (size_t)n;
            size_t gb = (size_t)req.ngroups * sizeof(gid_t);
            ok = at + gb <= end;
            if (ok) {
                memcpy(groups, buf + at, gb);
                at += gb;
            }
            /* The strings, each NUL-terminated inside the message. */
            int want = 1 + req.has_cwd + req.argc + req.envc;
            for (int i = 0; ok && i < want; i++) {
                char *s = buf + at;
                char *z = memchr(s, 0, end - at);
                if (!z) { ok = 0; break; }
                if (i == 0) path = s;
                else if (req.has_cwd && i == 1) cwd = s;
                else strings[i - 1 - req.has_cwd] = s;
                at = (size_t)(z - buf) + 1;
            }
        }
        if (ok) {
            char **argv = strings;
            char **envp = strings + req.argc + 1;
            memmove(envp, strings + req.argc, (size_t)req.envc * sizeof(char *));
            argv[req.argc] = NULL;
            envp[req.envc] = NULL;
            struct spawn_args a;
            memset(&a, 0, sizeof a);
            a.path = path;
            a.argv = argv;
            a.envp = envp;
            a.cwd = cwd;
            a.set_ids = req.set_ids;
            a.uid = req.uid;
            a.gid = req.gid;
            a.groups = groups;
            a.ngroups = req.ngroups;
            a.stdin_fd = fds[0];
            a.stdout_fd = fds[1] >= 0 ? fds[1] : fds[0];
            a.stderr_fd = fds[2] >= 0 ? fds[2] : fds[0];
            a.cgroup_fd = -1;
            a.err_pipe = -1;
            a.step = DROWSE_SPAWN_STEP_OTHER;
            a.close_to = drowse_internal_close_range_works() ? -1 : drowse_internal_highest_fd_bound();
            a.nproc_limit = req.nproc_limit;
            a.data_limit = req.data_limit;
            a.reset_signals = reset;
            pid_t pid = drowse_internal_clone3_into_cgroup(&a, fds[3], CLONE_PARENT);
            rep.clone_errno = pid < 0 ? errno : 0;
            rep.pid = pid;
            rep.err = a.err;
            rep.step = a.step;
        }
        for (int i = 0; i < 4; i++) if (fds[i] >= 0) close(fds[i]);
        ssize_t w;
        while ((w = send(fd, &rep, sizeof rep, MSG_NOSIGNAL)) < 0 && errno == EINTR) {}
        if (w != (ssize_t)sizeof rep) return 1;
    }
}

