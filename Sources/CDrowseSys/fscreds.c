#define _GNU_SOURCE
#include "fscreds.h"
#include <errno.h>
#include <grp.h>
#include <sys/fsuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MAX_SAVED_GROUPS 1024
static __thread gid_t saved_groups[MAX_SAVED_GROUPS];
static __thread int saved_count = -1;

/* setfsuid/setfsgid report no errors: they return the previous value. Asking with an
   invalid id (-1) changes nothing and returns the current one, which tells whether it took. */
static long current_fsuid(void) { return syscall(SYS_setfsuid, (uid_t)-1); }
static long current_fsgid(void) { return syscall(SYS_setfsgid, (gid_t)-1); }

int drowse_fs_restore(void) {
    uid_t uid = geteuid();
    gid_t gid = getegid();
    /* uid first: going back to fsuid 0 returns the file capabilities the switch dropped. */
    syscall(SYS_setfsuid, uid);
    syscall(SYS_setfsgid, gid);
    if (saved_count >= 0) {
        if (syscall(SYS_setgroups, (size_t)saved_count, saved_groups) != 0) return errno;
        saved_count = -1;
    }
    if ((uid_t)current_fsuid() != uid || (gid_t)current_fsgid() != gid) return EPERM;
    return 0;
}

int drowse_fs_become(uid_t uid, gid_t gid, const gid_t *groups, size_t ngroups) {
    int n = getgroups(MAX_SAVED_GROUPS, saved_groups);
    if (n < 0) return errno;
    saved_count = n;
    if (syscall(SYS_setgroups, ngroups, groups) != 0) {
        int e = errno;
        saved_count = -1;
        return e;
    }
    syscall(SYS_setfsgid, gid);
    syscall(SYS_setfsuid, uid);
    if ((uid_t)current_fsuid() != uid || (gid_t)current_fsgid() != gid) {
        drowse_fs_restore();
        return EPERM;
    }
    return 0;
}
