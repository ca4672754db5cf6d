/* The SSID a Wi-Fi station interface is associated with, asked of the kernel's nl80211 over
   generic netlink, on a socket of its own, each answer awaited at most 500 ms:
   1. the nl80211 family's id (CTRL_CMD_GETFAMILY);
   2. NL80211_CMD_GET_INTERFACE for the interface's index: its NL80211_ATTR_SSID, which some
      kernels give only for connections cfg80211's own SME made (`iw dev IFACE info`);
   3. else NL80211_CMD_GET_SCAN (a dump of the BSSs the interface knows): the one whose status is
      associated, and the SSID element of its information elements (`iw dev IFACE link`).
   See docs/design.md, "The adaptive keepalive": the keepalive is learned per network, and a Wi-Fi
   network is its interface and its SSID. */

#include <errno.h>
#include <linux/genetlink.h>
#include <linux/netlink.h>
#include <linux/nl80211.h>
#include <net/if.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "CDrowseSys.h"

enum { REQ_CAP = 128, ANSWER_CAP = 32768 };

struct found { unsigned char *out; size_t cap; int len; };

static void put_attr(struct nlmsghdr *n, unsigned short type, const void *data, size_t len) {
    struct nlattr *a = (struct nlattr *)((char *)n + NLMSG_ALIGN(n->nlmsg_len));
    a->nla_type = type;
    a->nla_len = (unsigned short)(NLA_HDRLEN + len);
    memcpy((char *)a + NLA_HDRLEN, data, len);
    n->nlmsg_len = NLMSG_ALIGN(n->nlmsg_len) + NLA_ALIGN(a->nla_len);
}

/* The attribute `type` among the attributes in [attrs, attrs + len); NULL when absent. */
static const struct nlattr *attr(const void *attrs, size_t len, unsigned short type) {
    const struct nlattr *a = attrs;
    while (len >= NLA_HDRLEN && a->nla_len >= NLA_HDRLEN && a->nla_len <= len) {
        if ((a->nla_type & NLA_TYPE_MASK) == type) return a;
        size_t step = NLA_ALIGN(a->nla_len);
        if (step >= len) break;
        len -= step;
        a = (const struct nlattr *)((const char *)a + step);
    }
    return NULL;
}

static const void *payload(const struct nlattr *a) { return (const char *)a + NLA_HDRLEN; }
static size_t payload_len(const struct nlattr *a) { return a->nla_len - NLA_HDRLEN; }

static void keep(struct found *f, const void *data, size_t len) {
    if (len > f->cap) len = f->cap;
    memcpy(f->out, data, len);
    f->len = (int)len;
}

/* Sends the request and hands the attributes of each answer message to `each`, until one
   answer (a plain request) or the dump's end, or until `each` returns non-zero. Returns 0, or
   -errno (the kernel's error included, -ETIMEDOUT when nothing came within 500 ms). */
static int exchange(int fd, struct nlmsghdr *req, char *answer, int (*each)(const void *attrs, size_t len, struct found *),
                    struct found *f) {
    if (send(fd, req, req->nlmsg_len, 0) < 0) return -errno;
    int dump = (req->nlmsg_flags & NLM_F_DUMP) != 0;
    for (;;) {
        ssize_t got = recv(fd, answer, ANSWER_CAP, 0);
        if (got < 0) return errno == EAGAIN || errno == EWOULDBLOCK ? -ETIMEDOUT : -errno;
        int left = (int)got;
        for (struct nlmsghdr *n = (struct nlmsghdr *)answer; NLMSG_OK(n, left); n = NLMSG_NEXT(n, left)) {
            if (n->nlmsg_seq != req->nlmsg_seq) continue;
            if (n->nlmsg_type == NLMSG_ERROR) {
                const struct nlmsgerr *e = NLMSG_DATA(n);
                return e->error;
            }
            if (n->nlmsg_type == NLMSG_DONE) return 0;
            if (n->nlmsg_len < NLMSG_LENGTH(GENL_HDRLEN)) return -EPROTO;
            if (each((char *)NLMSG_DATA(n) + GENL_HDRLEN, n->nlmsg_len - NLMSG_LENGTH(GENL_HDRLEN), f)) return 0;
            if (!dump) return 0;
        }
    }
}

static void start(struct nlmsghdr *n, unsigned short type, unsigned short flags, unsigned seq, unsigned char cmd) {
    memset(n, 0, REQ_CAP);
    n->nlmsg_len = NLMSG_LENGTH(GENL_HDRLEN);
    n->nlmsg_type = type;
    n->nlmsg_flags = NLM_F_REQUEST | flags;
    n->nlmsg_seq = seq;
    struct genlmsghdr *g = NLMSG_DATA(n);
    g->cmd = cmd;
    g->version = 1;
}

static int family_id(const void *attrs, size_t len, struct found *f) {
    const struct nlattr *a = attr(attrs, len, CTRL_ATTR_FAMILY_ID);
    if (a && payload_len(a) == sizeof(uint16_t)) keep(f, payload(a), sizeof(uint16_t));
    return 1;
}

static int interface_ssid(const void *attrs, size_t len, struct found *f) {
    const struct nlattr *a = attr(attrs, len, NL80211_ATTR_SSID);
    if (a && payload_len(a) > 0) keep(f, payload(a), payload_len(a));
    return 1;
}

static int associated_bss_ssid(const void *attrs, size_t len, struct found *f) {
    const struct nlattr *bss = attr(attrs, len, NL80211_ATTR_BSS);
    if (!bss) return 0;
    const struct nlattr *status = attr(payload(bss), payload_len(bss), NL80211_BSS_STATUS);
    if (!status || payload_len(status) != sizeof(uint32_t)) return 0;
    uint32_t st;
    memcpy(&st, payload(status), sizeof st);
    if (st != NL80211_BSS_STATUS_ASSOCIATED && st != NL80211_BSS_STATUS_IBSS_JOINED) return 0;
    const struct nlattr *ies = attr(payload(bss), payload_len(bss), NL80211_BSS_INFORMATION_ELEMENTS);
    if (!ies) return 1;
    /* Information elements: an id byte, a length byte, the data; the SSID is element 0. */
    const unsigned char *p = payload(ies);
    size_t left = payload_len(ies);
    while (left >= 2 && (size_t)p[1] + 2 <= left) {
        if (p[0] == 0) {
            if (p[1] > 0) keep(f, p + 2, p[1]);
            return 1;
        }
        left -= (size_t)p[1] + 2;
        p += (size_t)p[1] + 2;
    }
    return 1;
}

int drowse_wifi_ssid(const char *ifname, unsigned char *out, size_t cap) {
    unsigned int ifindex = if_nametoindex(ifname);
    if (ifindex == 0) return -errno;
    int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_GENERIC);
    if (fd < 0) return -errno;
    struct timeval tv = {.tv_sec = 0, .tv_usec = 500000};
    int rc;
    if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0) {
        rc = -errno;
        close(fd);
        return rc;
    }
    char buf[REQ_CAP] __attribute__((aligned(NLMSG_ALIGNTO)));
    struct nlmsghdr *req = (struct nlmsghdr *)buf;
    /* The answers' buffer lives only for this call (malloc's alignment suits netlink's 4 bytes):
       a thread-local one would cost every thread of drowsed its size. */
    char *answer = malloc(ANSWER_CAP);
    if (!answer) { close(fd); return -ENOMEM; }

    /* The nl80211 family: none without a Wi-Fi driver (cfg80211) loaded. */
    uint16_t family = 0;
    struct found f = { (unsigned char *)&family, sizeof family, 0 };
    start(req, GENL_ID_CTRL, 0, 1, CTRL_CMD_GETFAMILY);
    put_attr(req, CTRL_ATTR_FAMILY_NAME, NL80211_GENL_NAME, sizeof NL80211_GENL_NAME);
    rc = exchange(fd, req, answer, family_id, &f);
    if (rc == -ENOENT || (rc == 0 && f.len != (int)sizeof family)) rc = -ENOTSUP;
    if (rc < 0) { free(answer); close(fd); return rc; }

    /* The interface's own record (-ENODEV: not a Wi-Fi interface). */
    f = (struct found){ out, cap, 0 };
    start(req, family, 0, 2, NL80211_CMD_GET_INTERFACE);
    put_attr(req, NL80211_ATTR_IFINDEX, &ifindex, sizeof ifindex);
    rc = exchange(fd, req, answer, interface_ssid, &f);
    if (rc == 0 && f.len == 0) {
        /* The BSS it is associated with. */
        start(req, family, NLM_F_DUMP, 3, NL80211_CMD_GET_SCAN);
        put_attr(req, NL80211_ATTR_IFINDEX, &ifindex, sizeof ifindex);
        rc = exchange(fd, req, answer, associated_bss_ssid, &f);
    }
    free(answer);
    close(fd);
    return rc < 0 ? rc : f.len;
}
