/* Giving back the memory of CPython's empty small-object pools (natserver/server/reclaim.py).

   CPython's object allocator (pymalloc) takes memory from the system 1 MiB at a time (an
   arena, split into 16 KiB pools) and gives an arena back only once every pool in it is
   empty. A storm of 10 000 connections spreads its objects over ~80 arenas; when it has gone,
   a few long-lived objects made during it (a parked task's coroutine, a timer's deadline, a
   counter's int) each keep an arena, and with it every empty pool of the arena, in memory:
   bench_hostile's memory round read 27 such arenas (28 MB of empty pools) 30 s after the storm.

   This module keeps that memory out of the resident set: it becomes the arena allocator
   (PyObject_SetArenaAllocator: CPython's own, mmap and munmap, plus a list of the arenas it
   handed out), and release_empty_pools() tells the kernel (madvise MADV_DONTNEED) that all
   but the first page of every empty pool of those arenas is not needed. The first page keeps
   the pool's header, which links the arena's list of empty pools, and the header's size class
   is set to CPython's own "never used" mark (DUMMY_SIZE_IDX), so that a pool taken again is
   set up afresh, never reusing a free list whose links were in the dropped pages. The kernel
   gives the dropped pages back zeroed the next time the pool is written.

   The pool header below is CPython's (Objects/obmalloc.c, Include/internal/pycore_obmalloc.h:
   the same in 3.10 to 3.13). The pool size follows from the arena size CPython asks for (1 MiB
   arenas have 16 KiB pools, 256 KiB arenas 4 KiB ones). CPython's other virtual allocations go
   through the arena allocator too (each thread's frame stack chunks: 16 KiB and up), so only
   allocations of an arena's size are listed, and an arena is released from only when every used
   pool in it looks like CPython's (looks_like_an_arena). Arenas made before this module was
   imported (the interpreter's start) are not listed and are left alone.

   Built by setup.py as an optional extension, like _croute.c. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#define HAVE_RELEASE 1
#else
#define HAVE_RELEASE 0
#endif

/* CPython's struct pool_header. */
struct pool_header {
    union {
        void *_padding;
        unsigned int count; /* blocks in use */
    } ref;
    void *freeblock;
    struct pool_header *nextpool;
    struct pool_header *prevpool;
    unsigned int arenaindex;
    unsigned int szidx;        /* size class; DUMMY_SIZE_IDX: set up afresh when taken */
    unsigned int nextoffset;
    unsigned int maxnextoffset; /* 0 only in a pool never used */
};

#define DUMMY_SIZE_IDX 0xffff
#define ARENA_1M ((size_t)1 << 20)   /* 64-bit CPython 3.10+: 16 KiB pools */
#define ARENA_256K ((size_t)1 << 18) /* otherwise: 4 KiB pools */
#define ALIGNMENT 16 /* CPython 3.8+ on 64-bit: block sizes are multiples of 16 */

typedef struct {
    char *address;
    size_t size;
} arena_t;

static PyObjectArenaAllocator previous;
static int installed = 0;
static int disabled = 0;     /* the list could not grow: no release (nothing else turns it off) */
static size_t skipped = 0;   /* arena-sized allocations that did not look like arenas */
static arena_t *arenas = NULL;
static size_t n_arenas = 0, cap_arenas = 0;

static void *
arena_alloc(void *ctx, size_t size)
{
    (void)ctx;
    void *p = previous.alloc(previous.ctx, size); /* CPython's own (mmap) */
    if (p == NULL || (size != ARENA_1M && size != ARENA_256K))
        return p; /* not an arena: CPython's other virtual allocations (a thread's frame stack
                     chunks, 16 KiB and up) come here too; they are not listed */
    if (n_arenas == cap_arenas) {
        size_t cap = cap_arenas ? cap_arenas * 2 : 256;
        arena_t *grown = realloc(arenas, cap * sizeof(arena_t));
        if (grown == NULL) {
            disabled = 1; /* unlisted, the arena is still good: only the release stops */
            return p;
        }
        arenas = grown;
        cap_arenas = cap;
    }
    arenas[n_arenas].address = p;
    arenas[n_arenas].size = size;
    n_arenas++;
    return p;
}

static void
arena_free(void *ctx, void *ptr, size_t size)
{
    (void)ctx;
    for (size_t i = 0; i < n_arenas; i++) {
        if (arenas[i].address == ptr) {
            arenas[i] = arenas[--n_arenas];
            break;
        }
    }
    previous.free(previous.ctx, ptr, size);
}

/* Whether every used pool of the arena [start, end) looks like CPython's: one arenaindex for
   all, a size class and the offsets that go with it, a count within the pool. Anything else
   (an allocation of an arena's size that is not one) and the arena is left alone. */
static int
looks_like_an_arena(uintptr_t first, uintptr_t end, size_t pool_size)
{
    int seen = 0;
    unsigned int index = 0;
    for (uintptr_t p = first; p + pool_size <= end; p += pool_size) {
        struct pool_header *pool = (struct pool_header *)p;
        if (pool->maxnextoffset == 0)
            continue; /* never used */
        if (seen && pool->arenaindex != index)
            return 0;
        seen = 1;
        index = pool->arenaindex;
        if (pool->szidx == DUMMY_SIZE_IDX) {
            if (pool->ref.count != 0)
                return 0;
            continue; /* released already, not taken since */
        }
        size_t block = (size_t)(pool->szidx + 1) * ALIGNMENT;
        if (pool->szidx >= 64 || pool->maxnextoffset != pool_size - block
                || pool->nextoffset > pool_size || pool->ref.count > pool_size / block)
            return 0;
    }
    return 1;
}

/* release_empty_pools() -> (pools released, bytes given back). */
static PyObject *
release_empty_pools(PyObject *self, PyObject *unused)
{
    size_t pools = 0, released = 0;
#if HAVE_RELEASE
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    for (size_t i = 0; i < n_arenas && !disabled; i++) {
        size_t pool_size = arenas[i].size == ARENA_1M ? (size_t)1 << 14 : (size_t)1 << 12;
        if (pool_size <= page)
            continue; /* nothing past a header page to drop */
        uintptr_t start = (uintptr_t)arenas[i].address;
        uintptr_t end = start + arenas[i].size;
        uintptr_t first = (start + pool_size - 1) & ~(uintptr_t)(pool_size - 1);
        if (!looks_like_an_arena(first, end, pool_size)) {
            skipped++;
            continue;
        }
        for (uintptr_t p = first; p + pool_size <= end; p += pool_size) {
            struct pool_header *pool = (struct pool_header *)p;
            if (pool->maxnextoffset == 0 || pool->ref.count != 0 || pool->szidx == DUMMY_SIZE_IDX)
                continue; /* never used, in use, or released already */
            if (madvise((void *)(p + page), pool_size - page, MADV_DONTNEED) != 0)
                continue;
            pool->szidx = DUMMY_SIZE_IDX;
            pools++;
            released += pool_size - page;
        }
    }
#endif
    return Py_BuildValue("(nn)", (Py_ssize_t)pools, (Py_ssize_t)released);
}

/* state() -> (installed, enabled, arenas listed, arena-sized allocations skipped). */
static PyObject *
state(PyObject *self, PyObject *unused)
{
    return Py_BuildValue("(iinn)", installed, installed && !disabled && HAVE_RELEASE, (Py_ssize_t)n_arenas,
                         (Py_ssize_t)skipped);
}

static PyMethodDef methods[] = {
    {"release_empty_pools", release_empty_pools, METH_NOARGS,
     "Drop all but the first page of every empty pymalloc pool of the listed arenas; (pools, bytes)."},
    {"state", state, METH_NOARGS, "(installed, release enabled, arenas listed, arena-sized allocations skipped)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_arenas", "pymalloc's empty pools given back (see _arenas.c).", -1, methods,
};

PyMODINIT_FUNC
PyInit__arenas(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (!installed) {
        PyObjectArenaAllocator mine = {NULL, arena_alloc, arena_free};
        PyObject_GetArenaAllocator(&previous);
        PyObject_SetArenaAllocator(&mine);
        installed = 1;
    }
    return m;
}
