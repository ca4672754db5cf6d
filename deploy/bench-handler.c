/* The handler of deploy/bench-radio.sh's apps, one process from start to exit.
 *
 * The shell handler it replaces (sh, then cat, sed, date and curl) took about 20 ms from its
 * start to its first packet, and handlers starting together ran one after another: real time that
 * compressing the scenario by K does not shrink, so at K = 144 it stretched every shared window by
 * seconds of scenario time. This one sends its SYN within about a millisecond of its exec.
 *
 *   APP fetch|notify STRATEGY OUT [PAYLOAD]
 *
 * APP is a symlink named after the app; APP.conf beside it holds "HOST PORT PATH RUNS_FILE".
 *   notify  appends "SEQ TIME APP" to OUT/starts.txt (SEQ from the payload's "seq", the payload
 *           being PAYLOAD or stdin), then GETs the file.
 *   fetch   counts its run k in OUT/count.APP, appends "TIME APP k" to OUT/runs.txt, GETs the
 *           file, sleeps the k-th line of RUNS_FILE's duration (its second field under drowse,
 *           its first under a baseline) and exits with its third field.
 * The GET is HTTP/1.1 as curl sends it; the body is read to its Content-Length, then the
 * connection closed from this side, as curl does. Everything gives up after 20 s.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static char host[64], path[256], runs_file[PATH_MAX];
static int port;

static void stamp(char *buf, size_t n) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(buf, n, "%lld.%09ld", (long long)ts.tv_sec, ts.tv_nsec);
}

static void append(const char *dir, const char *name, const char *line) {
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    int fd = open(p, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) { perror(p); return; }
    if (write(fd, line, strlen(line)) < 0) perror(p);
    close(fd);
}

static int get(void) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct timeval tv = {20, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
    if (inet_pton(AF_INET, host, &a.sin_addr) != 1 || connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        close(fd);
        return -1;
    }
    char req[512];
    int n = snprintf(req, sizeof req,
                     "GET %s HTTP/1.1\r\nHost: %s:%d\r\nUser-Agent: drowse-bench\r\nAccept: */*\r\n\r\n", path, host, port);
    if (send(fd, req, (size_t)n, MSG_NOSIGNAL) != n) { close(fd); return -1; }
    static char buf[65536];
    size_t have = 0;
    long long want = -1, got = 0;
    ssize_t r;
    while ((r = recv(fd, buf + have, sizeof buf - have - 1, 0)) > 0) {
        if (want < 0) {
            have += (size_t)r;
            buf[have] = 0;
            char *end = strstr(buf, "\r\n\r\n");
            if (!end) {
                if (have >= sizeof buf - 1) break;
                continue;
            }
            char *cl = strcasestr(buf, "\r\nContent-Length:");
            if (!cl || cl > end) break;   /* no length: read to the server's close */
            want = atoll(cl + 17);
            got = (long long)(buf + have - (end + 4));
            have = 0;
        } else {
            got += r;
        }
        if (want >= 0 && got >= want) break;
    }
    close(fd);
    return want >= 0 && got >= want ? 0 : -1;
}

int main(int argc, char **argv) {
    char t[32];
    stamp(t, sizeof t);
    if (argc < 4) {
        fprintf(stderr, "usage: APP fetch|notify STRATEGY OUT [PAYLOAD]\n");
        return 2;
    }
    const char *mode = argv[1], *strategy = argv[2], *out = argv[3];
    char self[PATH_MAX], conf[PATH_MAX + 8];
    snprintf(self, sizeof self, "%s", argv[0]);
    const char *app = basename(self);
    snprintf(conf, sizeof conf, "%s.conf", argv[0]);
    FILE *f = fopen(conf, "re");
    if (!f || fscanf(f, "%63s %d %255s %4095s", host, &port, path, runs_file) != 4) {
        fprintf(stderr, "%s: cannot read %s\n", app, conf);
        return 2;
    }
    fclose(f);
    char line[PATH_MAX + 128];
    if (strcmp(mode, "notify") == 0) {
        static char payload[65536];
        if (argc > 4) {
            snprintf(payload, sizeof payload, "%s", argv[4]);
        } else {
            size_t n = 0;
            ssize_t r;
            while (n < sizeof payload - 1 && (r = read(0, payload + n, sizeof payload - 1 - n)) > 0) n += (size_t)r;
            payload[n] = 0;
        }
        char *s = strstr(payload, "\"seq\":");
        long long seq = s ? atoll(s + 6) : -1;
        snprintf(line, sizeof line, "%lld %s %s\n", seq, t, app);
        append(out, "starts.txt", line);
        return get() == 0 ? 0 : 1;
    }
    char name[NAME_MAX + 8];
    snprintf(name, sizeof name, "count.%s", app);
    char cpath[PATH_MAX + NAME_MAX];
    snprintf(cpath, sizeof cpath, "%s/%s", out, name);
    long k = 0;
    if ((f = fopen(cpath, "re"))) {
        if (fscanf(f, "%ld", &k) != 1) k = 0;
        fclose(f);
    }
    if ((f = fopen(cpath, "we"))) {
        fprintf(f, "%ld\n", k + 1);
        fclose(f);
    }
    double d_base = 0, d_drowse = 0;
    int code = 0;
    if ((f = fopen(runs_file, "re"))) {
        long runs = 0;
        double a, b;
        int c;
        while (fscanf(f, "%lf %lf %d", &a, &b, &c) == 3) runs++;
        if (runs > 0) {
            rewind(f);
            for (long i = 0; i <= k % runs; i++)
                if (fscanf(f, "%lf %lf %d", &d_base, &d_drowse, &code) != 3) break;
        }
        fclose(f);
    }
    snprintf(line, sizeof line, "%s %s %ld\n", t, app, k);
    append(out, "runs.txt", line);
    get();
    double d = strcmp(strategy, "drowse") == 0 ? d_drowse : d_base;
    if (d > 0) {
        struct timespec ts = {(time_t)d, (long)((d - (double)(time_t)d) * 1e9)};
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {}
    }
    return code;
}
