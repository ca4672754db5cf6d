#define _GNU_SOURCE
#include "CMQTTGate.h"
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* A PUBLISH's fixed header (5) and variable header (topic length 2, topic up to 65535,
   packet id 2, and over MQTT 5 up to 8 KiB of properties) fit whole, so a cut PUBLISH can be
   rewritten in place. */
#define GATE_CAPACITY (5 + 2 + 65535 + 2 + 8192)
#define GATE_OVERSIZED_MAX 64

struct drowse_mqtt_gate {
    uint32_t bound;
    /* buf[head, ready_end): bytes for libmosquitto; buf[ready_end, len): read, not yet judged. */
    size_t head, ready_end, len;
    /* Bytes of the current packet still to hand over unchanged, or to drop. */
    uint64_t pass, discard;
    int failed;
    /* MQTT 5: a PUBLISH's variable header ends with its properties (kept whole by a cut). */
    int v5;
    uint64_t publishes;
    struct { uint64_t ordinal, bytes; } oversized[GATE_OVERSIZED_MAX];
    int noversized;
    /* The DUP flag of the last GATE_DUP_RING PUBLISHes (QoS 0 and 1), by ordinal. */
    uint8_t dup[1024];
    uint64_t cut, refused;
    uint8_t buf[GATE_CAPACITY];
};

static _Thread_local struct { drowse_mqtt_gate *g; int fd; int tls; } current = { NULL, -1, 0 };

drowse_mqtt_gate *drowse_mqtt_gate_new(uint32_t max_remaining) {
    drowse_mqtt_gate *g = calloc(1, sizeof *g);
    if (g) g->bound = max_remaining;
    return g;
}

void drowse_mqtt_gate_free(drowse_mqtt_gate *g) { free(g); }

void drowse_mqtt_gate_reset(drowse_mqtt_gate *g) {
    g->head = g->ready_end = g->len = 0;
    g->pass = g->discard = 0;
    g->failed = 0;
    g->publishes = 0;
    g->noversized = 0;
}

void drowse_mqtt_gate_set_v5(drowse_mqtt_gate *g, int v5) { g->v5 = v5 != 0; }

void drowse_mqtt_gate_enter(drowse_mqtt_gate *g, int fd, int tls) {
    current.g = g;
    current.fd = fd;
    current.tls = tls;
}

void drowse_mqtt_gate_leave(void) {
    current.g = NULL;
    current.fd = -1;
}

size_t drowse_mqtt_gate_ready(const drowse_mqtt_gate *g) { return g->ready_end - g->head; }

uint64_t drowse_mqtt_gate_cut_count(const drowse_mqtt_gate *g) { return g->cut; }
uint64_t drowse_mqtt_gate_refused_count(const drowse_mqtt_gate *g) { return g->refused; }

int drowse_mqtt_gate_take_oversized(drowse_mqtt_gate *g, uint64_t ordinal, uint64_t *bytes) {
    for (int i = 0; i < g->noversized; i++) {
        if (g->oversized[i].ordinal != ordinal) continue;
        *bytes = g->oversized[i].bytes;
        memmove(&g->oversized[i], &g->oversized[i + 1], (size_t)(g->noversized - i - 1) * sizeof g->oversized[0]);
        g->noversized--;
        return 1;
    }
    return 0;
}

int drowse_mqtt_gate_dup(const drowse_mqtt_gate *g, uint64_t ordinal) {
    if (ordinal == 0 || ordinal > g->publishes || g->publishes - ordinal >= sizeof g->dup) return 0;
    return g->dup[ordinal % sizeof g->dup];
}

static size_t encode_length(uint32_t n, uint8_t out[4]) {
    size_t i = 0;
    do {
        uint8_t b = n % 128;
        n /= 128;
        out[i++] = n ? (uint8_t)(b | 128) : b;
    } while (n && i < 4);
    return i;
}

static void fail(drowse_mqtt_gate *g) {
    g->failed = 1;
    g->refused++;
    g->len = g->ready_end;
}

/* Judges the bytes read but not yet judged, packet by packet. */
static void judge(drowse_mqtt_gate *g) {
    while (!g->failed && g->ready_end < g->len) {
        size_t raw = g->len - g->ready_end;
        uint8_t *p = g->buf + g->ready_end;
        if (g->pass) {
            size_t n = g->pass < raw ? (size_t)g->pass : raw;
            g->ready_end += n;
            g->pass -= n;
            continue;
        }
        if (g->discard) {
            size_t n = g->discard < raw ? (size_t)g->discard : raw;
            memmove(p, p + n, raw - n);
            g->len -= n;
            g->discard -= n;
            continue;
        }
        /* A fixed header: the type, then 1 to 4 bytes of remaining length. */
        uint32_t rl = 0, mult = 1;
        size_t i = 1;
        int complete = 0;
        for (; i < raw && i <= 4; i++) {
            rl += (uint32_t)(p[i] & 127) * mult;
            mult *= 128;
            if (!(p[i] & 128)) { complete = 1; break; }
        }
        if (!complete) {
            if (i > 4) fail(g); /* a fifth length byte: not MQTT */
            return;
        }
        size_t header = i + 1;
        int publish = (p[0] >> 4) == 3;
        int qos = (p[0] >> 1) & 3;
        if (rl <= g->bound) {
            /* Counted as libmosquitto delivers them: at once for QoS 0 and 1 (the session
               subscribes with QoS 1, so a broker sends nothing higher). */
            if (publish && qos < 2) {
                g->publishes++;
                g->dup[g->publishes % sizeof g->dup] = (p[0] >> 3) & 1;
            }
            g->pass = header + (uint64_t)rl;
            continue;
        }
        if (!publish || qos > 1) { fail(g); return; }
        /* An oversized PUBLISH: keep its variable header, drop its payload. */
        if (raw < header + 2) return;
        size_t topic = ((size_t)p[header] << 8) | p[header + 1];
        size_t variable = 2 + topic + (qos ? 2 : 0);
        if (g->v5) {
            /* The property length (1 to 4 bytes), then the properties. */
            size_t at = header + variable, props = 0, k = 0, m = 1;
            for (;; k++) {
                if (k == 4) { fail(g); return; }
                if (raw < at + k + 1) return;
                props += (size_t)(p[at + k] & 127) * m;
                m *= 128;
                if (!(p[at + k] & 128)) break;
            }
            variable += k + 1 + props;
        }
        if (variable > rl || header + variable > GATE_CAPACITY) { fail(g); return; }
        if (raw < header + variable) return;
        uint8_t length[4];
        size_t ln = encode_length((uint32_t)variable, length);
        memmove(p + 1 + ln, p + header, raw - header);
        memcpy(p + 1, length, ln);
        g->len -= header - (1 + ln);
        g->ready_end += 1 + ln + variable;
        g->discard = rl - variable;
        g->publishes++;
        g->dup[g->publishes % sizeof g->dup] = (p[0] >> 3) & 1;
        g->cut++;
        if (g->noversized == GATE_OVERSIZED_MAX) {
            memmove(&g->oversized[0], &g->oversized[1], (GATE_OVERSIZED_MAX - 1) * sizeof g->oversized[0]);
            g->noversized--;
        }
        g->oversized[g->noversized].ordinal = g->publishes;
        g->oversized[g->noversized].bytes = rl - variable;
        g->noversized++;
    }
}

/* Serves libmosquitto from the gate; reads the source when nothing judged is left. A result of
   0 or less is always the source's own (so its errno, or the TLS library's error state, fits). */
static ssize_t gate_read(drowse_mqtt_gate *g, void *dst, size_t count, ssize_t (*source)(void *, void *, size_t), void *ctx) {
    for (;;) {
        size_t ready = g->ready_end - g->head;
        if (ready) {
            size_t n = ready < count ? ready : count;
            memcpy(dst, g->buf + g->head, n);
            g->head += n;
            return (ssize_t)n;
        }
        if (g->failed) {
            errno = EPROTO;
            return -1;
        }
        if (g->head) {
            memmove(g->buf, g->buf + g->head, g->len - g->head);
            g->len -= g->head;
            g->ready_end -= g->head;
            g->head = 0;
        }
        ssize_t r = source(ctx, g->buf + g->len, GATE_CAPACITY - g->len);
        if (r <= 0) return r;
        g->len += (size_t)r;
        judge(g);
    }
}

static ssize_t plain_source(void *ctx, void *buf, size_t n) {
    return syscall(SYS_read, *(int *)ctx, buf, n);
}

/* Every read(2) of the process passes here; only the session's socket, on the session's
   thread inside a libmosquitto read, is judged. */
ssize_t read(int fd, void *buf, size_t count) {
    drowse_mqtt_gate *g = current.g;
    if (g && !current.tls && fd == current.fd) return gate_read(g, buf, count, plain_source, &fd);
    return syscall(SYS_read, fd, buf, count);
}

int SSL_read(void *ssl, void *buf, int num);

int drowse_mqtt_gate_bound(void) {
    /* What a library's call of read or SSL_read resolves to (the global scope, executable first). */
    void *r = dlsym(RTLD_DEFAULT, "read");
    void *s = dlsym(RTLD_DEFAULT, "SSL_read");
    return r == (void *)read && (s == NULL || s == (void *)SSL_read);
}

typedef int (*ssl_read_fn)(void *, void *, int);

static ssl_read_fn real_ssl_read(void) {
    static ssl_read_fn fn;
    ssl_read_fn f = __atomic_load_n(&fn, __ATOMIC_ACQUIRE);
    if (!f) {
        f = (ssl_read_fn)dlsym(RTLD_NEXT, "SSL_read");
        __atomic_store_n(&fn, f, __ATOMIC_RELEASE);
    }
    return f;
}

struct ssl_ctx { void *ssl; };

static ssize_t tls_source(void *ctx, void *buf, size_t n) {
    ssl_read_fn f = real_ssl_read();
    if (!f) { errno = ENOSYS; return -1; }
    return f(((struct ssl_ctx *)ctx)->ssl, buf, n > 0x7fffffff ? 0x7fffffff : (int)n);
}

int SSL_read(void *ssl, void *buf, int num) {
    drowse_mqtt_gate *g = current.g;
    if (g && current.tls) {
        struct ssl_ctx c = { ssl };
        return (int)gate_read(g, buf, num < 0 ? 0 : (size_t)num, tls_source, &c);
    }
    ssl_read_fn f = real_ssl_read();
    if (!f) { errno = ENOSYS; return -1; }
    return f(ssl, buf, num);
}
