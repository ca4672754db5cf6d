#define _GNU_SOURCE
#include "CCurl.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* libcurl's soname since 7.16 (Debian's libcurl4, libcurl4t64). */
#define CCURL_SONAME "libcurl.so.4"

static struct ccurl_api api;
static const char *load_error = "libcurl was not loaded yet";
static int loaded;
static char error_text[512];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void load(void) {
    /* RTLD_NOW: a missing symbol shows here, once, not in the middle of a transfer. The handle
       stays open for the life of the process: libcurl's dependencies register thread-local
       destructors and atexit handlers that dlclose would pull out from under them. */
    void *h = dlopen(CCURL_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        snprintf(error_text, sizeof error_text, "cannot load %s: %s", CCURL_SONAME, why ? why : "unknown error");
        load_error = error_text;
        return;
    }
    struct { void **slot; const char *name; } table[] = {
        {(void **)&api.global_init, "curl_global_init"},
        {(void **)&api.version_info, "curl_version_info"},
        {(void **)&api.easy_init, "curl_easy_init"},
        {(void **)&api.easy_cleanup, "curl_easy_cleanup"},
        {(void **)&api.easy_perform, "curl_easy_perform"},
        {(void **)&api.easy_strerror, "curl_easy_strerror"},
        {(void **)&api.easy_setopt, "curl_easy_setopt"},
        {(void **)&api.easy_getinfo, "curl_easy_getinfo"},
        {(void **)&api.multi_init, "curl_multi_init"},
        {(void **)&api.multi_setopt, "curl_multi_setopt"},
        {(void **)&api.multi_add_handle, "curl_multi_add_handle"},
        {(void **)&api.multi_remove_handle, "curl_multi_remove_handle"},
        {(void **)&api.multi_perform, "curl_multi_perform"},
        {(void **)&api.multi_timeout, "curl_multi_timeout"},
        {(void **)&api.multi_poll, "curl_multi_poll"},
        {(void **)&api.multi_wait, "curl_multi_wait"},
        {(void **)&api.multi_wakeup, "curl_multi_wakeup"},
        {(void **)&api.multi_info_read, "curl_multi_info_read"},
        {(void **)&api.multi_strerror, "curl_multi_strerror"},
        {(void **)&api.slist_append, "curl_slist_append"},
        {(void **)&api.slist_free_all, "curl_slist_free_all"},
        {(void **)&api.url, "curl_url"},
        {(void **)&api.url_cleanup, "curl_url_cleanup"},
        {(void **)&api.url_set, "curl_url_set"},
        {(void **)&api.url_get, "curl_url_get"},
        {(void **)&api.free, "curl_free"},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        void *f = dlsym(h, table[i].name);
        if (!f) {
            /* multi_poll and multi_wakeup came in 7.66/7.68: older builds are refused whole,
               as linking against them would have been. */
            snprintf(error_text, sizeof error_text, "%s has no %s (libcurl 7.68 or newer is needed)", CCURL_SONAME, table[i].name);
            load_error = error_text;
            memset(&api, 0, sizeof api);
            return;
        }
        *table[i].slot = f;
    }
    load_error = NULL;
    __atomic_store_n(&loaded, 1, __ATOMIC_RELEASE);
}

const char *ccurl_load(void) {
    pthread_once(&once, load);
    return load_error;
}

int ccurl_loaded(void) {
    return __atomic_load_n(&loaded, __ATOMIC_ACQUIRE);
}

const struct ccurl_api *ccurl_fns(void) {
    pthread_once(&once, load);
    if (!loaded) {
        fprintf(stderr, "drowse: libcurl used without being loaded: %s\n", load_error);
        abort();
    }
    return &api;
}
