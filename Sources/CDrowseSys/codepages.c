#define _GNU_SOURCE
#include "CDrowseSys.h"
#include <elf.h>
#include <link.h>
#include <stdint.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <unistd.h>

/* Whether the object's dynamic section asks for text relocations: its read-only segments were
   then written at load time (private copies, which MADV_DONTNEED would throw away). */
static int has_textrel(const struct dl_phdr_info *info) {
    for (ElfW(Half) i = 0; i < info->dlpi_phnum; i++) {
        if (info->dlpi_phdr[i].p_type != PT_DYNAMIC) continue;
        for (const ElfW(Dyn) *d = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr); d->d_tag != DT_NULL; d++) {
            if (d->d_tag == DT_TEXTREL) return 1;
            if (d->d_tag == DT_FLAGS && (d->d_un.d_val & DF_TEXTREL)) return 1;
        }
    }
    return 0;
}

struct release { uintptr_t page; uintptr_t vdso; long bytes; int program; };

static int release_object(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    struct release *r = data;
    /* The program itself only when asked (after a quiet spell: the code an idle drowsed runs is
       laid out together by deploy/order-text.sh, so a wakeup faults back few pages); never the
       vDSO (no file behind it). */
    if ((info->dlpi_name == NULL || info->dlpi_name[0] == '\0') && !r->program) return 0;
    if (r->vdso && (uintptr_t)info->dlpi_phdr - r->vdso < r->page) return 0;
    if (has_textrel(info)) return 0;
    for (ElfW(Half) i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        /* Only segments loaded without write permission: code and constants, the file's bytes.
           RELRO (written by the loader, then made read-only) lies in a writable segment. */
        if (ph->p_type != PT_LOAD || (ph->p_flags & PF_W) || ph->p_filesz == 0) continue;
        uintptr_t start = info->dlpi_addr + ph->p_vaddr;
        uintptr_t end = start + ph->p_filesz;
        /* Whole pages of the segment only: a page it shares with a neighbour is left alone. */
        start = (start + r->page - 1) & ~(r->page - 1);
        end &= ~(r->page - 1);
        if (end <= start) continue;
        if (madvise((void *)start, end - start, MADV_DONTNEED) == 0) r->bytes += (long)(end - start);
    }
    return 0;
}

long drowse_release_library_code(void) { return drowse_release_code(0); }

long drowse_release_code(int program) {
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0) return -1;
    struct release r = {(uintptr_t)page, (uintptr_t)getauxval(AT_SYSINFO_EHDR), 0, program};
    /* dl_iterate_phdr holds the loader's lock: no dlopen or dlclose maps or unmaps meanwhile. */
    dl_iterate_phdr(release_object, &r);
    return r.bytes;
}
