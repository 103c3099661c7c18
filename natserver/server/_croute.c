/* The compiled twin of the delivery loop's common case (natserver/server/client.py).

   route_pubs() takes over, for a run of parsed ops, what Client._process_ops and Client._route
   do with a small plain PUB whose subject is in the match cache: append
   "MSG <subject> <sid> [reply ]<size>\r\n<payload>\r\n" to every plain subscriber's outbound
   list, with the same counters. With subjects changing every message that Python work is most
   of what a message costs once the parser is compiled (callgrind, benchmarks.parse_route hot:
   10 000 wildcard subscriptions, 256 hot subjects, 16 B). A subject not in the cache is matched
   by the sublist's own Python match_uncached, and a result without its delivery plan gets the
   one Client._route would build. It stops before anything it is not sure of, and the Python
   code handles that op: an op that is not a Pub, headers, a payload of BIG_PAYLOAD or more or
   neither bytes nor a memoryview of bytes, a result without subscribers, a subscription with a limit, permission filter or
   callback (sub.limited), a client's own message without echo to a plain subscription of its
   own. Queue groups get one member each, from a random start, as Client._queue_targets picks it. A
   subscriber pushed over its stall mark gets the publisher's _over_stall_mark, as in Python,
   and the loop returns after that message so the caller sees the stall. The pure-Python path
   stays complete and is the reference (tests/server/test_croute.py feeds both).

   Built by setup.py as an optional extension, like natserver/protocol/_cscan.c. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "structmember.h" /* T_OBJECT_EX, READONLY: what a class's __slots__ entries are */
#include <string.h>

/* A MSG line's tail in parts: [reply, SP,] size digits, CR LF, payload, CR LF. */
#define TAIL_PARTS 6

static PyObject *str_plan, *str_qsubs, *str_psubs, *str_client, *str_sid_part, *str_limited,
    *str_delivered, *str_out, *str_pending, *str_out_msgs, *str_out_bytes, *str_stall_at,
    *str_over_stall_mark, *str_qplan, *str_queue_state, *str_max_msgs, *one;

/* Results with more queue groups than this go to Python (the picks are kept on the stack). */
#define MAX_GROUPS 16

/* The slot a __slots__ attribute of ``obj`` lives in, or NULL: not a plain slot (a property, an
   instance dict's attribute, a class with its own getattr or setattr), or read-only when
   ``writing``. Client, Subscription and their results keep their per-message state in slots:
   read and written here in place, the way member_get and member_set do, without the generic
   attribute machinery around them (callgrind, 1 -> wildcard queue group of 4, 64 subjects:
   PyObject_GetAttr and SetAttr were about a third of route_pubs). */
static PyObject **
slot_of(PyObject *obj, PyObject *name, int writing)
{
    PyTypeObject *type = Py_TYPE(obj);
    if (writing ? type->tp_setattro != PyObject_GenericSetAttr : type->tp_getattro != PyObject_GenericGetAttr)
        return NULL;
    PyObject *descr = _PyType_Lookup(type, name); /* (borrowed; from the type's method cache) */
    if (descr == NULL || !Py_IS_TYPE(descr, &PyMemberDescr_Type))
        return NULL;
    PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
    if (member->type != T_OBJECT_EX || (writing && (member->flags & READONLY)))
        return NULL;
    return (PyObject **)((char *)obj + member->offset);
}

/* obj.name, a new reference (NULL with an exception set, as PyObject_GetAttr). */
static PyObject *
get_attr(PyObject *obj, PyObject *name)
{
    PyObject **slot = slot_of(obj, name, 0);
    if (slot != NULL && *slot != NULL)
        return Py_NewRef(*slot);
    return PyObject_GetAttr(obj, name); /* (an unset slot raises its AttributeError there) */
}

/* obj.name = value (0, or -1 with an exception set, as PyObject_SetAttr). */
static int
set_attr(PyObject *obj, PyObject *name, PyObject *value)
{
    PyObject **slot = slot_of(obj, name, 1);
    if (slot == NULL)
        return PyObject_SetAttr(obj, name, value);
    PyObject *old = *slot;
    *slot = Py_NewRef(value);
    Py_XDECREF(old);
    return 0;
}

/* client._make_plan's tuple: (sub, sub.client, b"MSG <subject> " + sub.sid_part) for each plain
   subscription, in order; NULL on error. */
static PyObject *
make_plan(PyObject *psubs, PyObject *subject)
{
    PyObject *seq = PySequence_Fast(psubs, "psubs");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *plan = PyTuple_New(n);
    if (plan == NULL)
        goto fail;
    Py_ssize_t subject_len = PyBytes_GET_SIZE(subject);
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *sub = PySequence_Fast_GET_ITEM(seq, k);
        PyObject *client = get_attr(sub, str_client);
        if (client == NULL)
            goto fail;
        PyObject *sid_part = get_attr(sub, str_sid_part);
        if (sid_part == NULL || !PyBytes_Check(sid_part)) {
            if (sid_part != NULL)
                PyErr_SetString(PyExc_TypeError, "sid_part is not bytes");
            Py_XDECREF(sid_part);
            Py_DECREF(client);
            goto fail;
        }
        Py_ssize_t sid_len = PyBytes_GET_SIZE(sid_part);
        PyObject *head = PyBytes_FromStringAndSize(NULL, 4 + subject_len + 1 + sid_len);
        if (head == NULL) {
            Py_DECREF(sid_part);
            Py_DECREF(client);
            goto fail;
        }
        char *p = PyBytes_AS_STRING(head);
        memcpy(p, "MSG ", 4);
        memcpy(p + 4, PyBytes_AS_STRING(subject), (size_t)subject_len);
        p[4 + subject_len] = ' ';
        memcpy(p + 5 + subject_len, PyBytes_AS_STRING(sid_part), (size_t)sid_len);
        Py_DECREF(sid_part);
        PyObject *target = PyTuple_Pack(3, sub, client, head);
        Py_DECREF(client);
        Py_DECREF(head);
        if (target == NULL)
            goto fail;
        PyTuple_SET_ITEM(plan, k, target);
    }
    Py_DECREF(seq);
    return plan;
fail:
    Py_XDECREF(plan);
    Py_DECREF(seq);
    return NULL;
}

/* *value = obj.name (an int attribute); -1 on error. */
static int
get_ssize_attr(PyObject *obj, PyObject *name, Py_ssize_t *value)
{
    PyObject *attr = get_attr(obj, name);
    if (attr == NULL)
        return -1;
    *value = PyLong_AsSsize_t(attr);
    Py_DECREF(attr);
    return *value == -1 && PyErr_Occurred() ? -1 : 0;
}

/* obj.name += delta (an int attribute). */
static int
add_to_attr(PyObject *obj, PyObject *name, PyObject *delta)
{
    PyObject *value = get_attr(obj, name);
    if (value == NULL)
        return -1;
    PyObject *sum = PyNumber_Add(value, delta);
    Py_DECREF(value);
    if (sum == NULL)
        return -1;
    int rc = set_attr(obj, name, sum);
    Py_DECREF(sum);
    return rc;
}

/* Whether a sub may take a message here: 1 yes, 0 leave it to Python (sub.limited), -1 error. */
static int
unlimited(PyObject *sub)
{
    PyObject *limited = get_attr(sub, str_limited);
    if (limited == NULL)
        return -1;
    int is_limited = PyObject_IsTrue(limited);
    Py_DECREF(limited);
    return is_limited < 0 ? -1 : !is_limited;
}

/* The plan's targets followed by one member of each queue group, picked from a random start as
   Client._queue_targets picks it (a member is passed over when it is the publisher without
   echo, or has had its auto-unsubscribe maximum), with the groups' positions moved on; NULL
   with no error set: leave the message to Python (a picked member is limited, nobody gets it,
   or the result has no qplan yet), before anything changed. */
static PyObject *
with_queue_members(PyObject *result, PyObject *plan, PyObject *publisher, int echo)
{
    PyObject *targets = NULL;
    PyObject *qplan = get_attr(result, str_qplan);
    PyObject *queue_state = qplan == NULL ? NULL : get_attr(result, str_queue_state);
    if (queue_state == NULL)
        goto done;
    Py_ssize_t n_groups = PyTuple_CheckExact(qplan) ? PyTuple_GET_SIZE(qplan) : -1;
    if (n_groups < 0 || n_groups > MAX_GROUPS || !PyList_CheckExact(queue_state)
        || PyList_GET_SIZE(queue_state) != n_groups)
        goto done;
    PyObject *picked[MAX_GROUPS];
    Py_ssize_t group_of[MAX_GROUPS], moved_to[MAX_GROUPS];
    int n_picked = 0;
    for (Py_ssize_t g = 0; g < n_groups; g++) {
        PyObject *members = PyTuple_GET_ITEM(qplan, g);
        if (!PyTuple_CheckExact(members))
            goto done;
        Py_ssize_t n = PyTuple_GET_SIZE(members);
        /* The group's next random state and the member to start at (sublist.queue_pick). */
        PyObject *state_object = PyList_GET_ITEM(queue_state, g);
        if (!PyLong_CheckExact(state_object) || n <= 0)
            goto done;
        unsigned long long state = PyLong_AsUnsignedLongLong(state_object);
        if (state == (unsigned long long)-1 && PyErr_Occurred()) {
            PyErr_Clear(); /* (not a state this module wrote: Python handles the message) */
            goto done;
        }
        state &= 0xFFFFFFFFull;
        state ^= (state << 13) & 0xFFFFFFFFull;
        state ^= state >> 17;
        state ^= (state << 5) & 0xFFFFFFFFull;
        Py_ssize_t start = (Py_ssize_t)(state % (unsigned long long)n);
        for (Py_ssize_t step = 0; step < n; step++) {
            PyObject *entry = PyTuple_GET_ITEM(members, (start + step) % n);
            if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 3
                || !PyBytes_CheckExact(PyTuple_GET_ITEM(entry, 2)))
                goto done;
            PyObject *sub = PyTuple_GET_ITEM(entry, 0);
            if (!echo && PyTuple_GET_ITEM(entry, 1) == publisher)
                continue;
            Py_ssize_t max_msgs, delivered;
            if (get_ssize_attr(sub, str_max_msgs, &max_msgs) < 0)
                goto done;
            if (max_msgs) {
                if (get_ssize_attr(sub, str_delivered, &delivered) < 0)
                    goto done;
                if (delivered >= max_msgs)
                    continue;
            }
            if (unlimited(sub) <= 0)
                goto done;
            picked[n_picked] = entry;
            group_of[n_picked] = g;
            moved_to[n_picked] = (Py_ssize_t)state;
            n_picked++;
            break;
        }
    }
    Py_ssize_t n_plan = PyTuple_GET_SIZE(plan);
    if (n_plan + n_picked == 0)
        goto done;
    targets = PyTuple_New(n_plan + n_picked);
    if (targets == NULL)
        goto done;
    for (Py_ssize_t t = 0; t < n_plan; t++) {
        Py_INCREF(PyTuple_GET_ITEM(plan, t));
        PyTuple_SET_ITEM(targets, t, PyTuple_GET_ITEM(plan, t));
    }
    for (int k = 0; k < n_picked; k++) {
        Py_INCREF(picked[k]);
        PyTuple_SET_ITEM(targets, n_plan + k, picked[k]);
        PyObject *position = PyLong_FromUnsignedLongLong((unsigned long long)moved_to[k]);
        if (position == NULL || PyList_SetItem(queue_state, group_of[k], position) < 0) {
            Py_CLEAR(targets);
            break;
        }
    }
done:
    Py_XDECREF(qplan);
    Py_XDECREF(queue_state);
    return targets;
}

/* A payload's bytes: a bytes object, or a memoryview of one (the parser's zero-copy slice of
   its chunk, parser.ZERO_COPY_MIN and up: 1 KiB messages whose subject changes came here only
   as bytes before, and went to Python); 0 when it is neither or the view is not a plain byte
   run. */
static const char *
payload_bytes(PyObject *payload)
{
    if (PyBytes_CheckExact(payload))
        return PyBytes_AS_STRING(payload);
    if (!PyMemoryView_Check(payload))
        return NULL;
    /* (a released view: Python's own path raises for it) */
    if (((PyMemoryViewObject *)payload)->flags & _Py_MEMORYVIEW_RELEASED)
        return NULL;
    Py_buffer *view = PyMemoryView_GET_BUFFER(payload);
    if (view->obj == NULL || !PyBytes_CheckExact(view->obj) || view->ndim != 1 || view->itemsize != 1
        || (view->strides != NULL && view->strides[0] != 1))
        return NULL;
    return (const char *)view->buf;
}

/* The payload's length, or PY_SSIZE_T_MAX when payload_bytes would refuse it. */
static Py_ssize_t
payload_size(PyObject *payload)
{
    if (PyBytes_CheckExact(payload))
        return PyBytes_GET_SIZE(payload);
    return payload_bytes(payload) == NULL ? PY_SSIZE_T_MAX : PyMemoryView_GET_BUFFER(payload)->len;
}

/* Whether this Pub can be delivered here; 0: leave it to Python, -1: error. On 1, *plan_out is a
   new reference to a tuple of its (sub, client, head) targets: the cached result's plan, and with
   queue groups one member of each too. A subject not in the cache is matched here with
   match_uncached (which caches it) and *missed is set: the caller counts the miss, whether the
   message is taken or not. A result without its plan gets it here, as Client._route would give
   it (with queue groups, Python builds the plan and qplan on the subject's first message). */
static int
eligible(PyObject *op, PyObject *cache, PyObject *match, PyObject *publisher, int echo, Py_ssize_t big,
         PyObject **plan_out, int *missed)
{
    PyObject *subject = PyTuple_GET_ITEM(op, 0);
    PyObject *reply = PyTuple_GET_ITEM(op, 1);
    PyObject *header_size = PyTuple_GET_ITEM(op, 2);
    PyObject *sizes = PyTuple_GET_ITEM(op, 3);
    PyObject *payload = PyTuple_GET_ITEM(op, 4);
    *missed = 0;
    if (!PyLong_CheckExact(header_size) || !PyBytes_CheckExact(sizes) || payload_size(payload) >= big
        || (reply != Py_None && !PyBytes_CheckExact(reply)) || !PyBytes_CheckExact(subject))
        return 0;
    long hs = PyLong_AsLong(header_size);
    if (hs == -1 && PyErr_Occurred())
        return -1;
    if (hs > 0)
        return 0;
    PyObject *result = PyDict_GetItemWithError(cache, subject);
    if (result != NULL) {
        Py_INCREF(result);
    } else {
        if (PyErr_Occurred())
            return -1;
        result = PyObject_CallOneArg(match, subject);
        if (result == NULL)
            return -1;
        *missed = 1;
    }
    PyObject *plan = NULL;
    PyObject *qsubs = get_attr(result, str_qsubs);
    if (qsubs == NULL)
        goto error;
    int has_queues = PyObject_IsTrue(qsubs);
    Py_DECREF(qsubs);
    if (has_queues < 0)
        goto error;
    plan = get_attr(result, str_plan);
    if (plan == NULL)
        goto error;
    if (plan == Py_None && has_queues)
        goto python;
    if (plan == Py_None) {
        Py_DECREF(plan);
        plan = NULL;
        PyObject *psubs = get_attr(result, str_psubs);
        if (psubs == NULL)
            goto error;
        Py_ssize_t n_psubs = PyObject_Length(psubs);
        if (n_psubs <= 0) { /* nothing to deliver (or an error): Python decides what follows */
            Py_DECREF(psubs);
            if (n_psubs < 0)
                goto error;
            goto python;
        }
        plan = make_plan(psubs, subject);
        Py_DECREF(psubs);
        if (plan == NULL || set_attr(result, str_plan, plan) < 0)
            goto error;
    }
    if (!PyTuple_CheckExact(plan) || (PyTuple_GET_SIZE(plan) == 0 && !has_queues))
        goto python;
    for (Py_ssize_t t = 0; t < PyTuple_GET_SIZE(plan); t++) {
        PyObject *target = PyTuple_GET_ITEM(plan, t);
        if (!PyTuple_CheckExact(target) || PyTuple_GET_SIZE(target) != 3
            || !PyBytes_CheckExact(PyTuple_GET_ITEM(target, 2)))
            goto python;
        if (!echo && PyTuple_GET_ITEM(target, 1) == publisher)
            goto python;
        int ok = unlimited(PyTuple_GET_ITEM(target, 0));
        if (ok < 0)
            goto error;
        if (!ok)
            goto python;
    }
    if (has_queues) {
        PyObject *targets = with_queue_members(result, plan, publisher, echo);
        if (targets == NULL) {
            if (PyErr_Occurred())
                goto error;
            goto python;
        }
        Py_SETREF(plan, targets);
    }
    Py_DECREF(result);
    *plan_out = plan;
    return 1;
python:
    Py_XDECREF(plan);
    Py_DECREF(result);
    return 0;
error:
    Py_XDECREF(plan);
    Py_DECREF(result);
    return -1;
}

/* Queue one message to one target as Client._route's simple loop does; sets *stalled when the
   subscriber went over its stall mark (after calling the publisher's _over_stall_mark). */
static int
deliver(PyObject *target, const char *tail_parts[TAIL_PARTS], const Py_ssize_t tail_lens[TAIL_PARTS],
        Py_ssize_t tail_len, PyObject *size_obj, PyObject *publisher, PyObject *touched,
        int *stalled)
{
    PyObject *sub = PyTuple_GET_ITEM(target, 0);
    PyObject *client = PyTuple_GET_ITEM(target, 1);
    PyObject *head = PyTuple_GET_ITEM(target, 2);
    Py_ssize_t head_len = PyBytes_GET_SIZE(head);
    if (add_to_attr(sub, str_delivered, one) < 0) /* nats-server counts every delivery (sub.nm) */
        return -1;
    PyObject *data = PyBytes_FromStringAndSize(NULL, head_len + tail_len);
    if (data == NULL)
        return -1;
    char *p = PyBytes_AS_STRING(data);
    memcpy(p, PyBytes_AS_STRING(head), (size_t)head_len);
    p += head_len;
    for (int k = 0; k < TAIL_PARTS; k++) {
        memcpy(p, tail_parts[k], (size_t)tail_lens[k]);
        p += tail_lens[k];
    }
    PyObject *out = get_attr(client, str_out);
    if (out == NULL || !PyList_Check(out)) {
        if (out != NULL)
            PyErr_SetString(PyExc_TypeError, "client.out is not a list");
        Py_XDECREF(out);
        Py_DECREF(data);
        return -1;
    }
    int rc = 0;
    if (PyList_GET_SIZE(out) == 0) /* a non-empty list is already due to be flushed */
        rc = PySet_Add(touched, client);
    if (rc == 0)
        rc = PyList_Append(out, data);
    Py_DECREF(out);
    Py_ssize_t data_len = PyBytes_GET_SIZE(data);
    Py_DECREF(data);
    if (rc < 0)
        return -1;
    Py_ssize_t pending, stall_at;
    if (get_ssize_attr(client, str_pending, &pending) < 0)
        return -1;
    pending += data_len;
    PyObject *pending_obj = PyLong_FromSsize_t(pending);
    if (pending_obj == NULL)
        return -1;
    rc = set_attr(client, str_pending, pending_obj);
    Py_DECREF(pending_obj);
    if (rc < 0 || add_to_attr(client, str_out_msgs, one) < 0 || add_to_attr(client, str_out_bytes, size_obj) < 0)
        return -1;
    if (get_ssize_attr(client, str_stall_at, &stall_at) < 0)
        return -1;
    if (pending > stall_at) {
        PyObject *r = PyObject_CallMethodOneArg(publisher, str_over_stall_mark, client);
        if (r == NULL)
            return -1;
        Py_DECREF(r);
        *stalled = 1;
    }
    return 0;
}

/* route_pubs(ops, start, cache, match_uncached, publisher, echo, touched, pub_type, big)
   -> (next, messages, payload bytes, deliveries, delivered payload bytes, misses, stop_missed)

   Delivers ops[start:] while each is a Pub it can take (see the module comment) and returns
   the index of the first one it did not take (or the one after a stall). ``misses`` counts the
   messages taken that missed the cache; ``stop_missed`` is 1 when the op it stopped at missed
   it (it is cached now, so the caller's own lookup will find it: the caller counts a miss). */
static PyObject *
route_pubs(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 9 || !PyList_Check(args[0]) || !PyDict_Check(args[2]) || !PySet_Check(args[6])
        || !PyType_Check(args[7])) {
        PyErr_SetString(PyExc_TypeError,
                        "route_pubs(ops, start, cache, match_uncached, publisher, echo, touched, pub_type, big)");
        return NULL;
    }
    PyObject *ops = args[0], *cache = args[2], *match = args[3], *publisher = args[4], *touched = args[6];
    PyTypeObject *pub_type = (PyTypeObject *)args[7];
    Py_ssize_t i = PyLong_AsSsize_t(args[1]);
    Py_ssize_t big = PyLong_AsSsize_t(args[8]);
    int echo = PyObject_IsTrue(args[5]);
    if ((i == -1 || big == -1 || echo < 0) && PyErr_Occurred())
        return NULL;
    Py_ssize_t messages = 0, nbytes = 0, deliveries = 0, delivered_bytes = 0, misses = 0;
    int stalled = 0, missed = 0;
    for (; i < PyList_GET_SIZE(ops) && !stalled; i++) {
        PyObject *op = PyList_GET_ITEM(ops, i);
        if (Py_TYPE(op) != pub_type || PyTuple_GET_SIZE(op) != 5)
            break;
        PyObject *plan = NULL;
        int ok = eligible(op, cache, match, publisher, echo, big, &plan, &missed);
        if (ok < 0)
            return NULL;
        if (ok == 0)
            break;
        misses += missed;
        missed = 0;
        /* The tail every subscriber shares: [reply SP] size CRLF payload CRLF, copied from
           its parts into each subscriber's bytes (no tail object of its own). */
        PyObject *reply = PyTuple_GET_ITEM(op, 1);
        PyObject *sizes = PyTuple_GET_ITEM(op, 3);
        PyObject *payload = PyTuple_GET_ITEM(op, 4);
        int has_reply = reply != Py_None;
        Py_ssize_t size = payload_size(payload); /* (eligible checked it: bytes or a plain view) */
        const char *parts[TAIL_PARTS] = {
            has_reply ? PyBytes_AS_STRING(reply) : "", " ", PyBytes_AS_STRING(sizes), "\r\n",
            payload_bytes(payload), "\r\n",
        };
        Py_ssize_t lens[TAIL_PARTS] = {
            has_reply ? PyBytes_GET_SIZE(reply) : 0, has_reply, PyBytes_GET_SIZE(sizes), 2, size, 2,
        };
        Py_ssize_t tail_len = 0;
        for (int k = 0; k < TAIL_PARTS; k++)
            tail_len += lens[k];
        PyObject *size_obj = PyLong_FromSsize_t(size);
        int rc = size_obj == NULL ? -1 : 0;
        Py_ssize_t t = 0;
        for (; rc == 0 && t < PyTuple_GET_SIZE(plan); t++)
            rc = deliver(PyTuple_GET_ITEM(plan, t), parts, lens, tail_len, size_obj, publisher, touched, &stalled);
        Py_XDECREF(size_obj);
        Py_DECREF(plan);
        if (rc < 0)
            return NULL;
        messages++;
        nbytes += size;
        deliveries += t;
        delivered_bytes += size * t;
    }
    return Py_BuildValue("(nnnnnni)", i, messages, nbytes, deliveries, delivered_bytes, misses, missed);
}

static PyMethodDef methods[] = {
    {"route_pubs", (PyCFunction)(void (*)(void))route_pubs, METH_FASTCALL,
     "Deliver small plain PUBs exactly as Client._process_ops would (see module doc)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "natserver.server._croute",
    "Compiled twin of the delivery loop's common case.", -1, methods,
};

PyMODINIT_FUNC
PyInit__croute(void)
{
#define INTERN(var, text)                                \
    if ((var = PyUnicode_InternFromString(text)) == NULL) \
        return NULL;
    INTERN(str_plan, "plan")
    INTERN(str_qsubs, "qsubs")
    INTERN(str_qplan, "qplan")
    INTERN(str_queue_state, "queue_state")
    INTERN(str_max_msgs, "max_msgs")
    INTERN(str_psubs, "psubs")
    INTERN(str_client, "client")
    INTERN(str_sid_part, "sid_part")
    INTERN(str_limited, "limited")
    INTERN(str_delivered, "delivered")
    INTERN(str_out, "out")
    INTERN(str_pending, "pending")
    INTERN(str_out_msgs, "out_msgs")
    INTERN(str_out_bytes, "out_bytes")
    INTERN(str_stall_at, "_stall_at")
    INTERN(str_over_stall_mark, "_over_stall_mark")
#undef INTERN
    one = PyLong_FromLong(1);
    if (one == NULL)
        return NULL;
    return PyModule_Create(&module_def);
}
