#define _GNU_SOURCE
/* The spawn helper: a small process that starts handlers for drowsed (this is drowsed's side).

   Starting a handler inside its cgroup takes clone3(CLONE_INTO_CGROUP), and clone3 without
   CLONE_VM copies the caller's page tables, as fork does: ~1 ms for drowsed, with its threads and
   tens of MiB mapped. The helper is the drowse-spawner program (Sources/drowse-spawner: C and a
   static libc, ~1 MiB resident), found beside drowse or in ../libexec/drowse/ (SpawnHelper.swift);
   without it, drowsed's own binary executed again under the name "drowse-spawner": the
   constructor below takes over before the Swift runtime starts, though the process still maps
   every library drowsed links (~7 MiB resident, and each clone copies more). drowsed sends it each
   start request over a SOCK_SEQPACKET socketpair (the strings in the message, the descriptors
   with SCM_RIGHTS); the helper clones the child with CLONE_PARENT, so the handler is drowsed's
   child as before (drowsed waits for it, supervises it, counts it in its registry), and answers
   with the pid. Both run the same loop and child code (CDrowseSpawn).

   When the helper is not running or cannot be reached, drowsed starts the child itself (the old
   path) and starts a new helper. The helper exits when drowsed's end of the socket closes, and
   gets SIGKILL if drowsed dies (PR_SET_PDEATHSIG). docs/architecture.md, "Starting a handler". */
#include "CDrowseSys.h"
#include "spawn_internal.h"
#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>


/* ---- drowsed's side */

static int spawner_fd = -1;
static pid_t spawner_pid = -1;
static char spawner_exe[4096];
static int spawner_restarts; /* in a row without a successful spawn */
static unsigned long long spawner_refused, spawner_fallbacks;
static char spawner_refused_why[512];

int drowse_spawner_path_trusted(const char *path, char *why, size_t why_size) {
    char p[4096];
    struct stat st;
    if (!path || path[0] != '/' || strlen(path) >= sizeof p) {
        snprintf(why, why_size, "not an absolute path");
        return 0;
    }
    strcpy(p, path);
    uid_t me = geteuid();
    /* Every folder from / down, then the file: lstat, so a symbolic link anywhere is refused. */
    for (char *slash = p;; slash = strchr(slash + 1, '/')) {
        int last = slash == NULL;
        char saved = 0;
        if (!last) {
            saved = slash[1];
            slash[1] = 0; /* "/", "/usr/", "/usr/libexec/", ... */
        }
        const char *at = p;
        if (lstat(at, &st) != 0) {
            snprintf(why, why_size, "%s: %s", at, strerror(errno));
            return 0;
        }
        if (st.st_uid != 0 && st.st_uid != me) {
            snprintf(why, why_size, "%s is owned by uid %u, neither root nor drowsed's user", at, (unsigned)st.st_uid);
            return 0;
        }
        if (last) {
            if (!S_ISREG(st.st_mode) || !(st.st_mode & 0111)) {
                snprintf(why, why_size, "%s is not an executable regular file", at);
                return 0;
            }
            if (st.st_mode & 022) {
                snprintf(why, why_size, "%s may be written by others (mode %o)", at, (unsigned)(st.st_mode & 07777));
                return 0;
            }
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            snprintf(why, why_size, "%s is not a folder (a symbolic link?)", at);
            return 0;
        }
        if ((st.st_mode & 022) && !(st.st_mode & S_ISVTX)) {
            snprintf(why, why_size, "%s may be changed by others (mode %o)", at, (unsigned)(st.st_mode & 07777));
            return 0;
        }
        slash[1] = saved;
        if (!saved) {
            snprintf(why, why_size, "%s names a folder", path);
            return 0;
        }
    }
}

unsigned long long drowse_spawner_refusals(char *last_why, size_t why_size) {
    pthread_mutex_lock(&drowse_internal_children_lock);
    unsigned long long n = spawner_refused;
    if (last_why && why_size) snprintf(last_why, why_size, "%s", spawner_refused_why);
    pthread_mutex_unlock(&drowse_internal_children_lock);
    return n;
}

unsigned long long drowse_spawner_fallbacks(void) {
    return __atomic_load_n(&spawner_fallbacks, __ATOMIC_RELAXED);
}

static int send_request(int fd, const void *buf, size_t len, const int *fds, int nfds) {
    struct iovec iov = { (void *)buf, len };
    union { char buf[CMSG_SPACE(4 * sizeof(int))]; struct cmsghdr align; } control;
    memset(&control, 0, sizeof control);
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.buf;
    msg.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
    memcpy(CMSG_DATA(c), fds, (size_t)nfds * sizeof(int));
    ssize_t n;
    while ((n = sendmsg(fd, &msg, MSG_NOSIGNAL)) < 0 && errno == EINTR) {}
    return n == (ssize_t)len ? 0 : -1;
}

/* Ends the helper (if it still runs) and reaps it. Called with the children lock held. */
static void spawner_drop_locked(void) {
    if (spawner_fd >= 0) close(spawner_fd);
    spawner_fd = -1;
    if (spawner_pid > 0) {
        kill(spawner_pid, SIGKILL);
        while (waitpid(spawner_pid, NULL, 0) < 0 && errno == EINTR) {}
        drowse_internal_forget_locked(spawner_pid);
    }
    spawner_pid = -1;
}

/* Starts the helper (drowsed's binary as "drowse-spawner", its socket as standard input), with
   drowsed's own in-process spawn. Called with the children lock held. 0 or errno. */
static int spawner_start_locked(void) {
    if (!spawner_exe[0]) return ENOENT;
    /* Checked before every start: the path is run as root, and a folder on it could have been
       opened to others since the last start. */
    char why[sizeof spawner_refused_why];
    if (!drowse_spawner_path_trusted(spawner_exe, why, sizeof why)) {
        spawner_refused++;
        memcpy(spawner_refused_why, why, sizeof why);
        return EPERM;
    }
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return errno;
    char *argv[] = { SPAWNER_NAME, NULL };
    char *envp[] = { NULL };
    enum { STACK_SIZE = 64 * 1024 };
    void *stack = mmap(NULL, STACK_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (stack == MAP_FAILED) {
        int e = errno;
        close(sv[0]);
        close(sv[1]);
        return e;
    }
    struct spawn_args a;
    memset(&a, 0, sizeof a);
    a.path = spawner_exe;
    a.argv = argv;
    a.envp = envp;
    a.stdin_fd = sv[1];
    a.stdout_fd = 2;
    a.stderr_fd = 2;
    a.cgroup_fd = -1;
    a.err_pipe = -1;
    a.close_to = drowse_internal_close_range_works() ? -1 : drowse_internal_highest_fd_bound();
    a.nproc_limit = -1;
    a.data_limit = -1;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t pid = clone(drowse_internal_spawn_child, (char *)stack + STACK_SIZE, CLONE_VM | CLONE_VFORK | SIGCHLD, &a);
    int e = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    munmap(stack, STACK_SIZE);
    close(sv[1]);
    if (pid < 0) {
        close(sv[0]);
        return e;
    }
    if (__atomic_load_n(&a.err, __ATOMIC_ACQUIRE) != 0) {
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {}
        close(sv[0]);
        return a.err;
    }
    /* A helper that stops answering (stopped, stuck) must not hold drowsed: it is given up after
       this long, killed, and the handler is started here. Far more than a start takes (< 1 ms). */
    struct timeval limit = { 2, 0 };
    if (setsockopt(sv[0], SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit) != 0 ||
        setsockopt(sv[0], SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit) != 0) {
        int e2 = errno;
        kill(pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {}
        close(sv[0]);
        return e2;
    }
    drowse_internal_register_locked(pid);
    spawner_fd = sv[0];
    spawner_pid = pid;
    return 0;
}

int drowse_spawner_start(const char *exe) {
    if (!exe || strlen(exe) >= sizeof spawner_exe) return ENAMETOOLONG;
    pthread_mutex_lock(&drowse_internal_children_lock);
    spawner_drop_locked();
    strcpy(spawner_exe, exe);
    spawner_restarts = 0;
    int rc = spawner_start_locked();
    pthread_mutex_unlock(&drowse_internal_children_lock);
    return rc;
}

void drowse_spawner_stop(void) {
    pthread_mutex_lock(&drowse_internal_children_lock);
    spawner_drop_locked();
    spawner_exe[0] = 0;
    pthread_mutex_unlock(&drowse_internal_children_lock);
}

pid_t drowse_spawner_pid(void) {
    pthread_mutex_lock(&drowse_internal_children_lock);
    pid_t pid = spawner_fd >= 0 ? spawner_pid : -1;
    pthread_mutex_unlock(&drowse_internal_children_lock);
    return pid;
}

static size_t put_string(char *buf, size_t at, const char *s) {
    size_t n = strlen(s) + 1;
    if (at + n > SPAWNER_MAX) return SPAWNER_MAX + 1;
    memcpy(buf + at, s, n);
    return at + n;
}

/* One request and its answer; -1 when the helper could not be reached. */
static int spawner_call(struct spawn_args *a, int cgroup_dir, pid_t *pid) {
    static char buf[SPAWNER_MAX]; /* under the children lock */
    struct spawner_request req;
    memset(&req, 0, sizeof req);
    req.magic = SPAWNER_MAGIC;
    req.set_ids = a->set_ids;
    req.uid = a->uid;
    req.gid = a->gid;
    req.ngroups = (a->set_ids & 1) ? a->ngroups : 0;
    req.has_cwd = a->cwd != NULL;
    req.nproc_limit = a->nproc_limit;
    req.data_limit = a->data_limit;
    req.close_to = -1;
    if (req.ngroups < 0 || req.ngroups > SPAWNER_MAX_GROUPS) return 1;
    size_t at = sizeof req;
    size_t groups_bytes = (size_t)req.ngroups * sizeof(gid_t);
    if (at + groups_bytes > SPAWNER_MAX) return 1;
    if (groups_bytes) memcpy(buf + at, a->groups, groups_bytes);
    at += groups_bytes;
    at = put_string(buf, at, a->path);
    if (a->cwd) at = put_string(buf, at, a->cwd);
    for (char *const *v = a->argv; *v && at <= SPAWNER_MAX; v++, req.argc++) at = put_string(buf, at, *v);
    for (char *const *v = a->envp; *v && at <= SPAWNER_MAX; v++, req.envc++) at = put_string(buf, at, *v);
    if (at > SPAWNER_MAX || req.argc + req.envc > SPAWNER_MAX_STRINGS) return 1; /* too big: drowsed spawns it */
    memcpy(buf, &req, sizeof req);
    int fds[4] = { a->stdin_fd, a->stdout_fd, a->stderr_fd, cgroup_dir };
    if (send_request(spawner_fd, buf, at, fds, 4) != 0) return -1;
    struct spawner_reply rep;
    ssize_t n;
    while ((n = recv(spawner_fd, &rep, sizeof rep, 0)) < 0 && errno == EINTR) {}
    if (n != (ssize_t)sizeof rep) return -1;
    if (rep.pid < 0) {
        errno = rep.clone_errno;
        *pid = -1;
        return 0;
    }
    *pid = rep.pid;
    a->err = rep.err;
    a->step = rep.step;
    return 0;
}

/* A new helper for the next handler (this one is started by drowsed itself), unless three in a
   row have not served one. */
static void spawner_restart_locked(void) {
    if (spawner_exe[0] && spawner_restarts < 3) {
        spawner_restarts++;
        spawner_start_locked();
    }
}

int drowse_internal_spawner_clone3(struct spawn_args *a, int cgroup_dir, pid_t *pid) {
    /* Descriptors that cannot travel (none is -1 in drowsed's requests): spawned here. */
    if (a->stdin_fd < 0 || a->stdout_fd < 0 || a->stderr_fd < 0 || cgroup_dir < 0) return 1;
    if (spawner_fd < 0) {
        spawner_restart_locked();
        if (spawner_exe[0]) __atomic_add_fetch(&spawner_fallbacks, 1, __ATOMIC_RELAXED);
        return 1;
    }
    int rc = spawner_call(a, cgroup_dir, pid);
    if (rc < 0) {
        /* The helper died, or stopped answering: end it and start another. */
        spawner_drop_locked();
        spawner_restart_locked();
        __atomic_add_fetch(&spawner_fallbacks, 1, __ATOMIC_RELAXED);
        return 1;
    }
    if (rc == 0) spawner_restarts = 0;
    return rc;
}

/* ---- the helper's side */

/* Runs before main in every program that links this module; it acts only in a process started as
   "drowse-spawner" (by drowse_spawner_start), which never reaches main. */
__attribute__((constructor)) static void spawner_entry(int argc, char **argv, char **envp) {
    (void)envp;
    if (argc < 1 || !argv || !argv[0] || strcmp(argv[0], SPAWNER_NAME) != 0) return;
    /* drowsed's death ends the helper (and if drowsed died before this line, its end of the
       socket is closed: the first read ends the helper too). */
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    signal(SIGPIPE, SIG_IGN);
    prctl(PR_SET_NAME, SPAWNER_NAME, 0, 0, 0);
    _exit(drowse_spawner_serve(0));
}
