/* The durable floor of deploy/bench-notifications.sh's burst: the least a consumer must do to
 * give each notification what drowsed gives it, written directly in C with nothing else.
 *
 *   bench-floor DB CGROUPS MAX HANDLER OUT  < lines "TOPIC PAYLOAD" (mosquitto_sub -v)
 *
 * For each notification:
 *   - its record is committed to DB (SQLite, WAL, synchronous=FULL) before its handler starts;
 *     the records that arrived together are committed together;
 *   - its handler (HANDLER OUT, the payload on its standard input, its standard output and error
 *     read through a pipe) starts in the app's cgroup leaf CGROUPS/<app> with
 *     clone3(CLONE_INTO_CGROUP), at most MAX at once (CGROUPS "-": no cgroup);
 *   - its end (exit status) is committed to DB, the ends that came together committed together.
 * One thread on one epoll (standard input, a pidfd per handler, its output pipe) and one writer
 * thread that commits whatever the loop handed it since its last commit, in one transaction, as
 * drowsed's journal does: the loop never waits for a sync, only a record's own handler does.
 * No /proc walks, no timers, nothing logged.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif
#ifndef P_PIDFD
#define P_PIDFD 3
#endif

#define MAX_APPS 256
#define QUEUE 65536

static sqlite3 *db;
static sqlite3_stmt *ins_note, *ins_end;
static const char *cgroups, *handler, *out;
static int max_running, running, ep;

/* Handed from the loop to the writer: records (status < 0) and ends. */
struct row { int64_t id; int status; int app; char *payload; size_t len; };
static struct row *rows;
static size_t n_rows, cap_rows;
static pthread_mutex_t rows_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t rows_cond = PTHREAD_COND_INITIALIZER;
static int64_t durable_id; /* records up to this id are committed (under rows_lock) */
static int writing;        /* the writer has rows it has not committed yet (under rows_lock) */
static int durable_fd;     /* eventfd: the writer committed */

static struct { char name[128]; int fd; } apps[MAX_APPS];
static int n_apps;

struct note { int64_t id; int app; char *payload; size_t len; };
static struct note queue[QUEUE];
static size_t q_head, q_tail;
static int64_t next_id = 1;

enum kind { K_STDIN, K_PIDFD, K_PIPE, K_DURABLE };
struct watch { enum kind kind; int fd; int64_t id; };

static void die(const char *what) {
    fprintf(stderr, "bench-floor: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void die_sql(const char *what) {
    fprintf(stderr, "bench-floor: %s: %s\n", what, sqlite3_errmsg(db));
    exit(1);
}

static void exec_sql(const char *sql) {
    if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK) die_sql(sql);
}

static void hand(struct row r) {
    pthread_mutex_lock(&rows_lock);
    if (n_rows == cap_rows) {
        cap_rows = cap_rows ? cap_rows * 2 : 1024;
        rows = realloc(rows, cap_rows * sizeof *rows);
        if (!rows) die("realloc");
    }
    rows[n_rows++] = r;
    pthread_cond_signal(&rows_cond);
    pthread_mutex_unlock(&rows_lock);
}

/* The writer: takes every row handed over so far, commits them in one transaction, says so. */
static void *writer(void *unused) {
    (void)unused;
    struct row *batch = NULL;
    size_t cap = 0;
    for (;;) {
        pthread_mutex_lock(&rows_lock);
        while (n_rows == 0) pthread_cond_wait(&rows_cond, &rows_lock);
        struct row *t = rows; rows = batch; batch = t;
        size_t n = n_rows, c = cap_rows; cap_rows = cap; cap = c;
        n_rows = 0;
        writing = 1;
        pthread_mutex_unlock(&rows_lock);
        int64_t last = 0;
        exec_sql("BEGIN");
        for (size_t i = 0; i < n; i++) {
            struct row *r = &batch[i];
            if (r->status < 0) {
                sqlite3_bind_int64(ins_note, 1, r->id);
                sqlite3_bind_text(ins_note, 2, apps[r->app].name, -1, SQLITE_STATIC);
                sqlite3_bind_blob(ins_note, 3, r->payload, (int)r->len, SQLITE_STATIC);
                if (sqlite3_step(ins_note) != SQLITE_DONE) die_sql("insert notification");
                sqlite3_reset(ins_note);
                last = r->id;
            } else {
                sqlite3_bind_int64(ins_end, 1, r->id);
                sqlite3_bind_int(ins_end, 2, r->status);
                if (sqlite3_step(ins_end) != SQLITE_DONE) die_sql("insert end");
                sqlite3_reset(ins_end);
            }
        }
        exec_sql("COMMIT");
        pthread_mutex_lock(&rows_lock);
        writing = 0;
        if (last) durable_id = last;
        pthread_cond_broadcast(&rows_cond);
        pthread_mutex_unlock(&rows_lock);
        if (last) {
            uint64_t one = 1;
            if (write(durable_fd, &one, sizeof one) != sizeof one) die("eventfd");
        }
    }
    return NULL;
}

static int app_index(const char *name, size_t len) {
    for (int i = 0; i < n_apps; i++)
        if (strlen(apps[i].name) == len && memcmp(apps[i].name, name, len) == 0) return i;
    if (n_apps == MAX_APPS || len >= sizeof apps[0].name) { errno = E2BIG; die("too many apps"); }
    memcpy(apps[n_apps].name, name, len);
    apps[n_apps].name[len] = 0;
    apps[n_apps].fd = -1;
    if (strcmp(cgroups, "-") != 0) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", cgroups, apps[n_apps].name);
        if (mkdir(path, 0755) != 0 && errno != EEXIST) die(path);
        apps[n_apps].fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (apps[n_apps].fd < 0) die(path);
    }
    return n_apps++;
}

static void watch(enum kind kind, int fd, int64_t id) {
    struct watch *w = malloc(sizeof *w);
    if (!w) die("malloc");
    *w = (struct watch){ kind, fd, id };
    struct epoll_event ev = { .events = EPOLLIN, .data.ptr = w };
    if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) die("epoll_ctl");
}

/* Out of the epoll set before the close: a child between its clone and its exec holds a copy of
   the fd, which would keep the registration (and its events) alive. */
static void unwatch(struct watch *w) {
    epoll_ctl(ep, EPOLL_CTL_DEL, w->fd, NULL);
    close(w->fd);
    free(w);
}

/* One line "TOPIC PAYLOAD": the app is the topic's level before "/notify". */
static void received(char *line, size_t len) {
    char *sp = memchr(line, ' ', len);
    if (!sp) return;
    char *end = sp, *start;
    if (end - line > 7 && memcmp(end - 7, "/notify", 7) == 0) end -= 7;
    for (start = end; start > line && start[-1] != '/'; start--) {}
    int app = app_index(start, (size_t)(end - start));
    const char *payload = sp + 1;
    size_t plen = len - (size_t)(payload - line);
    if ((q_tail + 1) % QUEUE == q_head) { errno = ENOBUFS; die("queue full"); }
    char *copy = malloc(plen ? plen : 1);
    if (!copy) die("malloc");
    memcpy(copy, payload, plen);
    queue[q_tail] = (struct note){ next_id, app, copy, plen };
    hand((struct row){ next_id, -1, app, copy, plen });
    next_id++;
    q_tail = (q_tail + 1) % QUEUE;
}

static void start(struct note *n) {
    int in[2], outp[2], pidfd = -1;
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(outp, O_CLOEXEC) != 0) die("pipe2");
    struct clone_args ca;
    memset(&ca, 0, sizeof ca);
    ca.flags = CLONE_PIDFD;
    ca.pidfd = (uint64_t)(uintptr_t)&pidfd;
    ca.exit_signal = SIGCHLD;
    if (apps[n->app].fd >= 0) {
        ca.flags |= CLONE_INTO_CGROUP;
        ca.cgroup = (uint64_t)apps[n->app].fd;
    }
    long pid = syscall(SYS_clone3, &ca, sizeof ca);
    if (pid < 0) die("clone3");
    if (pid == 0) {
        dup2(in[0], 0);
        dup2(outp[1], 1);
        dup2(outp[1], 2);
        char *argv[] = { (char *)handler, (char *)out, NULL };
        execv(handler, argv);
        _exit(127);
    }
    close(in[0]);
    close(outp[1]);
    /* A payload fits a pipe's buffer (64 KiB): the write does not block. */
    if (write(in[1], n->payload, n->len) != (ssize_t)n->len) die("write payload");
    close(in[1]);
    free(n->payload);
    running++;
    watch(K_PIDFD, pidfd, n->id);
    watch(K_PIPE, outp[0], n->id);
}

static void ended(struct watch *w) {
    siginfo_t si;
    memset(&si, 0, sizeof si);
    if (waitid((idtype_t)P_PIDFD, (id_t)w->fd, &si, WEXITED) != 0) die("waitid");
    hand((struct row){ w->id, si.si_code == CLD_EXITED ? si.si_status : 128 + si.si_status, 0, NULL, 0 });
    running--;
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: bench-floor DB CGROUPS MAX HANDLER OUT\n");
        return 2;
    }
    cgroups = argv[2];
    max_running = atoi(argv[3]);
    handler = argv[4];
    out = argv[5];
    if (max_running < 1) max_running = 1;
    signal(SIGPIPE, SIG_IGN);
    if (sqlite3_open(argv[1], &db) != SQLITE_OK) die_sql(argv[1]);
    exec_sql("PRAGMA journal_mode=WAL");
    exec_sql("PRAGMA synchronous=FULL");
    exec_sql("CREATE TABLE IF NOT EXISTS notifications(id INTEGER PRIMARY KEY, app TEXT NOT NULL, payload BLOB NOT NULL, "
             "received REAL NOT NULL DEFAULT (((julianday('now') - 2440587.5) * 86400.0)), status INTEGER, ended REAL)");
    if (sqlite3_prepare_v2(db, "INSERT INTO notifications(id, app, payload) VALUES (?, ?, ?)", -1, &ins_note, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, "UPDATE notifications SET status = ?2, ended = ((julianday('now') - 2440587.5) * 86400.0) WHERE id = ?1", -1, &ins_end, NULL) != SQLITE_OK)
        die_sql("prepare");
    ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) die("epoll_create1");
    fcntl(0, F_SETFL, fcntl(0, F_GETFL) | O_NONBLOCK);
    watch(K_STDIN, 0, 0);
    durable_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (durable_fd < 0) die("eventfd");
    watch(K_DURABLE, durable_fd, 0);
    pthread_t w;
    if (pthread_create(&w, NULL, writer, NULL) != 0) die("pthread_create");

    static char buf[1 << 20];
    size_t have = 0;
    int input_open = 1;
    while (input_open || running > 0 || q_head != q_tail) {
        struct epoll_event evs[64];
        int n = epoll_wait(ep, evs, 64, -1);
        if (n < 0) {
            if (errno == EINTR) continue;
            die("epoll_wait");
        }
        for (int i = 0; i < n; i++) {
            struct watch *w = evs[i].data.ptr;
            if (w->kind == K_STDIN) {
                for (;;) {
                    ssize_t r = read(0, buf + have, sizeof buf - have);
                    if (r == 0) { input_open = 0; epoll_ctl(ep, EPOLL_CTL_DEL, 0, NULL); break; }
                    if (r < 0) { if (errno == EINTR) continue; if (errno == EAGAIN) break; die("read"); }
                    have += (size_t)r;
                    char *p = buf, *nl;
                    while ((nl = memchr(p, '\n', have - (size_t)(p - buf)))) {
                        received(p, (size_t)(nl - p));
                        p = nl + 1;
                    }
                    have -= (size_t)(p - buf);
                    memmove(buf, p, have);
                    if (have == sizeof buf) have = 0; /* a line longer than the buffer: dropped */
                }
            } else if (w->kind == K_DURABLE) {
                uint64_t count;
                if (read(durable_fd, &count, sizeof count) < 0 && errno != EAGAIN) die("eventfd");
            } else if (w->kind == K_PIPE) {
                char sink[4096];
                ssize_t r = read(w->fd, sink, sizeof sink);
                if (r <= 0 && !(r < 0 && (errno == EINTR || errno == EAGAIN))) {
                    unwatch(w);
                }
            } else {
                ended(w);
                unwatch(w);
            }
        }
        /* A handler starts once its record is durable (in order: ids only grow). */
        pthread_mutex_lock(&rows_lock);
        int64_t durable = durable_id;
        pthread_mutex_unlock(&rows_lock);
        while (running < max_running && q_head != q_tail && queue[q_head].id <= durable) {
            start(&queue[q_head]);
            q_head = (q_head + 1) % QUEUE;
        }
    }
    /* The last ends: handed over; the writer commits them before the process exits. */
    pthread_mutex_lock(&rows_lock);
    while (n_rows > 0 || writing) pthread_cond_wait(&rows_cond, &rows_lock);
    pthread_mutex_unlock(&rows_lock);
    return 0;
}
