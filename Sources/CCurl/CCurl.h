#ifndef DROWSE_CCURL_H
#define DROWSE_CCURL_H
#include <curl/curl.h>

/* curl_easy_setopt and friends are variadic, which Swift cannot call. One typed
   wrapper per argument kind keeps every call site type-checked. */
static inline CURLcode ccurl_setopt_long(CURL *h, CURLoption o, long v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode ccurl_setopt_off(CURL *h, CURLoption o, curl_off_t v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode ccurl_setopt_ptr(CURL *h, CURLoption o, const void *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode ccurl_setopt_str(CURL *h, CURLoption o, const char *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode ccurl_setopt_slist(CURL *h, CURLoption o, struct curl_slist *v) { return curl_easy_setopt(h, o, v); }

typedef size_t (*ccurl_data_cb)(char *ptr, size_t size, size_t nmemb, void *userdata);
typedef int (*ccurl_xferinfo_cb)(void *userdata, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow);
typedef int (*ccurl_seek_cb)(void *userdata, curl_off_t offset, int origin);
static inline CURLcode ccurl_setopt_data_cb(CURL *h, CURLoption o, ccurl_data_cb v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode ccurl_setopt_xferinfo_cb(CURL *h, ccurl_xferinfo_cb v) { return curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, v); }
static inline CURLcode ccurl_setopt_seek_cb(CURL *h, ccurl_seek_cb v) { return curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, v); }

static inline CURLcode ccurl_getinfo_long(CURL *h, CURLINFO i, long *v) { return curl_easy_getinfo(h, i, v); }
static inline CURLcode ccurl_getinfo_off(CURL *h, CURLINFO i, curl_off_t *v) { return curl_easy_getinfo(h, i, v); }
static inline CURLcode ccurl_getinfo_str(CURL *h, CURLINFO i, char **v) { return curl_easy_getinfo(h, i, v); }
static inline CURLcode ccurl_getinfo_ptr(CURL *h, CURLINFO i, void **v) { return curl_easy_getinfo(h, i, v); }

static inline CURLMcode ccurl_multi_setopt_long(CURLM *m, CURLMoption o, long v) { return curl_multi_setopt(m, o, v); }

/* Restricting protocols. CURLOPT_PROTOCOLS_STR and CURLOPT_REDIR_PROTOCOLS_STR exist from
   libcurl 7.85; built against older headers, their numbers are given here, and at run time an
   older libcurl refuses them (CURLE_UNKNOWN_OPTION), so the engine falls back to the bitmask
   options, which 7.85 deprecated but still honours. */
#if LIBCURL_VERSION_NUM < 0x075500
#define CURLOPT_PROTOCOLS_STR ((CURLoption)(CURLOPTTYPE_STRINGPOINT + 318))
#define CURLOPT_REDIR_PROTOCOLS_STR ((CURLoption)(CURLOPTTYPE_STRINGPOINT + 319))
#endif
static inline CURLcode ccurl_setopt_protocols_str(CURL *h, const char *v) { return curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, v); }
static inline CURLcode ccurl_setopt_redir_protocols_str(CURL *h, const char *v) { return curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, v); }
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
/* http and https only, as the bitmask. */
static inline long ccurl_proto_http_https(void) { return (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS); }
static inline CURLcode ccurl_setopt_protocols_mask(CURL *h, long v) { return curl_easy_setopt(h, CURLOPT_PROTOCOLS, v); }
static inline CURLcode ccurl_setopt_redir_protocols_mask(CURL *h, long v) { return curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS, v); }
#pragma GCC diagnostic pop

/* The libcurl actually loaded (not the headers built against): 0xXXYYZZ, and as text. */
static inline unsigned int ccurl_version_num(void) { return curl_version_info(CURLVERSION_NOW)->version_num; }
static inline const char *ccurl_version_str(void) { return curl_version_info(CURLVERSION_NOW)->version; }

/* CURLMsg has a union Swift imports awkwardly. */
static inline CURLcode ccurl_msg_result(CURLMsg *m) { return m->data.result; }

#endif
