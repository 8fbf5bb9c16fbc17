/* The blocking OpenCL launch in one native call (backends/_opencl_native.py builds and loads it).

   A fast launcher of a blocking queue (backends/_opencl_launch.py: launcher) calls
   BlockingLaunch.run(args) for each launch. It takes the queue's lock; with arguments other than
   its last launch's, it has the Python launcher set them (set_fresh: packing is defined there) and
   goes on as with the same ones; it asks the queue's wait choice how to wait (WaitChoice.choose,
   Python), enqueues the kernel with clEnqueueNDRangeKernel, lets go of the lock, and
   - for a joined wait, waits with clWaitForEvents without the GIL and stores the time taken;
   - otherwise hands the event (a pyopencl Event) to the Python wait (WaitChoice.wait_chosen).
   A failed enqueue goes to the Python launcher, which raises the runtime's own error, and a
   failed command's error is the runtime's own too. (A refused enqueue, an error path, asks the
   wait's choice once more there.)

   hand_over(event) is the interruptible wait of a runtime that runs a command in the thread
   waiting for it (backends/_opencl_waits.py: wait_event_handed): a native waiter thread, which
   never takes the GIL, waits with clWaitForEvents, while the calling thread sleeps on a semaphore
   without the GIL, a slice at a time (Handed.wait), and goes back to Python between slices and
   when a signal interrupts its sleep (a Ctrl-C raises there at once). A wait given up leaves its
   waiter to finish alone (it then ends); the next wait takes another. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

typedef int32_t cl_int;
typedef uint32_t cl_uint;
typedef void *cl_event;
typedef cl_int (*enqueue_fn)(void *, void *, cl_uint, const size_t *, const size_t *, const size_t *, cl_uint,
                             const cl_event *, cl_event *);
typedef cl_int (*wait_fn)(cl_uint, const cl_event *);
typedef cl_int (*release_fn)(cl_event);

static enqueue_fn cl_enqueue;
static wait_fn cl_wait;
static release_fn cl_release, cl_retain;
static PyObject *s_acquire, *s_release, *s_last_event;
static PyObject *failed_error; /* what a failure the runtime's own wait does not raise is raised as */
static PyObject *perf_counter; /* time.perf_counter where it is not CLOCK_MONOTONIC */

#define JOINED 0

typedef struct {
    PyObject_HEAD
    PyObject *impl;      /* the queue's implementation: its last_event is set here */
    PyObject *lock;      /* the queue's lock */
    PyObject *python;    /* the Python launcher: run(args) */
    PyObject *choose;    /* WaitChoice.choose(last) -> how */
    PyObject *wait;      /* WaitChoice.wait_chosen(how, ev, took, flush, t0) */
    PyObject *flush;     /* the queue's flush */
    PyObject *event;     /* pyopencl Event.from_int_ptr */
    PyObject *same;      /* same_value(a, b) for arguments that are not the very objects */
    PyObject *last;      /* [args of the last launch], shared with the Python launcher */
    PyObject *took;      /* [the time cell of the last arguments' work: [seconds its last run took, or None]] */
    PyObject *waiting;   /* the type of last_event while a joined wait runs: one each (not idle) */
    PyObject *kernel;    /* the pyopencl Kernel (kept alive: its handle is used) */
    PyObject *set;       /* set_fresh(args): other arguments set on the kernel (the Python launcher's) */
    void *cq, *knl;
    cl_uint dims;
    size_t global[3], local[3];
    int has_local;
} BlockingLaunch;

/* time.perf_counter(): its clock read directly on Linux (CLOCK_MONOTONIC), else called */
static double now(void) {
#if defined(__linux__)
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
#else
    PyObject *r = PyObject_CallNoArgs(perf_counter);
    double t = r == NULL ? -1.0 : PyFloat_AsDouble(r);
    Py_XDECREF(r);
    if (PyErr_Occurred()) PyErr_Clear();
    return t;
#endif
}

static int call_method0(PyObject *obj, PyObject *name) {
    PyObject *r = PyObject_CallMethodNoArgs(obj, name);
    if (r == NULL) return -1;
    Py_DECREF(r);
    return 0;
}

/* let go of the queue's lock, keeping an error already raised: -1 where one is (or the release
   failed), else 0 */
static int unlock(BlockingLaunch *b) {
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    int r = call_method0(b->lock, s_release);
    if (t == NULL) return r;
    if (r < 0) PyErr_Clear();
    PyErr_Restore(t, v, tb);
    return -1;
}

/* wait for a command no pyopencl Event owns, and let go of it (an error path's) */
static void drop(cl_event ev) {
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    Py_BEGIN_ALLOW_THREADS
    cl_wait(1, &ev);
    cl_release(ev);
    Py_END_ALLOW_THREADS
    PyErr_Restore(t, v, tb);
}

/* after a launch's wait: the queue is idle, unless another thread enqueued meanwhile (then
   last_event is not this launch's, mine) */
static void idle_after(BlockingLaunch *b, PyObject *mine) {
    PyObject *cur = PyObject_GetAttr(b->impl, s_last_event);
    if (cur == NULL) {
        PyErr_Clear();
        return;
    }
    if (cur == mine && PyObject_SetAttr(b->impl, s_last_event, Py_None) < 0) PyErr_Clear();
    Py_DECREF(cur);
}

/* 1: args hold the objects of the last launch (or equal scalars: same_value), 0: not, -1: error */
static int same_args(BlockingLaunch *b, PyObject *args) {
    PyObject *prev = PyList_GET_ITEM(b->last, 0);
    if (!PyTuple_Check(prev) || PyTuple_GET_SIZE(prev) != PyTuple_GET_SIZE(args)) return 0;
    int ok = 1;
    Py_INCREF(prev); /* (same_value is Python: the list may change meanwhile) */
    for (Py_ssize_t i = 0; ok == 1 && i < PyTuple_GET_SIZE(args); i++) {
        PyObject *x = PyTuple_GET_ITEM(args, i), *y = PyTuple_GET_ITEM(prev, i);
        if (x == y) continue;
        PyObject *r = PyObject_CallFunctionObjArgs(b->same, x, y, NULL);
        ok = r == NULL ? -1 : PyObject_IsTrue(r);
        Py_XDECREF(r);
    }
    Py_DECREF(prev);
    return ok;
}

/* the failed wait's or enqueue's error: pyopencl's Event.wait raises the runtime's own */
static PyObject *raise_for(BlockingLaunch *b, cl_event ev) {
    PyObject *e = PyObject_CallFunction(b->event, "KO", (unsigned long long)(uintptr_t)ev, Py_False);
    if (e == NULL) {
        cl_release(ev);
        return NULL;
    }
    PyObject *r = PyObject_CallMethod(e, "wait", NULL);
    Py_DECREF(e);
    if (r == NULL) return NULL;
    Py_DECREF(r);
    PyErr_SetString(failed_error, "clWaitForEvents reported a failed command, but the command's event says it "
                                  "completed; the queue's state is the OpenCL runtime's: make a new queue");
    return NULL;
}

static PyObject *enqueue_and_wait(BlockingLaunch *b, PyObject *args, PyObject *cell);

static PyObject *run(BlockingLaunch *b, PyObject *args) {
    if (!PyTuple_Check(args)) return PyObject_CallOneArg(b->python, args);
    if (call_method0(b->lock, s_acquire) < 0) return NULL;
    int same = same_args(b, args);
    if (same != 1) { /* other arguments: set (by Python), then launched as these */
        PyObject *r = same < 0 ? NULL : PyObject_CallOneArg(b->set, args);
        if (r == NULL) {
            unlock(b);
            return NULL;
        }
        Py_DECREF(r);
    }
    /* the time cell of these arguments' work (set_fresh may have changed it: one per set of
       values), held through the wait (another thread's set_fresh may let go of it meanwhile) */
    PyObject *cell = Py_NewRef(PyList_GET_ITEM(b->took, 0));
    if (!PyList_Check(cell) || PyList_GET_SIZE(cell) != 1) {
        Py_DECREF(cell);
        unlock(b);
        PyErr_SetString(PyExc_TypeError, "a launcher's time cell: a list of one item");
        return NULL;
    }
    PyObject *r = enqueue_and_wait(b, args, cell);
    Py_DECREF(cell);
    return r;
}

/* run's launch, the queue's lock held (let go of here), its time stored in cell[0] */
static PyObject *enqueue_and_wait(BlockingLaunch *b, PyObject *args, PyObject *cell) {
    PyObject *took = PyList_GET_ITEM(cell, 0);
    Py_INCREF(took);
    /* an idle queue (no command before this one unfinished: last_event None, as this library
       leaves it after a wait) needs no look by the choice (choose(took, False)) */
    PyObject *before = PyObject_GetAttr(b->impl, s_last_event);
    if (before == NULL) PyErr_Clear();
    PyObject *how_obj = before == Py_None ? PyObject_CallFunctionObjArgs(b->choose, took, Py_False, NULL)
                                          : PyObject_CallOneArg(b->choose, took);
    Py_XDECREF(before);
    Py_DECREF(took);
    long how = how_obj == NULL ? -1 : PyLong_AsLong(how_obj);
    Py_XDECREF(how_obj);
    if (how == -1 && PyErr_Occurred()) {
        unlock(b);
        return NULL;
    }
    double t0 = now();
    cl_event ev = NULL;
    cl_int err = cl_enqueue(b->cq, b->knl, b->dims, NULL, b->global, b->has_local ? b->local : NULL, 0, NULL, &ev);
    if (err != 0) { /* the Python launcher raises the runtime's error for it */
        if (unlock(b) < 0) return NULL;
        return PyObject_CallOneArg(b->python, args);
    }
    PyObject *previous = PyObject_GetAttr(b->impl, s_last_event); /* let go of after the wait */
    if (previous == NULL) PyErr_Clear();
    if (how != JOINED) { /* the Python wait: its event a pyopencl Event */
        PyObject *event = PyObject_CallFunction(b->event, "KO", (unsigned long long)(uintptr_t)ev, Py_False);
        if (event == NULL) drop(ev);
        else PyObject_SetAttr(b->impl, s_last_event, event);
        if (unlock(b) < 0) {
            Py_XDECREF(event);
            Py_XDECREF(previous);
            return NULL;
        }
        PyObject *t0_obj = PyFloat_FromDouble(t0);
        PyObject *r = t0_obj == NULL ? NULL
                                     : PyObject_CallFunction(b->wait, "lOOOO", how, event, cell, b->flush, t0_obj);
        Py_XDECREF(t0_obj);
        if (r != NULL) idle_after(b, event); /* (the next launch's choice then needs no look at the queue) */
        Py_XDECREF(event);
        Py_XDECREF(previous);
        return r;
    }
    PyObject *mine = PyObject_CallNoArgs(b->waiting); /* this launch's: another's wait leaves it */
    if (mine != NULL) PyObject_SetAttr(b->impl, s_last_event, mine);
    if (unlock(b) < 0) {
        drop(ev);
        Py_XDECREF(mine);
        Py_XDECREF(previous);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    err = cl_wait(1, &ev);
    if (err == 0) cl_release(ev);
    Py_END_ALLOW_THREADS
    double t1 = now();
    idle_after(b, mine);
    Py_DECREF(mine);
    Py_XDECREF(previous);
    if (err != 0) {
        PyList_SetItem(cell, 0, Py_NewRef(Py_None));
        return raise_for(b, ev);
    }
    PyObject *t = PyFloat_FromDouble(t1 - t0);
    if (t == NULL) return NULL;
    PyList_SetItem(cell, 0, t); /* steals t */
    Py_RETURN_NONE;
}

/* ---- the handed wait's native waiter threads ---- */

typedef struct Waiter {
    pthread_mutex_t m;
    pthread_cond_t wake;
    sem_t done;      /* posted once the event of a request completed (or failed) */
    cl_event ev;     /* the request (retained for the waiter), NULL while idle */
    cl_int err;      /* clWaitForEvents' answer to the last request */
    int abandoned;   /* its caller gave up (a Ctrl-C): end after the wait it is in */
    int retired;     /* end once idle */
} Waiter;

/* a waiter thread's name (/proc/self/task/N/comm on Linux) */
#define WAITER_NAME "alpyka-cl-wait"
/* how many idle waiters a process keeps for the next handed waits (threads handing waits at once
   each take one); more are retired once idle */
#define IDLE_MAX 4

/* the idle waiters the next handed waits take (none: start one); read and set under the GIL */
static Waiter *idle_waiters[IDLE_MAX];
static int idle_count;

static void free_waiter(Waiter *w) {
    pthread_mutex_destroy(&w->m);
    pthread_cond_destroy(&w->wake);
    sem_destroy(&w->done);
    free(w);
}

/* the waiter thread: the runtime's own wait for each request, one at a time; it frees its waiter
   when it ends (retired, or abandoned by its caller) */
static void *waiter_main(void *arg) {
    Waiter *w = arg;
#if defined(__linux__)
    pthread_setname_np(pthread_self(), WAITER_NAME);
#endif
    pthread_mutex_lock(&w->m);
    for (;;) {
        while (w->ev == NULL && !w->retired) pthread_cond_wait(&w->wake, &w->m);
        if (w->ev == NULL) break; /* retired */
        cl_event ev = w->ev;
        pthread_mutex_unlock(&w->m);
        cl_int err = cl_wait(1, &ev);
        cl_release(ev);
        pthread_mutex_lock(&w->m);
        if (w->abandoned) break;
        w->err = err;
        w->ev = NULL;
        sem_post(&w->done);
    }
    pthread_mutex_unlock(&w->m);
    free_waiter(w);
    return NULL;
}

/* a new waiter and its thread, which takes no signal (they go to the interpreter's threads);
   NULL with *why set where one cannot be made */
static Waiter *start_waiter(int *why) {
    Waiter *w = calloc(1, sizeof(Waiter));
    if (w == NULL) {
        *why = ENOMEM;
        return NULL;
    }
    if ((*why = pthread_mutex_init(&w->m, NULL)) != 0) goto no_mutex;
    if ((*why = pthread_cond_init(&w->wake, NULL)) != 0) goto no_cond;
    if (sem_init(&w->done, 0, 0) != 0) {
        *why = errno;
        goto no_sem;
    }
    pthread_attr_t attr;
    pthread_t thread;
    if ((*why = pthread_attr_init(&attr)) != 0) goto no_thread;
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 1 << 20); /* (Intel's runtime runs the command in it) */
    sigset_t all, before;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &before);
    *why = pthread_create(&thread, &attr, waiter_main, w);
    pthread_sigmask(SIG_SETMASK, &before, NULL);
    pthread_attr_destroy(&attr);
    if (*why == 0) return w;
no_thread:
    sem_destroy(&w->done);
no_sem:
    pthread_cond_destroy(&w->wake);
no_cond:
    pthread_mutex_destroy(&w->m);
no_mutex:
    free(w);
    return NULL;
}

/* put a waiter whose request completed back among the idle ones, or retire it where they are many */
static void put_back(Waiter *w) {
    if (idle_count < IDLE_MAX) {
        idle_waiters[idle_count++] = w;
        return;
    }
    pthread_mutex_lock(&w->m);
    w->retired = 1;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->m);
}

/* a forked child has no copy of the waiter threads: its next wait starts one */
static void forget_waiters(void) { idle_count = 0; }

/* a caller that stops waiting: the waiter finishes its request alone and ends, unless it just
   finished it (then it is idle again) */
static void give_up(Waiter *w) {
    pthread_mutex_lock(&w->m);
    int finished = w->ev == NULL;
    if (!finished) w->abandoned = 1;
    pthread_mutex_unlock(&w->m);
    if (finished) {
        while (sem_trywait(&w->done) != 0 && errno == EINTR) {
        }
        put_back(w);
    }
}

/* sleep on the waiter's semaphore for at most slice seconds (a monotonic clock's, where the C
   library has sem_clockwait): 0 posted, else errno's reason (EINTR, ETIMEDOUT) */
static int sleep_on(Waiter *w, double slice) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 30))
    clockid_t clock = CLOCK_MONOTONIC;
#else
    clockid_t clock = CLOCK_REALTIME;
#endif
    struct timespec until;
    clock_gettime(clock, &until);
    double whole = (double)until.tv_sec + 1e-9 * (double)until.tv_nsec + slice;
    until.tv_sec = (time_t)whole;
    until.tv_nsec = (long)((whole - (double)until.tv_sec) * 1e9);
    if (until.tv_nsec >= 1000000000L) until.tv_nsec = 999999999L;
    if (until.tv_nsec < 0) until.tv_nsec = 0;
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 30))
    return sem_clockwait(&w->done, clock, &until) == 0 ? 0 : errno;
#else
    return sem_timedwait(&w->done, &until) == 0 ? 0 : errno;
#endif
}

/* a handed wait: its waiter, while the event is waited for (NULL once done or given up) */
typedef struct {
    PyObject_HEAD
    Waiter *w;
} Handed;

static PyObject *handed_wait(Handed *h, PyObject *arg) {
    double slice = PyFloat_AsDouble(arg);
    if (slice == -1.0 && PyErr_Occurred()) return NULL;
    if (!(slice > 0.0 && slice <= 1e6)) {
        PyErr_SetString(PyExc_ValueError, "wait(slice): a slice of 0 to 1e6 s (not 0, not NaN)");
        return NULL;
    }
    if (h->w == NULL) {
        PyErr_SetString(PyExc_ValueError, "wait(slice): this handed wait is over (done or given up)");
        return NULL;
    }
    int why;
    Py_BEGIN_ALLOW_THREADS
    why = sleep_on(h->w, slice);
    Py_END_ALLOW_THREADS
    if (why == EINTR || why == ETIMEDOUT) Py_RETURN_NONE; /* (Python looks at its signals, then waits on) */
    Waiter *w = h->w;
    h->w = NULL;
    if (why != 0) { /* (not expected) */
        give_up(w);
        errno = why;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    cl_int err = w->err;
    put_back(w);
    return PyLong_FromLong((long)err);
}

static PyObject *handed_give_up(Handed *h, PyObject *unused) {
    if (h->w != NULL) {
        give_up(h->w);
        h->w = NULL;
    }
    Py_RETURN_NONE;
}

static void handed_dealloc(Handed *h) {
    if (h->w != NULL) give_up(h->w); /* (its caller let go of it without waiting it out) */
    Py_TYPE(h)->tp_free((PyObject *)h);
}

static PyMethodDef handed_methods[] = {
    {"wait", (PyCFunction)handed_wait, METH_O,
     "wait(slice): clWaitForEvents' error code once the event completed (the waiter then idle again), "
     "None where slice seconds passed or a signal came first (call again)"},
    {"give_up", (PyCFunction)handed_give_up, METH_NOARGS,
     "stop waiting: the waiter finishes its wait alone and ends"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject HandedType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_alpyka_opencl_native.Handed",
    .tp_basicsize = sizeof(Handed),
    .tp_dealloc = (destructor)handed_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An OpenCL event handed to a native waiter thread (hand_over)",
    .tp_methods = handed_methods,
};

static PyObject *idle_waiters_count(PyObject *self, PyObject *unused) { return PyLong_FromLong(idle_count); }

static PyObject *hand_over(PyObject *self, PyObject *arg) {
    unsigned long long ptr = PyLong_AsUnsignedLongLong(arg);
    if (ptr == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    if (ptr == 0) {
        PyErr_SetString(PyExc_ValueError, "hand_over(event): an event's int_ptr");
        return NULL;
    }
    Handed *h = PyObject_New(Handed, &HandedType);
    if (h == NULL) return NULL;
    Waiter *w = idle_count > 0 ? idle_waiters[--idle_count] : NULL;
    int why = 0;
    if (w == NULL && (w = start_waiter(&why)) == NULL) {
        h->w = NULL;
        Py_DECREF(h);
        errno = why;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    cl_event ev = (cl_event)(uintptr_t)ptr;
    cl_retain(ev); /* the waiter's: it lets go after its wait */
    pthread_mutex_lock(&w->m);
    w->ev = ev;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->m);
    h->w = w;
    return (PyObject *)h;
}

static int traverse(BlockingLaunch *b, visitproc visit, void *arg) {
    Py_VISIT(b->impl); Py_VISIT(b->lock); Py_VISIT(b->python); Py_VISIT(b->choose); Py_VISIT(b->wait);
    Py_VISIT(b->flush); Py_VISIT(b->event); Py_VISIT(b->same); Py_VISIT(b->last); Py_VISIT(b->took);
    Py_VISIT(b->waiting); Py_VISIT(b->kernel); Py_VISIT(b->set);
    return 0;
}

static int clear(BlockingLaunch *b) {
    Py_CLEAR(b->impl); Py_CLEAR(b->lock); Py_CLEAR(b->python); Py_CLEAR(b->choose); Py_CLEAR(b->wait);
    Py_CLEAR(b->flush); Py_CLEAR(b->event); Py_CLEAR(b->same); Py_CLEAR(b->last); Py_CLEAR(b->took);
    Py_CLEAR(b->waiting); Py_CLEAR(b->kernel); Py_CLEAR(b->set);
    return 0;
}

static void dealloc(BlockingLaunch *b) {
    PyObject_GC_UnTrack(b);
    clear(b);
    Py_TYPE(b)->tp_free((PyObject *)b);
}

static int sizes(PyObject *seq, size_t *out, cl_uint dims) {
    if (!PyTuple_Check(seq) || PyTuple_GET_SIZE(seq) != (Py_ssize_t)dims) {
        PyErr_SetString(PyExc_ValueError, "sizes: a tuple of the launch's dimensions");
        return -1;
    }
    for (cl_uint i = 0; i < dims; i++) {
        out[i] = PyLong_AsSize_t(PyTuple_GET_ITEM(seq, i));
        if (out[i] == (size_t)-1 && PyErr_Occurred()) return -1;
    }
    return 0;
}

static PyObject *make(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *names[] = {"impl", "lock", "python", "choose", "wait", "flush", "event", "same", "last",
                            "took", "waiting", "kernel", "set", "cq", "glob", "local", NULL};
    PyObject *o[13], *glob, *local;
    unsigned long long cq;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOOOOOO!O!OOOKO!O", names, &o[0], &o[1], &o[2], &o[3], &o[4],
                                     &o[5], &o[6], &o[7], &PyList_Type, &o[8], &PyList_Type, &o[9], &o[10], &o[11],
                                     &o[12], &cq, &PyTuple_Type, &glob, &local))
        return NULL;
    if (PyList_GET_SIZE(o[8]) != 1 || PyList_GET_SIZE(o[9]) != 1) {
        PyErr_SetString(PyExc_ValueError, "last and took: lists of one item (took: [a time cell])");
        return NULL;
    }
    PyObject *knl_ptr = PyObject_GetAttrString(o[11], "int_ptr");
    if (knl_ptr == NULL) return NULL;
    void *knl = PyLong_AsVoidPtr(knl_ptr);
    Py_DECREF(knl_ptr);
    if (knl == NULL && PyErr_Occurred()) return NULL;
    Py_ssize_t dims = PyTuple_GET_SIZE(glob);
    if (dims < 1 || dims > 3) {
        PyErr_SetString(PyExc_ValueError, "glob: 1 to 3 sizes");
        return NULL;
    }
    BlockingLaunch *b = PyObject_GC_New(BlockingLaunch, type);
    if (b == NULL) return NULL;
    PyObject **slots[13] = {&b->impl, &b->lock, &b->python, &b->choose, &b->wait, &b->flush, &b->event,
                            &b->same, &b->last, &b->took, &b->waiting, &b->kernel, &b->set};
    for (int i = 0; i < 13; i++) *slots[i] = Py_NewRef(o[i]);
    b->cq = (void *)(uintptr_t)cq;
    b->knl = knl;
    b->dims = (cl_uint)dims;
    b->has_local = local != Py_None;
    if (sizes(glob, b->global, b->dims) < 0 || (b->has_local && sizes(local, b->local, b->dims) < 0)) {
        Py_DECREF(b);
        return NULL;
    }
    PyObject_GC_Track(b);
    return (PyObject *)b;
}

static PyMethodDef methods[] = {
    {"run", (PyCFunction)run, METH_O, "run(args): the launch with these arguments, waited for"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject BlockingLaunchType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_alpyka_opencl_native.BlockingLaunch",
    .tp_basicsize = sizeof(BlockingLaunch),
    .tp_dealloc = (destructor)dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A fast launcher's blocking launch in one native call",
    .tp_traverse = (traverseproc)traverse,
    .tp_clear = (inquiry)clear,
    .tp_methods = methods,
    .tp_new = make,
};

static PyObject *bind(PyObject *self, PyObject *args) {
    unsigned long long enqueue, wait, release, retain;
    PyObject *error, *clock;
    if (!PyArg_ParseTuple(args, "KKKKOO", &enqueue, &wait, &release, &retain, &error, &clock)) return NULL;
    if (!enqueue || !wait || !release || !retain || !PyExceptionClass_Check(error) || !PyCallable_Check(clock)) {
        PyErr_SetString(PyExc_ValueError, "bind: four entry points of the OpenCL loader, an error class, a clock");
        return NULL;
    }
    Py_XSETREF(failed_error, Py_NewRef(error));
    Py_XSETREF(perf_counter, Py_NewRef(clock));
    cl_enqueue = (enqueue_fn)(uintptr_t)enqueue;
    cl_wait = (wait_fn)(uintptr_t)wait;
    cl_release = (release_fn)(uintptr_t)release;
    cl_retain = (release_fn)(uintptr_t)retain;
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"bind", bind, METH_VARARGS,
     "bind(clEnqueueNDRangeKernel, clWaitForEvents, clReleaseEvent, clRetainEvent, error, perf_counter): the "
     "loader's entry points (addresses), the error class of a failure the runtime does not raise, time.perf_counter"},
    {"hand_over", hand_over, METH_O,
     "hand_over(event_int_ptr) -> Handed: the event waited for with clWaitForEvents by a native waiter thread "
     "(Handed.wait(slice) until it answers, Handed.give_up() to stop)"},
    {"idle_waiters", idle_waiters_count, METH_NOARGS, "how many idle waiter threads await the next handed waits"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "_alpyka_opencl_native", .m_size = -1, .m_methods = module_methods};

PyMODINIT_FUNC PyInit__alpyka_opencl_native(void) {
    if (PyType_Ready(&BlockingLaunchType) < 0 || PyType_Ready(&HandedType) < 0) return NULL;
    static int at_fork;
    if (!at_fork) at_fork = pthread_atfork(NULL, NULL, forget_waiters) == 0;
    s_acquire = PyUnicode_InternFromString("acquire");
    s_release = PyUnicode_InternFromString("release");
    s_last_event = PyUnicode_InternFromString("last_event");
    if (!s_acquire || !s_release || !s_last_event) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddObjectRef(m, "BlockingLaunch", (PyObject *)&BlockingLaunchType) < 0 ||
        PyModule_AddStringConstant(m, "WAITER_NAME", WAITER_NAME) < 0 ||
        PyModule_AddIntConstant(m, "IDLE_MAX", IDLE_MAX) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
