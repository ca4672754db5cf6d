/* The C spawn code on its own, for any architecture it is built for: the child's side
   (Sources/CDrowseSpawn/spawn_child.c), drowse_spawn with and without a cgroup
   (Sources/CDrowseSys/shim.c), the spawn helper's loop (spawner_serve.c) as the drowse-spawner
   program and as this program run under that name (Sources/CDrowseSys/spawner.c), driven through
   the real API and the real protocol. Built and run by deploy/test-spawn-arch.sh, natively or
   under qemu-user; docs/architecture.md, "Starting a handler".

   spawn_test --spawner PATH [--emulator QEMU]
   PATH is the drowse-spawner program built for the same architecture; QEMU is the qemu-user
   binary running this test, if any (then what qemu-user cannot emulate is skipped, and said so).
   Each check prints one line ("ok - ", "FAIL - ", "skip - "); the last line is "N passed, N failed". */
#define _GNU_SOURCE
#include "CDrowseSys.h"
#include "drowse_spawn.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- reporting */

static int passed, failed, skipped;

static void check(int ok, const char *what, const char *fmt, ...) {
    if (ok) {
        passed++;
        printf("ok - %s\n", what);
    } else {
        failed++;
        printf("FAIL - %s", what);
        if (fmt) {
            va_list ap;
            va_start(ap, fmt);
            printf(": ");
            vprintf(fmt, ap);
            va_end(ap);
        }
        printf("\n");
    }
    fflush(stdout);
}

static void skip(const char *what, const char *why) {
    skipped++;
    printf("skip - %s: %s\n", what, why);
    fflush(stdout);
}

static void cleanup(void);

static void on_alarm(int sig) {
    (void)sig;
    cleanup();
    static const char msg[] = "FAIL - the test did not finish within its time\n";
    ssize_t w = write(1, msg, sizeof msg - 1);
    (void)w;
    char line[64];
    int n = snprintf(line, sizeof line, "%d passed, %d failed\n", passed, failed + 1);
    w = write(1, line, (size_t)n);
    _exit(1);
}

/* ---- what this machine (or emulator) can do */

static const char *emulator; /* the qemu-user binary running this test, or NULL */
static const char *spawner_prog; /* the drowse-spawner program */
static char self_exe[PATH_MAX];
static int is_root;
static int vm_shared;       /* a clone(CLONE_VM | CLONE_VFORK) child writes the parent's memory */
static int clone3_errno;    /* 0: clone3 is there; else what it returns (ENOSYS) */
static int data_limit_applies; /* setting RLIMIT_DATA takes effect */
static int subreaper_errno; /* 0: prctl(PR_SET_CHILD_SUBREAPER) works; else its errno */
static char tmp_dir[256]; /* 0755, for the handlers' working directories */
static char closed_dir[PATH_MAX]; /* 0700, root's: another user cannot enter it */
static char cg_path[PATH_MAX]; /* the test's cgroup leaf, a directory under the cgroup2 mount */
static char cg_name[PATH_MAX]; /* the same as /proc/PID/cgroup names it ("0::NAME") */
static int cg_dir = -1;
static rlim_t nofile_hard;

#define NOBODY 65534
static const gid_t handler_groups[] = { 4242, 4343 };

static volatile int vm_probe_value;
static int vm_probe_child(void *p) {
    (void)p;
    vm_probe_value = 1;
    _exit(0);
}

static void probe(void) {
    is_root = geteuid() == 0;
    enum { STACK = 64 * 1024 };
    void *stack = mmap(NULL, STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (stack != MAP_FAILED) {
        pid_t pid = clone(vm_probe_child, (char *)stack + STACK, CLONE_VM | CLONE_VFORK | SIGCHLD, NULL);
        if (pid > 0) waitpid(pid, NULL, 0);
        munmap(stack, STACK);
    }
    vm_shared = vm_probe_value == 1;
    /* A size below the first version's: EINVAL where clone3 exists. */
    long r = syscall(SYS_clone3, NULL, 0);
    clone3_errno = r < 0 && errno == ENOSYS ? ENOSYS : 0;
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit rl;
        getrlimit(RLIMIT_DATA, &rl);
        rlim_t want = 123 * 1024 * 1024;
        if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want) want = rl.rlim_max / 2;
        struct rlimit set = { want, rl.rlim_max };
        if (setrlimit(RLIMIT_DATA, &set) != 0) _exit(2);
        /* The kernel's own account, not the emulator's. */
        FILE *f = fopen("/proc/self/limits", "r");
        char line[256];
        int ok = 0;
        while (f && fgets(line, sizeof line, f)) {
            unsigned long long soft;
            if (strncmp(line, "Max data size", 13) == 0 && sscanf(line + 13, "%llu", &soft) == 1) ok = soft == want;
        }
        _exit(ok ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    data_limit_applies = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    pid = fork();
    if (pid == 0) _exit(prctl(PR_SET_CHILD_SUBREAPER, 1UL, 0UL, 0UL, 0UL) == 0 ? 0 : errno);
    waitpid(pid, &status, 0);
    subreaper_errno = WIFEXITED(status) ? WEXITSTATUS(status) : EIO;
    printf("# %s, %s; clone(CLONE_VM | CLONE_VFORK) shares memory: %s; clone3: %s; RLIMIT_DATA takes effect: %s; "
           "PR_SET_CHILD_SUBREAPER: %s; root: %s\n",
           emulator ? "emulated" : "native", emulator ? emulator : "no emulator", vm_shared ? "yes" : "no",
           clone3_errno ? strerror(clone3_errno) : "yes", data_limit_applies ? "yes" : "no",
           subreaper_errno ? strerror(subreaper_errno) : "yes", is_root ? "yes" : "no");
}

/* Why a check cannot run here, or NULL. Only what the emulator cannot do is skipped: on a real
   kernel these checks run, and fail if the code is wrong. */
static const char *why_no_vm(void) {
    if (vm_shared || !emulator) return NULL;
    return "qemu-user runs clone(CLONE_VM | CLONE_VFORK) as a fork: the child's errno and step never reach the "
           "parent's memory (on a real kernel they do; the err_pipe path is checked with the child's side directly)";
}
static const char *why_no_clone3(void) {
    if (!clone3_errno) return NULL;
    return emulator ? "qemu-user does not emulate clone3 (ENOSYS)" : "clone3 returns ENOSYS here (this kernel, or a seccomp filter)";
}

/* ---- small helpers */

static int read_file(const char *path, char *buf, size_t cap, size_t *len) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    size_t at = 0;
    ssize_t n;
    while (at + 1 < cap && (n = read(fd, buf + at, cap - 1 - at)) > 0) at += (size_t)n;
    close(fd);
    buf[at] = 0;
    if (len) *len = at;
    return 0;
}

/* Reads from fd until a newline (line) or the end (!line), at most timeout_ms in all. */
static size_t read_timeout(int fd, char *buf, size_t cap, int line, int timeout_ms) {
    size_t at = 0;
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    while (at + 1 < cap) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        int left = timeout_ms - (int)((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000);
        if (left <= 0) break;
        struct pollfd p = { fd, POLLIN, 0 };
        int r = poll(&p, 1, left);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        ssize_t n = read(fd, buf + at, cap - 1 - at);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        at += (size_t)n;
        buf[at] = 0;
        if (line && memchr(buf, '\n', at)) break;
    }
    buf[at] = 0;
    return at;
}

/* A line of /proc/PID/status ("Uid:") with its whitespace folded to single spaces, trimmed. */
static void status_field(const char *status, const char *name, char *out, size_t cap) {
    out[0] = 0;
    size_t nl = strlen(name);
    for (const char *p = status; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, name, nl) != 0) continue;
        p += nl;
        size_t o = 0;
        int space = 0;
        for (; *p && *p != '\n' && o + 2 < cap; p++) {
            if (*p == ' ' || *p == '\t') { space = o > 0; continue; }
            if (space) out[o++] = ' ';
            space = 0;
            out[o++] = *p;
        }
        out[o] = 0;
        return;
    }
}

/* Soft and hard of a /proc/PID/limits line (-1: unlimited); 0, or -1 when it is missing. */
static int limit_of(const char *limits, const char *name, long long *soft, long long *hard) {
    const char *p = strstr(limits, name);
    if (!p) return -1;
    p += strlen(name);
    char a[32], b[32];
    if (sscanf(p, "%31s %31s", a, b) != 2) return -1;
    *soft = strcmp(a, "unlimited") == 0 ? -1 : atoll(a);
    *hard = strcmp(b, "unlimited") == 0 ? -1 : atoll(b);
    return 0;
}

/* /proc/PID/stat: parent, process group, session. */
static int stat_ids(pid_t pid, pid_t *ppid, pid_t *pgrp, pid_t *sid) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    if (read_file(path, buf, sizeof buf, NULL) != 0) return -1;
    char *p = strrchr(buf, ')');
    if (!p) return -1;
    char state;
    int a, b, c;
    if (sscanf(p + 1, " %c %d %d %d", &state, &a, &b, &c) != 4) return -1;
    *ppid = a;
    *pgrp = b;
    *sid = c;
    return 0;
}

/* The controlling terminal of /proc/PID/stat (0: none), or -1. */
static int stat_tty(pid_t pid) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    if (read_file(path, buf, sizeof buf, NULL) != 0) return -1;
    char *p = strrchr(buf, ')');
    char state;
    int a, b, c, tty;
    if (!p || sscanf(p + 1, " %c %d %d %d %d", &state, &a, &b, &c, &tty) != 5) return -1;
    return tty;
}

/* The state letter of /proc/PID/stat (Z: ended, not yet reaped), or 0 when there is no such process. */
static char proc_state(pid_t pid) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    if (read_file(path, buf, sizeof buf, NULL) != 0) return 0;
    char *p = strrchr(buf, ')');
    return p && p[1] == ' ' ? p[2] : 0;
}

/* A child of `parent` (an orphan it adopted), or 0. */
static pid_t child_of(pid_t parent) {
    DIR *d = opendir("/proc");
    pid_t found = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
        pid_t pid = atoi(e->d_name), pp, pg, sid;
        if (stat_ids(pid, &pp, &pg, &sid) == 0 && pp == parent) { found = pid; break; }
    }
    if (d) closedir(d);
    return found;
}

static void reap(pid_t pid) {
    if (pid <= 0) return;
    kill(pid, SIGKILL);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {}
}

static const char *step_name(int step) {
    switch (step) {
    case DROWSE_SPAWN_STEP_OTHER: return "OTHER";
    case DROWSE_SPAWN_STEP_CGROUP: return "CGROUP";
    case DROWSE_SPAWN_STEP_LIMITS: return "LIMITS";
    default: return "?";
    }
}

/* ---- the handler every start runs, and what is read back from it */

/* Reports that it runs, leaves an orphan (a subshell's background sleep), waits for a line on
   standard input, answers on both outputs and exits with 7. */
static char *handler_argv[] = {
    "drowse-test-argv0", "-c",
    "(sleep 60 </dev/null >/dev/null 2>&1 &); echo \"ready $0 $1\"; read line; echo \"got:$line\"; echo \"err:$1\" >&2; exit 7",
    "zero", "one with space", NULL,
};
static char *handler_envp[] = { "DROWSE_TEST=a b=c", "PATH=/usr/bin:/bin", NULL };
#define HANDLER_OUT "ready zero one with space\ngot:hello from the test\n"
#define HANDLER_ERR "err:one with space\n"
#define INHERITED_FD 40 /* open without CLOEXEC in the parent: must not reach the handler */

struct opts {
    const char *path;
    const char *cwd;
    int cgroup; /* start in the test's cgroup leaf */
    int set_ids;
    /* DROWSE_SPAWN_NEW_SESSION, DROWSE_SPAWN_NO_NEW_PRIVS: as drowsed asks for its handlers
       (a session for every one, no_new_privs for those not run as root) */
    int flags;
    long long nproc, data;
    char *const *argv; /* NULL: handler_argv */
    /* the child's side alone, in a forked child: its cgroup.procs written by the child, fds
       closed one by one up to close_to (the paths for kernels without clone3 or close_range) */
    int direct;
};

struct obs {
    int rc, step;
    pid_t pid;
    char ready[256];
    char status[4096], limits[4096], cgroup[1024], cwd[PATH_MAX], fds[512];
    char environ_[1024], cmdline[1024];
    size_t environ_len, cmdline_len;
    pid_t ppid, pgrp, sid, orphan;
    int tty;
    char out[512], err[512];
    int wstatus;
};

/* The child's side run directly in a forked child, reporting through err_pipe. 0 and the pid,
   or the errno and step it reported. */
static int start_direct(struct spawn_args *a, int cgroup_procs_fd, pid_t *pid, int *step) {
    int errp[2];
    if (pipe2(errp, O_CLOEXEC) != 0) return errno;
    a->err_pipe = errp[1];
    a->cgroup_fd = cgroup_procs_fd;
    pid_t p = fork();
    if (p < 0) return errno;
    if (p == 0) {
        close(errp[0]);
        drowse_internal_spawn_child(a);
        _exit(127);
    }
    close(errp[1]);
    a->err_pipe = -1;
    int rep[2];
    ssize_t n;
    while ((n = read(errp[0], rep, sizeof rep)) < 0 && errno == EINTR) {}
    close(errp[0]);
    if (n == (ssize_t)sizeof rep) {
        waitpid(p, NULL, 0);
        *step = rep[1];
        return rep[0];
    }
    *pid = p;
    return 0;
}

static int start(const struct opts *o, int in, int out, int err, pid_t *pid, int *step) {
    const char *path = o->path ? o->path : "/bin/sh";
    gid_t gid = NOBODY;
    int ngroups = (int)(sizeof handler_groups / sizeof handler_groups[0]);
    *step = -1;
    if (o->direct) {
        struct spawn_args a;
        memset(&a, 0, sizeof a);
        a.path = path;
        a.argv = o->argv ? o->argv : handler_argv;
        a.envp = handler_envp;
        a.cwd = o->cwd;
        a.set_ids = (o->set_ids ? 1 : 0) | o->flags;
        a.uid = NOBODY;
        a.gid = gid;
        a.groups = handler_groups;
        a.ngroups = ngroups;
        a.stdin_fd = in;
        a.stdout_fd = out;
        a.stderr_fd = err;
        a.close_to = drowse_internal_highest_fd_bound();
        a.nproc_limit = o->nproc;
        a.data_limit = o->data;
        a.reset_signals = NULL;
        int procs = -1;
        if (o->cgroup) {
            procs = openat(cg_dir, "cgroup.procs", O_WRONLY | O_CLOEXEC);
            if (procs < 0) return errno;
        }
        int rc = start_direct(&a, procs, pid, step);
        if (procs >= 0) close(procs);
        if (rc == 0) *step = DROWSE_SPAWN_STEP_OTHER;
        return rc;
    }
    *step = DROWSE_SPAWN_STEP_OTHER;
    return drowse_spawn_limited(path, o->argv ? o->argv : handler_argv, handler_envp, o->cwd, (o->set_ids ? 1 : 0) | o->flags, NOBODY, gid, handler_groups, ngroups,
                                in, out, err, o->cgroup ? cg_dir : -1, o->nproc, o->data, step, pid);
}

/* Starts the handler and reads it back while it waits for its input, then lets it end. */
static void observe(const struct opts *o, struct obs *ob) {
    memset(ob, 0, sizeof *ob);
    int in[2], out[2], err[2];
    if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC)) { ob->rc = errno; return; }
    ob->rc = start(o, in[0], out[1], err[1], &ob->pid, &ob->step);
    close(in[0]);
    close(out[1]);
    close(err[1]);
    if (ob->rc == 0) {
        read_timeout(out[0], ob->ready, sizeof ob->ready, 1, 5000);
        char path[96];
        pid_t pid = ob->pid;
        snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
        read_file(path, ob->status, sizeof ob->status, NULL);
        snprintf(path, sizeof path, "/proc/%d/limits", (int)pid);
        read_file(path, ob->limits, sizeof ob->limits, NULL);
        snprintf(path, sizeof path, "/proc/%d/cgroup", (int)pid);
        read_file(path, ob->cgroup, sizeof ob->cgroup, NULL);
        snprintf(path, sizeof path, "/proc/%d/environ", (int)pid);
        read_file(path, ob->environ_, sizeof ob->environ_, &ob->environ_len);
        snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
        read_file(path, ob->cmdline, sizeof ob->cmdline, &ob->cmdline_len);
        snprintf(path, sizeof path, "/proc/%d/cwd", (int)pid);
        ssize_t n = readlink(path, ob->cwd, sizeof ob->cwd - 1);
        ob->cwd[n > 0 ? n : 0] = 0;
        snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
        int fdlist[64], nfd = 0;
        DIR *d = opendir(path);
        struct dirent *e;
        while (d && (e = readdir(d)) != NULL && nfd < 64) {
            if (e->d_name[0] >= '0' && e->d_name[0] <= '9') fdlist[nfd++] = atoi(e->d_name);
        }
        if (d) closedir(d);
        for (int i = 0; i < nfd; i++) /* sorted, for the message */
            for (int j = i + 1; j < nfd; j++)
                if (fdlist[j] < fdlist[i]) { int t = fdlist[i]; fdlist[i] = fdlist[j]; fdlist[j] = t; }
        for (int i = 0; i < nfd; i++)
            snprintf(ob->fds + strlen(ob->fds), sizeof ob->fds - strlen(ob->fds), "%s%d", i ? " " : "", fdlist[i]);
        stat_ids(pid, &ob->ppid, &ob->pgrp, &ob->sid);
        ob->tty = stat_tty(pid);
        ob->orphan = child_of(pid);
        static const char line[] = "hello from the test\n";
        ssize_t w = write(in[1], line, sizeof line - 1);
        (void)w;
        close(in[1]);
        in[1] = -1;
        size_t got = strlen(ob->ready);
        memcpy(ob->out, ob->ready, got + 1);
        read_timeout(out[0], ob->out + got, sizeof ob->out - got, 0, 5000);
        read_timeout(err[0], ob->err, sizeof ob->err, 0, 5000);
        while (waitpid(pid, &ob->wstatus, 0) < 0 && errno == EINTR) {}
        if (ob->orphan > 0) kill(ob->orphan, SIGKILL); /* reaped by the test, its subreaper, at the end */
        kill(-pid, SIGKILL);
    }
    if (in[1] >= 0) close(in[1]);
    close(out[0]);
    close(err[0]);
}

/* /proc/PID/status of `cat` started as `o` asks, read while it runs: a shell would not do, as
   dash and bash set their effective ids back to the real ones when these differ. */
static int status_of_cat(const struct opts *o, char *status, size_t cap) {
    static char *cat_argv[] = { "cat", NULL };
    struct opts c = *o;
    c.path = "/bin/cat";
    c.argv = cat_argv;
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC)) return errno;
    pid_t pid = -1;
    int step;
    int rc = start(&c, in[0], out[1], out[1], &pid, &step);
    close(in[0]);
    close(out[1]);
    status[0] = 0;
    if (rc == 0) {
        char echo[16];
        ssize_t w = write(in[1], "x\n", 2); /* its echo says it runs (after execve) */
        (void)w;
        read_timeout(out[0], echo, sizeof echo, 1, 5000);
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
        read_file(path, status, cap, NULL);
        close(in[1]);
        in[1] = -1;
        int ws;
        while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {}
        if (strcmp(echo, "x\n") != 0) rc = EIO;
    }
    if (in[1] >= 0) close(in[1]);
    close(out[0]);
    return rc;
}

static int has_bit(const char *status, const char *field, int sig) {
    char v[64];
    status_field(status, field, v, sizeof v);
    unsigned long long mask = strtoull(v, NULL, 16);
    return (mask >> (sig - 1)) & 1;
}

/* The checks every started handler gets; `label` names the path it took. */
static void check_handler(const char *label, const struct opts *o, const struct obs *ob) {
    char what[256], v[256];
#define WHAT(s) (snprintf(what, sizeof what, "%s: %s", label, s), what)
    check(ob->rc == 0 && ob->pid > 0, WHAT("started"), "errno %d (%s), step %s", ob->rc, strerror(ob->rc), step_name(ob->step));
    if (ob->rc != 0) return;
    static const char cmdline[] = "drowse-test-argv0\0-c\0";
    check(ob->cmdline_len > sizeof cmdline - 1 && memcmp(ob->cmdline, cmdline, sizeof cmdline - 1) == 0 &&
              strcmp(ob->ready, "ready zero one with space\n") == 0,
          WHAT("argv as given (argv[0] too)"), "cmdline starts \"%s\", first line \"%s\"", ob->cmdline, ob->ready);
    static const char env[] = "DROWSE_TEST=a b=c\0PATH=/usr/bin:/bin\0";
    check(ob->environ_len == sizeof env - 1 && memcmp(ob->environ_, env, sizeof env - 1) == 0, WHAT("environment exactly as given"),
          "%zu bytes, starting \"%s\"", ob->environ_len, ob->environ_);
    check(strcmp(ob->cwd, o->cwd) == 0, WHAT("working directory"), "\"%s\", expected \"%s\"", ob->cwd, o->cwd);
    check(strcmp(ob->out, HANDLER_OUT) == 0 && strcmp(ob->err, HANDLER_ERR) == 0, WHAT("stdin, stdout and stderr wired (bytes read back)"),
          "stdout \"%s\", stderr \"%s\"", ob->out, ob->err);
    check(WIFEXITED(ob->wstatus) && WEXITSTATUS(ob->wstatus) == 7, WHAT("exit status 7 seen by waitpid"), "wait status 0x%x", ob->wstatus);
    if (o->flags & DROWSE_SPAWN_NEW_SESSION) {
        check(ob->pgrp == ob->pid && ob->sid == ob->pid && ob->tty == 0 && ob->ppid == getpid(),
              WHAT("leads a session of its own (no controlling terminal) and its process group, this process's child"),
              "pgrp %d, session %d (pid %d), tty %d, parent %d (us %d)", (int)ob->pgrp, (int)ob->sid, (int)ob->pid, ob->tty, (int)ob->ppid,
              (int)getpid());
    } else {
        check(ob->pgrp == ob->pid && ob->sid == getsid(0) && ob->ppid == getpid(), WHAT("its own process group, this session, this process's child"),
              "pgrp %d (pid %d), session %d (ours %d), parent %d (us %d)", (int)ob->pgrp, (int)ob->pid, (int)ob->sid, (int)getsid(0),
              (int)ob->ppid, (int)getpid());
    }
    status_field(ob->status, "NoNewPrivs:", v, sizeof v);
    if (o->flags & DROWSE_SPAWN_NO_NEW_PRIVS) {
        check(strcmp(v, "1") == 0, WHAT("no_new_privs set"), "NoNewPrivs %s", v);
    } else if (prctl(PR_GET_NO_NEW_PRIVS, 0UL, 0UL, 0UL, 0UL) == 0) {
        check(strcmp(v, "0") == 0, WHAT("no_new_privs not set (not asked)"), "NoNewPrivs %s", v);
    }
    char ign[64];
    status_field(ob->status, "SigIgn:", ign, sizeof ign);
    status_field(ob->status, "SigBlk:", v, sizeof v);
    check(!has_bit(ob->status, "SigIgn:", SIGUSR1) && !has_bit(ob->status, "SigIgn:", SIGPIPE) && strtoull(v, NULL, 16) == 0,
          WHAT("signals default (SIGUSR1, SIGPIPE ignored here) and none blocked (SIGUSR2 is here)"), "SigIgn %s, SigBlk %s", ign, v);
    status_field(ob->status, "Umask:", v, sizeof v);
    check(strcmp(v, "0022") == 0, WHAT("umask 022 (077 here)"), "Umask %s", v);
    check(strcmp(ob->fds, "0 1 2") == 0, WHAT("only descriptors 0, 1 and 2 open (an inherited one closed)"), "open: %s", ob->fds);
    if (subreaper_errno && emulator) {
        char why[128];
        snprintf(why, sizeof why, "qemu-user does not emulate prctl(PR_SET_CHILD_SUBREAPER) (%s)", strerror(subreaper_errno));
        skip(WHAT("adopts its orphans (a subreaper)"), why);
    } else {
        check(ob->orphan > 0, WHAT("adopts its orphans (a subreaper)"), "no child of %d found after its subshell's background job",
              (int)ob->pid);
    }
    long long soft, hard;
    if (nofile_hard > 1024) {
        int ok = limit_of(ob->limits, "Max open files", &soft, &hard) == 0 && soft == 1024 &&
                 hard == (nofile_hard == RLIM_INFINITY ? -1 : (long long)nofile_hard);
        check(ok, WHAT("RLIMIT_NOFILE: soft 1024, hard as inherited"), "soft %lld hard %lld", soft, hard);
    }
    if (o->nproc >= 0) {
        int ok = limit_of(ob->limits, "Max processes", &soft, &hard) == 0 && soft == o->nproc && hard == o->nproc;
        check(ok, WHAT("RLIMIT_NPROC as asked (soft and hard)"), "soft %lld hard %lld, asked %lld", soft, hard, o->nproc);
    }
    if (o->data >= 0) {
        if (!data_limit_applies && emulator) {
            skip(WHAT("RLIMIT_DATA as asked"), "qemu-user ignores a guest's RLIMIT_DATA (prlimit64 succeeds and sets nothing; "
                                               "it guards its own memory)");
        } else {
            int ok = limit_of(ob->limits, "Max data size", &soft, &hard) == 0 && soft == o->data && hard == o->data;
            check(ok, WHAT("RLIMIT_DATA as asked (soft and hard)"), "soft %lld hard %lld, asked %lld", soft, hard, o->data);
        }
    }
    if (o->cgroup) {
        char want[PATH_MAX + 8];
        snprintf(want, sizeof want, "0::%s\n", cg_name);
        check(strstr(ob->cgroup, want) != NULL, WHAT("in the cgroup leaf"), "/proc/PID/cgroup: %s", ob->cgroup);
    }
    if (o->set_ids) {
        char uid[128], gid[128], groups[128], cat[4096];
        int rc = status_of_cat(o, cat, sizeof cat);
        status_field(cat, "Uid:", uid, sizeof uid);
        status_field(cat, "Gid:", gid, sizeof gid);
        status_field(cat, "Groups:", groups, sizeof groups);
        check(rc == 0 && strcmp(uid, "65534 65534 65534 65534") == 0 && strcmp(gid, "65534 65534 65534 65534") == 0 &&
                  strcmp(groups, "4242 4343") == 0,
              WHAT("user nobody: real, effective, saved and fs uid and gid, groups 4242 4343 (read from cat)"),
              "start %d, Uid %s, Gid %s, Groups %s", rc, uid, gid, groups);
    } else {
        char uid[128];
        status_field(ob->status, "Uid:", uid, sizeof uid);
        char want[128];
        snprintf(want, sizeof want, "%d %d %d %d", (int)getuid(), (int)geteuid(), (int)geteuid(), (int)geteuid());
        check(strcmp(uid, want) == 0, WHAT("user unchanged"), "Uid %s", uid);
    }
#undef WHAT
}

/* A start that must fail with errno `want` at `want_step`. `needs` says why it cannot run here. */
static void expect_failure(const char *what, const struct opts *o, int want, int want_step, const char *why_not) {
    if (why_not) {
        skip(what, why_not);
        return;
    }
    int in = open("/dev/null", O_RDONLY | O_CLOEXEC), out = open("/dev/null", O_WRONLY | O_CLOEXEC);
    pid_t pid = -1;
    int step = -1;
    int rc = start(o, in, out, out, &pid, &step);
    close(in);
    close(out);
    if (rc == 0) reap(pid);
    check(rc == want && step == want_step, what, "errno %d (%s), step %s; expected %d (%s), step %s", rc, strerror(rc), step_name(step),
          want, strerror(want), step_name(want_step));
}

/* ---- the spawn helper's protocol, driven by hand */

struct helper { pid_t pid; int fd; };

/* Starts the drowse-spawner program (under the emulator when there is one) with its end of a
   socketpair as standard input; with nproc_hard >= 0 it runs under that hard RLIMIT_NPROC. */
static int helper_start(struct helper *h, long long nproc_hard) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        if (dup2(sv[1], 0) < 0) _exit(126);
        if (nproc_hard >= 0) {
            struct rlimit rl = { (rlim_t)nproc_hard, (rlim_t)nproc_hard };
            if (setrlimit(RLIMIT_NPROC, &rl) != 0) _exit(126);
        }
        char *env[] = { NULL };
        if (emulator) {
            char *argv[] = { (char *)emulator, (char *)spawner_prog, NULL };
            execve(emulator, argv, env);
        } else {
            char *argv[] = { SPAWNER_NAME, NULL };
            execve(spawner_prog, argv, env);
        }
        _exit(127);
    }
    close(sv[1]);
    if (pid < 0) { close(sv[0]); return -1; }
    struct timeval limit = { 20, 0 };
    setsockopt(sv[0], SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
    h->pid = pid;
    h->fd = sv[0];
    return 0;
}

static size_t put(char *buf, size_t at, const char *s) {
    size_t n = strlen(s) + 1;
    memcpy(buf + at, s, n);
    return at + n;
}

/* One request (fds: 4 descriptors, or NULL for none) and its answer; -1 when none came. */
static int helper_call(struct helper *h, const void *msg, size_t len, const int *fds, struct spawner_reply *rep) {
    struct iovec iov = { (void *)msg, len };
    union { char buf[CMSG_SPACE(4 * sizeof(int))]; struct cmsghdr align; } control;
    memset(&control, 0, sizeof control);
    struct msghdr m;
    memset(&m, 0, sizeof m);
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    if (fds) {
        m.msg_control = control.buf;
        m.msg_controllen = CMSG_SPACE(4 * sizeof(int));
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(4 * sizeof(int));
        memcpy(CMSG_DATA(c), fds, 4 * sizeof(int));
    }
    if (sendmsg(h->fd, &m, MSG_NOSIGNAL) != (ssize_t)len) return -1;
    ssize_t n;
    while ((n = recv(h->fd, rep, sizeof *rep, 0)) < 0 && errno == EINTR) {}
    return n == (ssize_t)sizeof *rep ? 0 : -1;
}

/* A request for the test's handler (or `path`), as drowsed's spawner.c lays it out. */
static size_t build_request(char *buf, const char *path, const char *cwd, int set_ids, long long nproc) {
    struct spawner_request req;
    memset(&req, 0, sizeof req);
    req.magic = SPAWNER_MAGIC;
    req.set_ids = set_ids;
    req.uid = NOBODY;
    req.gid = NOBODY;
    req.ngroups = set_ids ? 2 : 0;
    req.has_cwd = cwd != NULL;
    req.nproc_limit = nproc;
    req.data_limit = -1;
    req.close_to = -1;
    size_t at = sizeof req;
    if (set_ids) {
        memcpy(buf + at, handler_groups, sizeof handler_groups);
        at += sizeof handler_groups;
    }
    at = put(buf, at, path);
    if (cwd) at = put(buf, at, cwd);
    for (char **v = handler_argv; *v; v++, req.argc++) at = put(buf, at, *v);
    for (char **v = handler_envp; *v; v++, req.envc++) at = put(buf, at, *v);
    memcpy(buf, &req, sizeof req);
    return at;
}

static void test_helper_protocol(void) {
    static char buf[SPAWNER_MAX];
    struct helper h;
    if (helper_start(&h, -1) != 0) {
        check(0, "protocol: the drowse-spawner program starts", "%s", strerror(errno));
        return;
    }
    int in = open("/dev/null", O_RDONLY | O_CLOEXEC), out = open("/dev/null", O_WRONLY | O_CLOEXEC);
    int fds[4] = { in, out, out, cg_dir >= 0 ? cg_dir : in };
    struct spawner_reply rep;

    size_t len = build_request(buf, "/bin/sh", "/", 0, -1);
    ((struct spawner_request *)buf)->magic = 0x12345678;
    int r = helper_call(&h, buf, len, fds, &rep);
    check(r == 0 && rep.pid == -1 && rep.clone_errno == EINVAL, "protocol: a request with another magic number is refused (EINVAL)",
          "answer %d, pid %d, errno %d", r, rep.pid, rep.clone_errno);

    len = build_request(buf, "/bin/sh", "/", 0, -1);
    r = helper_call(&h, buf, len, NULL, &rep);
    check(r == 0 && rep.pid == -1 && rep.clone_errno == EINVAL, "protocol: a request without descriptors is refused (EINVAL)",
          "answer %d, pid %d, errno %d", r, rep.pid, rep.clone_errno);

    len = build_request(buf, "/bin/sh", "/", 0, -1);
    r = helper_call(&h, buf, len - 1, fds, &rep); /* the last string without its NUL */
    check(r == 0 && rep.pid == -1 && rep.clone_errno == EINVAL, "protocol: a request whose last string is not terminated is refused (EINVAL)",
          "answer %d, pid %d, errno %d", r, rep.pid, rep.clone_errno);

    r = helper_call(&h, buf, 8, fds, &rep);
    check(r == 0 && rep.pid == -1 && rep.clone_errno == EINVAL, "protocol: a request shorter than its header is refused (EINVAL)",
          "answer %d, pid %d, errno %d", r, rep.pid, rep.clone_errno);

    if (cg_dir < 0) {
        skip("protocol: a handler started by the helper", "no writable cgroup2 here (the helper needs a cgroup directory)");
    } else {
        /* A well-formed request after the refused ones: the loop goes on. */
        int hin[2], hout[2];
        if (pipe2(hin, O_CLOEXEC) || pipe2(hout, O_CLOEXEC)) return;
        int hfds[4] = { hin[0], hout[1], hout[1], cg_dir };
        len = build_request(buf, "/bin/sh", tmp_dir, 0, -1);
        r = helper_call(&h, buf, len, hfds, &rep);
        close(hin[0]);
        close(hout[1]);
        if (clone3_errno) {
            /* The request was read (a malformed one is answered with EINVAL) and clone3's own error came back. */
            check(r == 0 && rep.pid == -1 && rep.clone_errno == clone3_errno, "protocol: a well-formed request is answered with clone3's errno",
                  "answer %d, pid %d, errno %d (expected %d)", r, rep.pid, rep.clone_errno, clone3_errno);
            skip("protocol: the handler the helper clones (CLONE_PARENT, into the cgroup)", why_no_clone3());
        } else {
            check(r == 0 && rep.pid > 0 && rep.err == 0, "protocol: a well-formed request after refused ones starts the handler",
                  "answer %d, pid %d, clone errno %d, err %d", r, rep.pid, rep.clone_errno, rep.err);
            if (r == 0 && rep.pid > 0) {
                char ready[128], path[64], cg[1024];
                read_timeout(hout[0], ready, sizeof ready, 1, 5000);
                snprintf(path, sizeof path, "/proc/%d/cgroup", rep.pid);
                read_file(path, cg, sizeof cg, NULL);
                pid_t pp = 0, pg = 0, sid = 0;
                stat_ids(rep.pid, &pp, &pg, &sid);
                pid_t orphan = child_of(rep.pid);
                static const char line[] = "x\n";
                ssize_t w = write(hin[1], line, 2);
                (void)w;
                char rest[256];
                read_timeout(hout[0], rest, sizeof rest, 0, 5000);
                int status = 0;
                pid_t waited = waitpid(rep.pid, &status, 0);
                if (orphan > 0) kill(orphan, SIGKILL);
                kill(-rep.pid, SIGKILL);
                char want[PATH_MAX + 8];
                snprintf(want, sizeof want, "0::%s\n", cg_name);
                check(strcmp(ready, "ready zero one with space\n") == 0 && strcmp(rest, "got:x\nerr:one with space\n") == 0,
                      "protocol: the helper's handler runs with the given argv and descriptors", "\"%s\" then \"%s\"", ready, rest);
                check(waited == rep.pid && pp == getpid() && WIFEXITED(status) && WEXITSTATUS(status) == 7,
                      "protocol: the helper's handler is this process's child (CLONE_PARENT), its exit status 7",
                      "parent %d (us %d), waitpid %d, status 0x%x", (int)pp, (int)getpid(), (int)waited, status);
                check(pg == rep.pid && strstr(cg, want) != NULL, "protocol: the helper's handler in its own process group, in the cgroup",
                      "pgrp %d, cgroup %s", (int)pg, cg);
            }
        }
        close(hin[1]);
        close(hout[0]);

        len = build_request(buf, "/nonexistent/handler", "/", 0, -1);
        r = helper_call(&h, buf, len, fds, &rep);
        if (clone3_errno) {
            skip("protocol: a failing execve in the helper's child answered with its errno and step", why_no_clone3());
        } else {
            if (r == 0 && rep.pid > 0) reap(rep.pid);
            check(r == 0 && rep.pid > 0 && rep.err == ENOENT && rep.step == DROWSE_SPAWN_STEP_OTHER,
                  "protocol: a failing execve in the helper's child answered with ENOENT, step OTHER", "answer %d, pid %d, err %d, step %s", r,
                  rep.pid, rep.err, step_name(rep.step));
        }
    }
    close(h.fd);
    int status = 0;
    pid_t waited = waitpid(h.pid, &status, 0);
    check(waited == h.pid && WIFEXITED(status) && WEXITSTATUS(status) == 0, "protocol: the helper exits with 0 when its socket closes",
          "wait status 0x%x", status);

    /* A limit the handler's user may not raise: the child's failure comes back with its step. */
    if (!is_root) {
        skip("protocol: a limit the handler cannot set answered with EPERM, step LIMITS", "not root (no user switch)");
    } else if (cg_dir < 0 || clone3_errno) {
        skip("protocol: a limit the handler cannot set answered with EPERM, step LIMITS",
             cg_dir < 0 ? "no writable cgroup2 here" : why_no_clone3());
    } else if (helper_start(&h, 5000) == 0) {
        len = build_request(buf, "/bin/sh", "/", 1, 6000);
        r = helper_call(&h, buf, len, fds, &rep);
        if (r == 0 && rep.pid > 0) reap(rep.pid);
        check(r == 0 && rep.pid > 0 && rep.err == EPERM && rep.step == DROWSE_SPAWN_STEP_LIMITS,
              "protocol: a limit the handler's user may not raise answered with EPERM, step LIMITS", "answer %d, pid %d, err %d, step %s", r,
              rep.pid, rep.err, step_name(rep.step));
        close(h.fd);
        waitpid(h.pid, NULL, 0);
    }
    close(in);
    close(out);
}

/* ---- the whole path through drowse_spawn */

/* The core limit the handler inherits tells whose child it was before execve: the helper was
   started with a soft limit of 0, and this process has raised its own to 4096 since. */
static long long core_soft(const struct obs *ob) {
    long long soft = -2, hard;
    limit_of(ob->limits, "Max core file size", &soft, &hard);
    return soft;
}

/* Sets this process's soft core limit, at most its hard one; the value set. */
static rlim_t set_core(rlim_t soft) {
    struct rlimit rl;
    getrlimit(RLIMIT_CORE, &rl);
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < soft) soft = rl.rlim_max;
    rl.rlim_cur = soft;
    setrlimit(RLIMIT_CORE, &rl);
    return soft;
}

/* Writes an executable that runs `prog` as "drowse-spawner" under the emulator (an emulated
   process cannot execve a program of the emulated architecture by itself). */
static const char *emulated_exe(const char *prog, const char *name) {
    static char path[2][PATH_MAX];
    static int n;
    char *p = path[n++ % 2];
    snprintf(p, PATH_MAX, "%s/%s", tmp_dir, name);
    FILE *f = fopen(p, "w");
    if (!f) return NULL;
    fprintf(f, "#!/bin/sh\nexec '%s' -0 " SPAWNER_NAME " '%s'\n", emulator, prog);
    fclose(f);
    chmod(p, 0755);
    return p;
}

static void test_through_helper(const char *label, const char *exe) {
    char what[256];
#define WHAT(s) (snprintf(what, sizeof what, "%s: %s", label, s), what)
    if (cg_dir < 0) {
        skip(WHAT("handlers started by the spawn helper"), "no writable cgroup2 here (drowsed asks the helper only for a cgroup)");
        return;
    }
    set_core(0);
    int rc = drowse_spawner_start(exe);
    long long raised = (long long)set_core(4096);
    pid_t helper = drowse_spawner_pid();
    check(rc == 0 && helper > 0, WHAT("drowse_spawner_start"), "%d (%s), pid %d", rc, strerror(rc), (int)helper);
    if (rc != 0) return;
    struct opts o = { .cwd = tmp_dir, .cgroup = 1, .flags = DROWSE_SPAWN_NEW_SESSION, .nproc = 99, .data = 80 << 20 };
    struct obs ob;
    observe(&o, &ob);
    check_handler(label, &o, &ob);
    if (clone3_errno) {
        skip(WHAT("the handler cloned by the helper (its limits, not this process's)"), why_no_clone3());
    } else if (raised == 0) {
        skip(WHAT("the handler cloned by the helper (its limits, not this process's)"), "the hard core limit is 0 here");
    } else {
        long long soft = core_soft(&ob);
        check(soft == 0, WHAT("the handler cloned by the helper (the helper's core limit 0, not this process's)"),
              "core soft limit %lld, this process's %lld", soft, raised);
    }
    usleep(200 * 1000); /* a helper that could not serve has ended by now */
    char state = proc_state(helper);
    check(drowse_spawner_pid() == helper && state != 0 && state != 'Z', WHAT("the helper still runs afterwards (same pid, not ended)"),
          "pid %d, was %d, state %c", (int)drowse_spawner_pid(), (int)helper, state ? state : '-');
    if (is_root) {
        struct opts u = { .cwd = tmp_dir, .cgroup = 1, .set_ids = 1, .flags = DROWSE_SPAWN_NEW_SESSION | DROWSE_SPAWN_NO_NEW_PRIVS, .nproc = -1, .data = -1 };
        char ulabel[128];
        snprintf(ulabel, sizeof ulabel, "%s, user nobody", label);
        observe(&u, &ob);
        check_handler(ulabel, &u, &ob);
    } else {
        skip(WHAT("user switch"), "not root");
    }
    struct opts bad = { .path = "/nonexistent/handler", .cwd = "/", .cgroup = 1, .nproc = -1, .data = -1 };
    expect_failure(WHAT("a failing execve reported as ENOENT, step OTHER"), &bad, ENOENT, DROWSE_SPAWN_STEP_OTHER,
                   clone3_errno ? why_no_vm() : NULL);
    /* A helper killed between two starts: that start is made here, and a new helper started. */
    if (clone3_errno) {
        char why[160];
        snprintf(why, sizeof why, "drowsed stops asking the helper once clone3 returned ENOSYS (%s)", why_no_clone3());
        skip(WHAT("a killed helper is replaced"), why);
    } else {
        kill(helper, SIGKILL);
        usleep(100 * 1000);
        observe(&o, &ob);
        pid_t next = drowse_spawner_pid();
        check(ob.rc == 0 && WIFEXITED(ob.wstatus) && WEXITSTATUS(ob.wstatus) == 7 && strcmp(ob.out, HANDLER_OUT) == 0,
              WHAT("the start after the helper was killed succeeds"), "errno %d, status 0x%x, stdout \"%s\"", ob.rc, ob.wstatus, ob.out);
        check(next > 0 && next != helper && kill(next, 0) == 0, WHAT("a new helper runs after the killed one"), "pid %d, was %d", (int)next,
              (int)helper);
    }
    drowse_spawner_stop();
    check(drowse_spawner_pid() == -1, WHAT("drowse_spawner_stop ends it"), "pid %d", (int)drowse_spawner_pid());
#undef WHAT
}

/* ---- clone3 refused by a seccomp filter, as systemd's RestrictNamespaces= (since systemd 251)
   refuses it to drowsed.service: ENOSYS, so that callers fall back to clone. */

static int refuse_clone3(void) {
    struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone3, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = { (unsigned short)(sizeof code / sizeof code[0]), code };
    if (prctl(PR_SET_NO_NEW_PRIVS, 1UL, 0UL, 0UL, 0UL) != 0) return errno;
    return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0UL, 0UL) == 0 ? 0 : errno;
}

/* Last: the filter stays on this process and every child it starts from here on. */
static void test_clone3_refused(void) {
    const char *label = "clone3 refused by seccomp (ENOSYS)";
    char what[256];
#define WHAT(s) (snprintf(what, sizeof what, "%s: %s", label, s), what)
    if (emulator) {
        pid_t pid = fork();
        if (pid == 0) _exit(refuse_clone3());
        int status = 0;
        waitpid(pid, &status, 0);
        int e = WIFEXITED(status) ? WEXITSTATUS(status) : EIO;
        if (e != 0) {
            char why[160];
            snprintf(why, sizeof why, "qemu-user refuses seccomp filters (%s); it has no clone3 anyway, so the fallback ran above", strerror(e));
            skip(label, why);
            return;
        }
    }
    if (clone3_errno) {
        skip(label, "clone3 is missing here already: the fallback ran above");
        return;
    }
    if (cg_dir < 0) {
        skip(label, "no writable cgroup2 here");
        return;
    }
    int rc = refuse_clone3();
    check(rc == 0 && syscall(SYS_clone3, NULL, 0) < 0 && errno == ENOSYS, WHAT("the filter is in place"), "%s", strerror(rc));
    if (rc != 0) return;
    /* The helper, started under the filter as drowsed's is, is asked first and answers ENOSYS. */
    set_core(0);
    rc = drowse_spawner_start(spawner_prog);
    long long raised = (long long)set_core(4096);
    check(rc == 0 && drowse_spawner_pid() > 0, WHAT("drowse_spawner_start"), "%d (%s)", rc, strerror(rc));
    struct opts o = { .cwd = tmp_dir, .cgroup = 1, .flags = DROWSE_SPAWN_NEW_SESSION, .nproc = 55, .data = 88 << 20 };
    struct obs ob;
    observe(&o, &ob);
    check_handler("clone3 refused by seccomp, drowse_spawn into a cgroup (cgroup.procs fallback)", &o, &ob);
    long long soft = core_soft(&ob);
    if (raised > 0)
        check(soft == raised, WHAT("the handler was cloned by this process, not by the helper (whose clone3 is refused too)"),
              "core soft limit %lld, this process's %lld", soft, raised);
    if (is_root) {
        struct opts u = { .cwd = tmp_dir, .cgroup = 1, .set_ids = 1, .flags = DROWSE_SPAWN_NEW_SESSION | DROWSE_SPAWN_NO_NEW_PRIVS, .nproc = -1, .data = -1 };
        observe(&u, &ob);
        check_handler("clone3 refused by seccomp, drowse_spawn into a cgroup (cgroup.procs fallback), user nobody", &u, &ob);
    }
    struct opts f = { .path = "/nonexistent/handler", .cwd = "/", .cgroup = 1, .nproc = -1, .data = -1 };
    expect_failure(WHAT("a failing execve reported as ENOENT, step OTHER"), &f, ENOENT, DROWSE_SPAWN_STEP_OTHER, NULL);
    int notcg = open(tmp_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int saved = cg_dir;
    cg_dir = notcg;
    expect_failure(WHAT("a directory that is no cgroup reported as ENOENT, step CGROUP"), &f, ENOENT, DROWSE_SPAWN_STEP_CGROUP, NULL);
    cg_dir = saved;
    close(notcg);
    drowse_spawner_stop();
#undef WHAT
}

/* ---- setup */

static void setup_cgroup(void) {
    char line[4096], mount[PATH_MAX] = "", own[PATH_MAX] = "";
    FILE *f = fopen("/proc/self/mountinfo", "r");
    while (f && fgets(line, sizeof line, f)) {
        char *sep = strstr(line, " - cgroup2 ");
        if (!sep) continue;
        char mp[PATH_MAX];
        if (sscanf(line, "%*s %*s %*s %*s %4095s", mp) == 1) { snprintf(mount, sizeof mount, "%s", mp); break; }
    }
    if (f) fclose(f);
    f = fopen("/proc/self/cgroup", "r");
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "0::", 3) == 0) {
            line[strcspn(line, "\n")] = 0;
            snprintf(own, sizeof own, "%s", line + 3);
        }
    }
    if (f) fclose(f);
    if (!mount[0] || !own[0]) {
        printf("# no cgroup2 mount: the cgroup checks are skipped\n");
        return;
    }
    snprintf(cg_name, sizeof cg_name, "%s%sdrowse-spawn-test-%d", own, strcmp(own, "/") == 0 ? "" : "/", (int)getpid());
    snprintf(cg_path, sizeof cg_path, "%s%s", mount, cg_name);
    if (mkdir(cg_path, 0755) != 0) {
        printf("# cannot make a cgroup at %s (%s): the cgroup checks are skipped\n", cg_path, strerror(errno));
        cg_path[0] = 0;
        return;
    }
    cg_dir = open(cg_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    printf("# cgroup leaf %s\n", cg_path);
}

static void cleanup(void) {
    /* What a failed check left in the leaf is killed; every leftover is ours to reap (this
       process is their subreaper). */
    for (int i = 0; i < 100 && cg_path[0]; i++) {
        char procs[PATH_MAX + 16], pids[4096];
        snprintf(procs, sizeof procs, "%s/cgroup.procs", cg_path);
        if (read_file(procs, pids, sizeof pids, NULL) == 0) {
            for (char *p = strtok(pids, "\n"); p; p = strtok(NULL, "\n")) {
                pid_t pid = atoi(p);
                if (pid > 0 && pid != getpid()) kill(pid, SIGKILL);
            }
        }
        while (waitpid(-1, NULL, WNOHANG) > 0) {}
        if (rmdir(cg_path) == 0 || errno == ENOENT) break;
        usleep(20 * 1000);
    }
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/%s", tmp_dir, "helper-spawner");
    unlink(path);
    snprintf(path, sizeof path, "%s/%s", tmp_dir, "helper-self");
    unlink(path);
    rmdir(closed_dir);
    rmdir(tmp_dir);
}

int main(int argc, char **argv) {
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--spawner") == 0) spawner_prog = argv[i + 1];
        else if (strcmp(argv[i], "--emulator") == 0) emulator = argv[i + 1];
    }
    if (!spawner_prog) {
        fprintf(stderr, "usage: %s --spawner DROWSE_SPAWNER [--emulator QEMU]\n", argv[0]);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGALRM, on_alarm);
    alarm(150);
    ssize_t n = readlink("/proc/self/exe", self_exe, sizeof self_exe - 1);
    self_exe[n > 0 ? n : 0] = 0;
    probe();

    /* What a handler must not inherit from drowsed: ignored and blocked signals, umask 077, a high
       descriptor limit, a descriptor without CLOEXEC. */
    prctl(PR_SET_CHILD_SUBREAPER, 1UL, 0UL, 0UL, 0UL);
    signal(SIGPIPE, SIG_IGN);
    signal(SIGUSR1, SIG_IGN);
    sigset_t usr2;
    sigemptyset(&usr2);
    sigaddset(&usr2, SIGUSR2);
    sigprocmask(SIG_BLOCK, &usr2, NULL);
    umask(077);
    struct rlimit nofile;
    getrlimit(RLIMIT_NOFILE, &nofile);
    nofile_hard = nofile.rlim_max;
    if (nofile_hard > 1024) {
        nofile.rlim_cur = nofile_hard == RLIM_INFINITY || nofile_hard > 4096 ? 4096 : nofile_hard;
        setrlimit(RLIMIT_NOFILE, &nofile);
    } else {
        printf("# RLIMIT_NOFILE's hard limit is %llu: the handler's soft limit of 1024 is not checked\n", (unsigned long long)nofile_hard);
    }
    int leak = open("/dev/null", O_RDONLY);
    if (leak >= 0 && leak != INHERITED_FD) {
        dup2(leak, INHERITED_FD);
        close(leak);
    }
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/drowse-spawn-test-XXXXXX");
    if (!mkdtemp(tmp_dir)) {
        perror("mkdtemp");
        return 2;
    }
    chmod(tmp_dir, 0755);
    snprintf(closed_dir, sizeof closed_dir, "%s/closed", tmp_dir);
    mkdir(closed_dir, 0700);
    setup_cgroup();

    /* On a real kernel this holds; the skips below that depend on it are for emulators only. */
    if (!emulator) check(vm_shared, "clone(CLONE_VM | CLONE_VFORK) shares the parent's memory", "it did not");

    /* 1. The child's side alone: errno and step through err_pipe (what a clone3 child uses),
       cgroup.procs written by the child, descriptors closed one by one. */
    struct obs ob;
    struct opts direct = { .cwd = tmp_dir, .nproc = 77, .data = 64 << 20, .direct = 1, .cgroup = cg_dir >= 0 };
    observe(&direct, &ob);
    check_handler("child's side (fork, cgroup.procs, fds closed one by one)", &direct, &ob);
    struct opts d = { .path = "/nonexistent/handler", .cwd = "/", .nproc = -1, .data = -1, .direct = 1 };
    expect_failure("child's side: a failing execve reported through err_pipe as ENOENT, step OTHER", &d, ENOENT, DROWSE_SPAWN_STEP_OTHER, NULL);
    d.path = tmp_dir;
    expect_failure("child's side: execve of a directory reported as EACCES, step OTHER", &d, EACCES, DROWSE_SPAWN_STEP_OTHER, NULL);
    d.path = NULL;
    d.cwd = "/nonexistent";
    expect_failure("child's side: a missing working directory reported as ENOENT, step OTHER", &d, ENOENT, DROWSE_SPAWN_STEP_OTHER, NULL);
    {
        /* A cgroup.procs the child cannot write (opened read-only): EBADF at step CGROUP. */
        struct spawn_args a;
        memset(&a, 0, sizeof a);
        a.path = "/bin/sh";
        a.argv = handler_argv;
        a.envp = handler_envp;
        int null = open("/dev/null", O_RDWR | O_CLOEXEC), ro = open("/dev/null", O_RDONLY | O_CLOEXEC);
        a.stdin_fd = a.stdout_fd = a.stderr_fd = null;
        a.close_to = -1;
        a.nproc_limit = a.data_limit = -1;
        pid_t pid = -1;
        int step = -1, rc = start_direct(&a, ro, &pid, &step);
        if (rc == 0) reap(pid);
        check(rc == EBADF && step == DROWSE_SPAWN_STEP_CGROUP, "child's side: a cgroup.procs it cannot write reported as EBADF, step CGROUP",
              "errno %d, step %s", rc, step_name(step));
        close(null);
        close(ro);
    }
    if (is_root) {
        struct opts u = { .cwd = tmp_dir, .set_ids = 1, .flags = DROWSE_SPAWN_NEW_SESSION | DROWSE_SPAWN_NO_NEW_PRIVS, .nproc = -1, .data = -1, .direct = 1 };
        observe(&u, &ob);
        check_handler("child's side, user nobody", &u, &ob);
        u.cwd = closed_dir;
        expect_failure("child's side: a working directory nobody may enter reported as EACCES (after the user switch)", &u, EACCES,
                       DROWSE_SPAWN_STEP_OTHER, NULL);
        u.cwd = "/";
        /* RLIMIT_NPROC above the hard limit: only root may raise it, and the child is nobody by then. */
        struct rlimit saved;
        getrlimit(RLIMIT_NPROC, &saved);
        struct rlimit low = { 5000, 5000 };
        setrlimit(RLIMIT_NPROC, &low);
        u.nproc = 6000;
        expect_failure("child's side: RLIMIT_NPROC above the hard limit reported as EPERM, step LIMITS", &u, EPERM, DROWSE_SPAWN_STEP_LIMITS, NULL);
        u.nproc = -1;
        setrlimit(RLIMIT_NPROC, &saved);
        struct rlimit data_saved;
        getrlimit(RLIMIT_DATA, &data_saved);
        struct rlimit data_low = { 256 << 20, 256 << 20 };
        setrlimit(RLIMIT_DATA, &data_low);
        u.data = 512 << 20;
        expect_failure("child's side: RLIMIT_DATA above the hard limit reported as EPERM, step LIMITS", &u, EPERM, DROWSE_SPAWN_STEP_LIMITS,
                       !data_limit_applies && emulator ? "qemu-user ignores a guest's RLIMIT_DATA (prlimit64 succeeds and sets nothing)" : NULL);
        setrlimit(RLIMIT_DATA, &data_saved);
    } else {
        skip("child's side: user switch to nobody", "not root");
    }

    /* 2. drowse_spawn in this process: clone(CLONE_VM | CLONE_VFORK), no cgroup. */
    struct opts inproc = { .cwd = tmp_dir, .flags = DROWSE_SPAWN_NEW_SESSION, .nproc = 88, .data = 72 << 20 };
    observe(&inproc, &ob);
    check_handler("drowse_spawn (clone, CLONE_VM)", &inproc, &ob);
    struct opts f = { .path = "/nonexistent/handler", .cwd = "/", .nproc = -1, .data = -1 };
    expect_failure("drowse_spawn (clone, CLONE_VM): a failing execve reported as ENOENT, step OTHER", &f, ENOENT, DROWSE_SPAWN_STEP_OTHER,
                   why_no_vm());
    f.path = NULL;
    f.cwd = "/nonexistent";
    expect_failure("drowse_spawn (clone, CLONE_VM): a missing working directory reported as ENOENT", &f, ENOENT, DROWSE_SPAWN_STEP_OTHER,
                   why_no_vm());
    if (is_root) {
        struct opts u = { .cwd = tmp_dir, .set_ids = 1, .flags = DROWSE_SPAWN_NEW_SESSION | DROWSE_SPAWN_NO_NEW_PRIVS, .nproc = -1, .data = -1 };
        observe(&u, &ob);
        check_handler("drowse_spawn (clone, CLONE_VM), user nobody", &u, &ob);
        u.cwd = closed_dir;
        expect_failure("drowse_spawn (clone, CLONE_VM): a working directory nobody may enter reported as EACCES", &u, EACCES,
                       DROWSE_SPAWN_STEP_OTHER, why_no_vm());
        u.cwd = "/";
        struct rlimit saved;
        getrlimit(RLIMIT_NPROC, &saved);
        struct rlimit low = { 5000, 5000 };
        setrlimit(RLIMIT_NPROC, &low);
        u.nproc = 6000;
        expect_failure("drowse_spawn (clone, CLONE_VM): RLIMIT_NPROC above the hard limit reported as EPERM, step LIMITS", &u, EPERM,
                       DROWSE_SPAWN_STEP_LIMITS, why_no_vm());
        setrlimit(RLIMIT_NPROC, &saved);
    } else {
        skip("drowse_spawn: user switch to nobody", "not root");
    }

    /* 3. drowse_spawn into a cgroup without a helper: clone3(CLONE_INTO_CGROUP) here, or the
       cgroup.procs fallback where clone3 is missing. */
    if (cg_dir >= 0) {
        const char *label = clone3_errno ? "drowse_spawn into a cgroup (cgroup.procs fallback)" : "drowse_spawn into a cgroup (clone3)";
        if (clone3_errno) {
            char why[160];
            snprintf(why, sizeof why, "%s; the cgroup.procs fallback is checked instead", why_no_clone3());
            skip("drowse_spawn into a cgroup with clone3(CLONE_INTO_CGROUP)", why);
        }
        struct opts c = { .cwd = tmp_dir, .cgroup = 1, .flags = DROWSE_SPAWN_NEW_SESSION, .nproc = 66, .data = 96 << 20 };
        observe(&c, &ob);
        check_handler(label, &c, &ob);
        char what[256];
        struct opts cf = { .path = "/nonexistent/handler", .cwd = "/", .cgroup = 1, .nproc = -1, .data = -1 };
        snprintf(what, sizeof what, "%s: a failing execve reported as ENOENT, step OTHER", label);
        expect_failure(what, &cf, ENOENT, DROWSE_SPAWN_STEP_OTHER, clone3_errno ? why_no_vm() : NULL);
        if (is_root) {
            struct opts u = { .cwd = tmp_dir, .cgroup = 1, .set_ids = 1, .flags = DROWSE_SPAWN_NEW_SESSION | DROWSE_SPAWN_NO_NEW_PRIVS, .nproc = -1, .data = -1 };
            snprintf(what, sizeof what, "%s, user nobody", label);
            observe(&u, &ob);
            check_handler(what, &u, &ob);
        }
        /* A directory that is no cgroup: clone3 refuses it (EBADF), the fallback finds no cgroup.procs. */
        int notcg = open(tmp_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        int saved = cg_dir;
        cg_dir = notcg;
        snprintf(what, sizeof what, "%s: a directory that is no cgroup reported at step CGROUP (%s)", label, clone3_errno ? "ENOENT" : "EBADF");
        expect_failure(what, &cf, clone3_errno ? ENOENT : EBADF, DROWSE_SPAWN_STEP_CGROUP, NULL);
        cg_dir = saved;
        close(notcg);
    } else {
        skip("drowse_spawn into a cgroup", "no writable cgroup2 here");
    }

    /* 4. The spawn helper's loop, by hand. */
    test_helper_protocol();

    /* 5. drowse_spawn through the helper: the drowse-spawner program, then this program run as
       "drowse-spawner" (spawner.c's constructor), as drowsed runs its own binary without it. */
    if (emulator) {
        test_through_helper("drowse_spawn through drowse-spawner", emulated_exe(spawner_prog, "helper-spawner"));
        test_through_helper("drowse_spawn through this program as the helper", emulated_exe(self_exe, "helper-self"));
    } else {
        test_through_helper("drowse_spawn through drowse-spawner", spawner_prog);
        test_through_helper("drowse_spawn through this program as the helper", self_exe);
    }

    /* 6. What drowsed.service gets from systemd: clone3 refused, the cgroup.procs fallback. */
    test_clone3_refused();

    cleanup();
    check(!cg_path[0] || access(cg_path, F_OK) != 0, "the cgroup leaf is empty and removed afterwards", "%s is still there", cg_path);
    printf("%d skipped (each says why above)\n", skipped);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
