/* The SSID a Wi-Fi station interface is associated with, asked of the kernel's nl80211 over
   generic netlink: what `iw dev IFACE info` prints as "ssid". Two request-answer exchanges on a
   socket of their own (the nl80211 family's id, then NL80211_CMD_GET_INTERFACE for the interface's
   index), each answer awaited at most 500 ms. See docs/design.md, "The adaptive keepalive": the
   keepalive is learned per network, and a Wi-Fi network is its interface and its SSID. */

#include <errno.h>
#include <linux/genetlink.h>
#include <linux/netlink.h>
#include <linux/nl80211.h>
#include <net/if.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "CDrowseSys.h"

enum { REQ_CAP = 128, ANSWER_CAP = 8192 };

static void put_attr(struct nlmsghdr *n, unsigned short type, const void *data, size_t len) {
    struct nlattr *a = (struct nlattr *)((char *)n + NLMSG_ALIGN(n->nlmsg_len));
    a->nla_type = type;
    a->nla_len = (unsigned short)(NLA_HDRLEN + len);
    memcpy((char *)a + NLA_HDRLEN, data, len);
    n->nlmsg_len = NLMSG_ALIGN(n->nlmsg_len) + NLA_ALIGN(a->nla_len);
}

/* Sends the request and copies attribute `want` of the answer (a generic netlink message) into
   out. Returns its length, 0 when the answer lacks it, or -errno (the kernel's error included). */
static int ask(int fd, struct nlmsghdr *req, unsigned short want, void *out, size_t cap) {
    if (send(fd, req, req->nlmsg_len, 0) < 0) return -errno;
    static __thread char answer[ANSWER_CAP] __attribute__((aligned(NLMSG_ALIGNTO)));
    for (;;) {
        ssize_t got = recv(fd, answer, sizeof answer, 0);
        if (got < 0) return errno == EAGAIN ? -ETIMEDOUT : -errno;
        size_t left = (size_t)got;
        for (struct nlmsghdr *n = (struct nlmsghdr *)answer; NLMSG_OK(n, left); n = NLMSG_NEXT(n, left)) {
            if (n->nlmsg_seq != req->nlmsg_seq) continue;
            if (n->nlmsg_type == NLMSG_ERROR) {
                const struct nlmsgerr *e = NLMSG_DATA(n);
                return e->error < 0 ? e->error : -EPROTO;
            }
            if (n->nlmsg_type == NLMSG_DONE) return 0;
            if (n->nlmsg_len < NLMSG_LENGTH(GENL_HDRLEN)) return -EPROTO;
            size_t alen = n->nlmsg_len - NLMSG_LENGTH(GENL_HDRLEN);
            struct nlattr *a = (struct nlattr *)((char *)NLMSG_DATA(n) + GENL_HDRLEN);
            while (alen >= NLA_HDRLEN && a->nla_len >= NLA_HDRLEN && a->nla_len <= alen) {
                if ((a->nla_type & NLA_TYPE_MASK) == want) {
                    size_t len = a->nla_len - NLA_HDRLEN;
                    if (len > cap) len = cap;
                    memcpy(out, (char *)a + NLA_HDRLEN, len);
                    return (int)len;
                }
                size_t step = NLA_ALIGN(a->nla_len);
                if (step > alen) break;
                alen -= step;
                a = (struct nlattr *)((char *)a + step);
            }
            return 0;
        }
    }
}

static void start(struct nlmsghdr *n, unsigned short type, unsigned seq, unsigned char cmd) {
    memset(n, 0, REQ_CAP);
    n->nlmsg_len = NLMSG_LENGTH(GENL_HDRLEN);
    n->nlmsg_type = type;
    n->nlmsg_flags = NLM_F_REQUEST;
    n->nlmsg_seq = seq;
    struct genlmsghdr *g = NLMSG_DATA(n);
    g->cmd = cmd;
    g->version = 1;
}

int drowse_wifi_ssid(const char *ifname, unsigned char *out, size_t cap) {
    unsigned ifindex = if_nametoindex(ifname);
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

    /* The nl80211 family's id: none without a Wi-Fi driver (cfg80211) loaded. */
    start(req, GENL_ID_CTRL, 1, CTRL_CMD_GETFAMILY);
    put_attr(req, CTRL_ATTR_FAMILY_NAME, NL80211_GENL_NAME, sizeof NL80211_GENL_NAME);
    unsigned short family = 0;
    rc = ask(fd, req, CTRL_ATTR_FAMILY_ID, &family, sizeof family);
    if (rc >= 0 && rc != (int)sizeof family) rc = -ENOENT;
    if (rc < 0) {
        close(fd);
        return rc == -ENOENT ? -ENOTSUP : rc;
    }

    /* The interface: its SSID while associated (a station), nothing otherwise. */
    start(req, family, 2, NL80211_CMD_GET_INTERFACE);
    unsigned int index = ifindex;
    put_attr(req, NL80211_ATTR_IFINDEX, &index, sizeof index);
    rc = ask(fd, req, NL80211_ATTR_SSID, out, cap);
    close(fd);
    return rc;
}
