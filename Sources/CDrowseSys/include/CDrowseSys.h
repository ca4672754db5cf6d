#ifndef DROWSE_SYS_H
#define DROWSE_SYS_H
#include "fscreds.h"
#include "drowse_spawn.h"
#include <sys/types.h>
#include <malloc.h>   /* mallopt, malloc_trim (DrowseSystem's MallocBounds); not in the Glibc module */

/// Gives back this process's resident pages of the read-only segments (code and constants) of
/// every shared library it has loaded, with MADV_DONTNEED: not the program's own, not the vDSO.
/// Those pages hold the file's bytes and were never written (a library with text relocations
/// is skipped; RELRO lies in writable segments, which are never touched), so the next use
/// faults them back from the page cache, or from the disk if the kernel reclaimed them
/// meanwhile: nothing is lost. A debugger's breakpoints in a library are. Safe from any thread
/// at any time. Returns the bytes advised (resident or not), or -1.
long drowse_release_library_code(void);

/// The same, and with `program` non-zero the program's own code and constants too.
long drowse_release_code(int program);

/// Starts `path` in a new process group with the given stdio descriptors, working
/// directory and (when `set_ids` is non-zero) user, group and supplementary groups.
/// The child is made with clone(CLONE_VM | CLONE_VFORK), as posix_spawn does (no copy of the
/// daemon's page tables), and does only raw system calls before exec, which Swift code cannot promise.
/// With `cgroup_fd` (an open cgroup directory, else -1) the child starts inside that cgroup
/// (clone3 with CLONE_INTO_CGROUP; on kernels before 5.7 it writes itself into cgroup.procs
/// before the user switch and exec).
/// Returns 0 and stores the pid, or an errno value (exec failures are reported too); then
/// `out_failed_step` (may be NULL) says which step failed, one of DROWSE_SPAWN_STEP_*.
int drowse_spawn(const char *path, char *const argv[], char *const envp[], const char *cwd,
                 int set_ids, uid_t uid, gid_t gid, const gid_t *groups, int ngroups,
                 int stdin_fd, int stdout_fd, int stderr_fd, int cgroup_fd, int *out_failed_step, pid_t *out_pid);

/// drowse_spawn with per-app limits for where the app's cgroup cannot hold them: `nproc_limit`
/// (RLIMIT_NPROC, which the kernel counts over all processes of the user, not of one app) and
/// `data_limit` (RLIMIT_DATA, bytes); -1 leaves a limit as inherited.
int drowse_spawn_limited(const char *path, char *const argv[], char *const envp[], const char *cwd,
                         int set_ids, uid_t uid, gid_t gid, const gid_t *groups, int ngroups,
                         int stdin_fd, int stdout_fd, int stderr_fd, int cgroup_fd, long long nproc_limit,
                         long long data_limit, int *out_failed_step, pid_t *out_pid);

// DROWSE_SPAWN_STEP_*: drowse_spawn.h (CDrowseSpawn), shared with the spawn helper.

/// Starts the spawn helper (spawner.c): `exe` executed as "drowse-spawner", a small process that
/// starts handlers into their cgroups for this one, without a copy of its page tables. Until it
/// runs, and whenever it cannot be reached (it is started again, up to three times in a row),
/// drowse_spawn starts them itself. Returns 0 or errno.
int drowse_spawner_start(const char *exe);

/// Ends the spawn helper; handlers are started in-process from then on.
void drowse_spawner_stop(void);

/// The spawn helper's pid, or -1 when none runs.
pid_t drowse_spawner_pid(void);

/// Whether `path` may be run as root for the helper: absolute, a regular executable file owned
/// by root or this process's user and writable by nobody else, under folders that are all the
/// same (a folder others may write is accepted only with the sticky bit: they cannot rename what
/// is not theirs), with no symbolic link on the way. 1, or 0 with the reason in `why`.
int drowse_spawner_path_trusted(const char *path, char *why, size_t why_size);

/// Helper starts refused by drowse_spawner_path_trusted (checked before every start, restarts
/// included), the last reason, and handlers started in-process because no helper ran although
/// one was wanted. For `drowse status` and the log.
unsigned long long drowse_spawner_refusals(char *last_why, size_t why_size);
unsigned long long drowse_spawner_fallbacks(void);

/// Makes this process the subreaper of its descendants (PR_SET_CHILD_SUBREAPER): a handler's
/// orphans (e.g. a child that called setsid and outlived the handler) become its children, so it
/// can kill and reap them. Returns 0 or errno.
int drowse_set_child_subreaper(void);

/// Forgets a child drowse_spawn started, once its owner has reaped it.
void drowse_forget_child(pid_t pid);

/// Sends `sig` to every child of this process that drowse_spawn did not start (orphans adopted
/// as subreaper) and stores a pidfd for each of the first `max` (-1 where pidfd_open failed), so
/// the caller can wait for their end. Returns how many were signalled, or -1.
int drowse_kill_adopted(int sig, int *pidfds, int max);

/// Reaps adopted children that have ended (zombies). Returns how many, or -1.
int drowse_reap_adopted(void);

/// Reaps adopted children that have ended, without a scan of /proc: for when none of them can
/// be alive. Returns 0 when no ended child is left, -1 when the next is not an adopted one (a
/// registered child its owner has yet to reap, or not drowsed's to reap): only
/// drowse_reap_adopted can look past it.
int drowse_reap_ended_adopted(void);

/// Every process's pid and parent pid, from /proc (at most `max`). Returns the count.
int drowse_process_table(pid_t *pids, pid_t *ppids, int max);

/// Peer credentials of a connected Unix socket (SO_PEERCRED). Returns 0 or errno.
int drowse_peercred(int fd, pid_t *pid, uid_t *uid, gid_t *gid);

/// pidfd_open(2): a descriptor that becomes readable when the process exits. -1 on error.
int drowse_pidfd_open(pid_t pid);

/// pipe2(2) with O_CLOEXEC. Returns 0 or errno.
int drowse_pipe(int fds[2]);

/// eventfd(2) with EFD_CLOEXEC | EFD_NONBLOCK. -1 on error.
int drowse_eventfd(void);
/// eventfd(2) with EFD_CLOEXEC only: a read blocks until it is signalled. -1 on error.
int drowse_eventfd_blocking(void);

/// Names the calling thread (shown by top -H and /proc/PID/task/*/comm).
void drowse_set_thread_name(const char *name);

/// Sends a datagram to systemd's $NOTIFY_SOCKET. Returns 0, or errno; 0 when unset.
int drowse_sd_notify(const char *state);

/// A netlink socket subscribed to link and IPv4/IPv6 route changes (non-blocking). -1 on error.
int drowse_netlink_route_socket(void);

/// A netlink socket for kernel uevents (non-blocking). -1 on error.
int drowse_netlink_uevent_socket(void);

/// The SSID the Wi-Fi interface `ifname` is associated with, from nl80211 (wifi.c), copied into
/// out (at most cap bytes; an SSID has at most 32). Returns its length, 0 when the interface has
/// none (not associated, not a station), or -errno: -ENODEV not a Wi-Fi interface, -ENOTSUP no
/// Wi-Fi driver loaded, -ETIMEDOUT no answer within 500 ms.
int drowse_wifi_ssid(const char *ifname, unsigned char *out, size_t cap);

/// Sets Swift concurrency's global-enqueue hook unless one is set. Returns 1 if set.
int drowse_set_enqueue_global_hook(void *hook);

/// A non-blocking timerfd that becomes readable when the wall clock is set (a time sync's
/// step; see shim.c). -1 with errno on failure.
int drowse_clock_step_fd(void);
int drowse_clock_step_rearm(int fd);
/// 1: the clock was set since the last read (the fd is re-armed), 0: nothing to read, -1: error (errno).
int drowse_clock_step_read(int fd);
#endif
