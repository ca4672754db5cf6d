#ifndef DROWSE_FSCREDS_H
#define DROWSE_FSCREDS_H
#include <sys/types.h>
#include <stddef.h>

/// Sets the calling thread's file-system identity (fsuid, fsgid, supplementary groups) so that
/// the kernel judges every path lookup, open, create and rename as it would for that user:
/// symlinks are followed only as far as that user could follow them. Linux keeps credentials
/// per thread; these are raw system calls, which change only the calling thread (glibc's
/// setgroups would change every thread of the daemon). Only root may call it.
/// Returns 0, or an errno value (the thread's identity is then unchanged).
int drowse_fs_become(uid_t uid, gid_t gid, const gid_t *groups, size_t ngroups);

/// Gives the calling thread back the process's own identity after drowse_fs_become.
/// Returns 0, or an errno value.
int drowse_fs_restore(void);
#endif
