#ifndef DROWSE_CCURL_H
#define DROWSE_CCURL_H
#include <curl/curl.h>

/* libcurl is loaded when the first transfer needs it, not at start: libcurl and what Debian's
   build of it pulls in (GnuTLS, Kerberos, LDAP, libssh2, RTMP, ...) are 4 MB of resident memory
   that an idle drowsed with no transfer has no use for. drowse is not linked with libcurl;
   every call goes through this table, which loader.c fills from libcurl.so.4 with dlopen. */
struct ccurl_api {
    CURLcode (*global_init)(long flags);
    curl_version_info_data *(*version_info)(CURLversion age);
    CURL *(*easy_init)(void);
    void (*easy_cleanup)(CURL *h);
    CURLcode (*easy_perform)(CURL *h);
    const char *(*easy_strerror)(CURLcode code);
    CURLcode (*easy_setopt)(CURL *h, CURLoption option, ...);
    CURLcode (*easy_getinfo)(CURL *h, CURLINFO info, ...);
    CURLM *(*multi_init)(void);
    CURLMcode (*multi_setopt)(CURLM *m, CURLMoption option, ...);
    CURLMcode (*multi_add_handle)(CURLM *m, CURL *h);
    CURLMcode (*multi_remove_handle)(CURLM *m, CURL *h);
    CURLMcode (*multi_perform)(CURLM *m, int *running);
    CURLMcode (*multi_timeout)(CURLM *m, long *ms);
    CURLMcode (*multi_poll)(CURLM *m, struct curl_waitfd *fds, unsigned int nfds, int timeout_ms, int *numfds);
    CURLMcode (*multi_wait)(CURLM *m, struct curl_waitfd *fds, unsigned int nfds, int timeout_ms, int *numfds);
    CURLMcode (*multi_wakeup)(CURLM *m);
    CURLMsg *(*multi_info_read)(CURLM *m, int *queued);
    const char *(*multi_strerror)(CURLMcode code);
    struct curl_slist *(*slist_append)(struct curl_slist *list, const char *s);
    void (*slist_free_all)(struct curl_slist *list);
    CURLU *(*url)(void);
    void (*url_cleanup)(CURLU *u);
    CURLUcode (*url_set)(CURLU *u, CURLUPart what, const char *part, unsigned int flags);
    CURLUcode (*url_get)(const CURLU *u, CURLUPart what, char **part, unsigned int flags);
    void (*free)(void *p);
};

/* Loads libcurl once (thread-safe). NULL when it is loaded, else why not (dlopen's or dlsym's
   words), the same answer on every later call. */
const char *ccurl_load(void);
/* Whether libcurl is loaded in this process (does not load it). */
int ccurl_loaded(void);
/* The table; loads libcurl first. Call it only after ccurl_load() returned NULL: without
   libcurl it aborts, naming the library, rather than call through a null pointer. */
const struct ccurl_api *ccurl_fns(void);

static inline CURLcode ccurl_global_init(long flags) { return ccurl_fns()->global_init(flags); }
static inline CURL *ccurl_easy_init(void) { return ccurl_fns()->easy_init(); }
static inline void ccurl_easy_cleanup(CURL *h) { ccurl_fns()->easy_cleanup(h); }
static inline CURLcode ccurl_easy_perform(CURL *h) { return ccurl_fns()->easy_perform(h); }
static inline const char *ccurl_easy_strerror(CURLcode c) { return ccurl_fns()->easy_strerror(c); }
static inline CURLM *ccurl_multi_init(void) { return ccurl_fns()->multi_init(); }
static inline CURLMcode ccurl_multi_add_handle(CURLM *m, CURL *h) { return ccurl_fns()->multi_add_handle(m, h); }
static inline CURLMcode ccurl_multi_remove_handle(CURLM *m, CURL *h) { return ccurl_fns()->multi_remove_handle(m, h); }
static inline CURLMcode ccurl_multi_perform(CURLM *m, int *running) { return ccurl_fns()->multi_perform(m, running); }
static inline CURLMcode ccurl_multi_timeout(CURLM *m, long *ms) { return ccurl_fns()->multi_timeout(m, ms); }
static inline CURLMcode ccurl_multi_poll(CURLM *m, struct curl_waitfd *fds, unsigned int n, int ms, int *numfds) { return ccurl_fns()->multi_poll(m, fds, n, ms, numfds); }
static inline CURLMcode ccurl_multi_wait(CURLM *m, struct curl_waitfd *fds, unsigned int n, int ms, int *numfds) { return ccurl_fns()->multi_wait(m, fds, n, ms, numfds); }
static inline CURLMcode ccurl_multi_wakeup(CURLM *m) { return ccurl_fns()->multi_wakeup(m); }
static inline CURLMsg *ccurl_multi_info_read(CURLM *m, int *queued) { return ccurl_fns()->multi_info_read(m, queued); }
static inline const char *ccurl_multi_strerror(CURLMcode c) { return ccurl_fns()->multi_strerror(c); }
static inline struct curl_slist *ccurl_slist_append(struct curl_slist *l, const char *s) { return ccurl_fns()->slist_append(l, s); }
static inline void ccurl_slist_free_all(struct curl_slist *l) { ccurl_fns()->slist_free_all(l); }
static inline CURLU *ccurl_url(void) { return ccurl_fns()->url(); }
static inline void ccurl_url_cleanup(CURLU *u) { ccurl_fns()->url_cleanup(u); }
static inline CURLUcode ccurl_url_set(CURLU *u, CURLUPart what, const char *part, unsigned int flags) { return ccurl_fns()->url_set(u, what, part, flags); }
static inline CURLUcode ccurl_url_get(const CURLU *u, CURLUPart what, char **part, unsigned int flags) { return ccurl_fns()->url_get(u, what, part, flags); }
static inline void ccurl_free(void *p) { ccurl_fns()->free(p); }

/* curl_easy_setopt and friends are variadic, which Swift cannot call. One typed
   wrapper per argument kind keeps every call site type-checked. */
static inline CURLcode ccurl_setopt_long(CURL *h, CURLoption o, long v) { return ccurl_fns()->easy_setopt(h, o, v); }
static inline CURLcode ccurl_setopt_off(CURL *h, CURLoption o, curl_off_t v) { return ccurl_fns()->easy_setopt(h, o, v); }
static inline CURLcode ccurl_setopt_ptr(CURL *h, CURLoption o, const void *v) { return ccurl_fns()->easy_setopt(h, o, v); }
static inline CURLcode ccurl_setopt_str(CURL *h, CURLoption o, const char *v) { return ccurl_fns()->easy_setopt(h, o, v); }
static inline CURLcode ccurl_setopt_slist(CURL *h, CURLoption o, struct curl_slist *v) { return ccurl_fns()->easy_setopt(h, o, v); }

typedef size_t (*ccurl_data_cb)(char *ptr, size_t size, size_t nmemb, void *userdata);
typedef int (*ccurl_xferinfo_cb)(void *userdata, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow);
typedef int (*ccurl_seek_cb)(void *userdata, curl_off_t offset, int origin);
static inline CURLcode ccurl_setopt_data_cb(CURL *h, CURLoption o, ccurl_data_cb v) { return ccurl_fns()->easy_setopt(h, o, v); }
static inline CURLcode ccurl_setopt_xferinfo_cb(CURL *h, ccurl_xferinfo_cb v) { return ccurl_fns()->easy_setopt(h, CURLOPT_XFERINFOFUNCTION, v); }
static inline CURLcode ccurl_setopt_seek_cb(CURL *h, ccurl_seek_cb v) { return ccurl_fns()->easy_setopt(h, CURLOPT_SEEKFUNCTION, v); }

static inline CURLcode ccurl_getinfo_long(CURL *h, CURLINFO i, long *v) { return ccurl_fns()->easy_getinfo(h, i, v); }
static inline CURLcode ccurl_getinfo_off(CURL *h, CURLINFO i, curl_off_t *v) { return ccurl_fns()->easy_getinfo(h, i, v); }
static inline CURLcode ccurl_getinfo_str(CURL *h, CURLINFO i, char **v) { return ccurl_fns()->easy_getinfo(h, i, v); }
static inline CURLcode ccurl_getinfo_ptr(CURL *h, CURLINFO i, void **v) { return ccurl_fns()->easy_getinfo(h, i, v); }

static inline CURLMcode ccurl_multi_setopt_long(CURLM *m, CURLMoption o, long v) { return ccurl_fns()->multi_setopt(m, o, v); }

/* Restricting protocols. CURLOPT_PROTOCOLS_STR and CURLOPT_REDIR_PROTOCOLS_STR exist from
   libcurl 7.85; built against older headers, their numbers are given here, and at run time an
   older libcurl refuses them (CURLE_UNKNOWN_OPTION), so the engine falls back to the bitmask
   options, which 7.85 deprecated but still honours. */
#if LIBCURL_VERSION_NUM < 0x075500
#define CURLOPT_PROTOCOLS_STR ((CURLoption)(CURLOPTTYPE_STRINGPOINT + 318))
#define CURLOPT_REDIR_PROTOCOLS_STR ((CURLoption)(CURLOPTTYPE_STRINGPOINT + 319))
#endif
static inline CURLcode ccurl_setopt_protocols_str(CURL *h, const char *v) { return ccurl_fns()->easy_setopt(h, CURLOPT_PROTOCOLS_STR, v); }
static inline CURLcode ccurl_setopt_redir_protocols_str(CURL *h, const char *v) { return ccurl_fns()->easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, v); }
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
/* http and https only, as the bitmask. */
static inline long ccurl_proto_http_https(void) { return (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS); }
static inline CURLcode ccurl_setopt_protocols_mask(CURL *h, long v) { return ccurl_fns()->easy_setopt(h, CURLOPT_PROTOCOLS, v); }
static inline CURLcode ccurl_setopt_redir_protocols_mask(CURL *h, long v) { return ccurl_fns()->easy_setopt(h, CURLOPT_REDIR_PROTOCOLS, v); }
#pragma GCC diagnostic pop

/* The libcurl actually loaded (not the headers built against): 0xXXYYZZ, and as text. */
static inline unsigned int ccurl_version_num(void) { return ccurl_fns()->version_info(CURLVERSION_NOW)->version_num; }
static inline const char *ccurl_version_str(void) { return ccurl_fns()->version_info(CURLVERSION_NOW)->version; }

/* CURLMsg has a union Swift imports awkwardly. */
static inline CURLcode ccurl_msg_result(CURLMsg *m) { return m->data.result; }

#endif
