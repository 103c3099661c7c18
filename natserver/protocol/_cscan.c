/* The compiled twin of the parser's per-message PUB loop (natserver/protocol/parser.py).

   scan_pubs() takes over the one piece of Parser.parse() that costs the most when subjects and
   sizes change every message: reading "PUB <subject> [reply] <size>\r\n<payload>\r\n" control
   lines one after another (callgrind: about 10.8k instructions a message in Python, see
   benchmarks/README.md). It accepts exactly what the Python fast path accepts and nothing else:
   at the first byte it is not sure of (not a PUB, a size that is not canonical digits (five at
   most), a line without CR LF, an incomplete payload, \x0b or \x0c, a control line over the limit,
   or the same subject twice in a row, which may open a run) it stops before that message and
   the Python code goes on from there, so the pure-Python path stays the reference and the ops
   are identical either way (tests/protocol/test_cscan.py feeds both).

   Built by setup.py as an optional extension: without a compiler, or with
   NATSERVER_NO_EXTENSIONS=1 at run time, the parser runs in Python alone. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

/* The Python fast path's table holds canonical digits of 0..1024 (parser._SIZE_OF), whose
   bytes objects are shared here too; bigger sizes of at most MAX_FAST_DIGITS canonical digits
   (parser._FAST_SIZE_DIGITS, _big_size) get bytes of their own. */
#define MAX_FAST_SIZE 1024
#define MAX_FAST_DIGITS 5
/* parser.ZERO_COPY_MIN: payloads from this size on are memoryview slices, not copies. */
#define ZERO_COPY_MIN 512
/* parser._LINE_WINDOW: how far a run's "<reply> <size>" line is looked for. */
#define LINE_WINDOW 128

static PyObject *size_digits[MAX_FAST_SIZE + 1]; /* b"0" .. b"1024", shared, never freed */
static PyObject *minus_one;

/* The size as canonical decimal digits (no sign, no leading zero, at most MAX_FAST_DIGITS), or
   -1. */
static Py_ssize_t
canonical_size(const char *p, Py_ssize_t n)
{
    if (n < 1 || n > MAX_FAST_DIGITS || (n > 1 && p[0] == '0'))
        return -1;
    Py_ssize_t v = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        v = v * 10 + (p[i] - '0');
    }
    return v;
}

/* The Pub's size field: the shared digits of a table size, else new bytes of ``digits``. */
static PyObject *
size_object(Py_ssize_t size, const char *digits, Py_ssize_t n)
{
    return size <= MAX_FAST_SIZE ? Py_NewRef(size_digits[size]) : PyBytes_FromStringAndSize(digits, n);
}

static inline int
is_blank(char c)
{
    return c == ' ' || c == '\t';
}

/* The control line of the op whose arguments start at ``arg_start``: its blank-separated
   tokens (at most ``max_tokens``) into tok_start/tok_end, and where its LF is (``*nl``).
   Returns how many tokens, or -1 when the line is not one the fast paths take: no LF yet, no
   CR before it, longer than max_control_line, more tokens, or a CR, \x0b or \x0c in a token
   (those lines go to Python). */
static int
arg_tokens(const char *buf, Py_ssize_t len, Py_ssize_t arg_start, Py_ssize_t max_control_line, int max_tokens,
           Py_ssize_t *tok_start, Py_ssize_t *tok_end, Py_ssize_t *nl)
{
    const char *nlp = memchr(buf + arg_start, '\n', (size_t)(len - arg_start));
    if (nlp == NULL)
        return -1;
    *nl = nlp - buf;
    if (*nl == arg_start || buf[*nl - 1] != '\r')
        return -1;
    Py_ssize_t arg_end = *nl - 1; /* the arguments: buf[arg_start:arg_end] */
    if (arg_end - arg_start > max_control_line)
        return -1;
    int n_tok = 0;
    Py_ssize_t i = arg_start;
    while (i < arg_end) {
        if (is_blank(buf[i])) {
            i++;
            continue;
        }
        if (n_tok == max_tokens)
            return -1;
        tok_start[n_tok] = i;
        while (i < arg_end && !is_blank(buf[i])) {
            char c = buf[i];
            if (c == '\r' || c == '\x0b' || c == '\x0c')
                return -1;
            i++;
        }
        tok_end[n_tok++] = i;
    }
    return n_tok;
}

/* scan_pubs(buf, pos, view, ops, pub_type, max_payload, max_control_line, repeat, coalesce)
   -> (pos, last_start)

   Appends a pub_type(subject, reply, -1, size digits, payload) to ``ops`` for each PUB from
   ``pos`` on that the Python fast path would accept; stops before the first one it would not,
   and (when ``coalesce``) before one whose subject equals the previous one's (``repeat`` is
   the subject of the Pub appended just before the call, or None). Returns the position reached
   and where the last appended PUB started (-1: none appended). */
static PyObject *
scan_pubs(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "scan_pubs takes 9 arguments");
        return NULL;
    }
    PyObject *buf_obj = args[0];
    PyObject *view = args[2];
    PyObject *ops = args[3];
    PyTypeObject *pub_type = (PyTypeObject *)args[4];
    PyObject *repeat = args[7];
    if (!PyBytes_CheckExact(buf_obj) || !PyList_CheckExact(ops) || !PyType_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError, "scan_pubs: bytes, list and type expected");
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    Py_ssize_t max_payload = PyLong_AsSsize_t(args[5]);
    Py_ssize_t max_control_line = PyLong_AsSsize_t(args[6]);
    int coalesce = PyObject_IsTrue(args[8]);
    if (PyErr_Occurred() || coalesce < 0)
        return NULL;

    const char *buf = PyBytes_AS_STRING(buf_obj);
    Py_ssize_t len = PyBytes_GET_SIZE(buf_obj);
    const char *last_subject = NULL;
    Py_ssize_t last_subject_len = 0;
    if (repeat != Py_None && PyBytes_Check(repeat)) {
        last_subject = PyBytes_AS_STRING(repeat);
        last_subject_len = PyBytes_GET_SIZE(repeat);
    }
    Py_ssize_t last_start = -1;

    while (pos >= 0 && len - pos >= 4 && memcmp(buf + pos, "PUB ", 4) == 0) {
        /* Up to three tokens: subject, [reply,] size. */
        Py_ssize_t tok_start[3], tok_end[3], nl;
        int n_tok = arg_tokens(buf, len, pos + 4, max_control_line, 3, tok_start, tok_end, &nl);
        if (n_tok < 2)
            break;
        int last_tok = n_tok - 1;
        Py_ssize_t size = canonical_size(buf + tok_start[last_tok], tok_end[last_tok] - tok_start[last_tok]);
        if (size < 0 || size > max_payload)
            break;
        Py_ssize_t start = nl + 1, stop = start + size;
        if (stop + 2 > len || buf[stop] != '\r' || buf[stop + 1] != '\n')
            break;
        Py_ssize_t subject_len = tok_end[0] - tok_start[0];
        if (coalesce && last_subject != NULL && subject_len == last_subject_len &&
            memcmp(buf + tok_start[0], last_subject, (size_t)subject_len) == 0)
            break; /* the same subject again: Python decides whether a run opens */

        PyObject *subject = PyBytes_FromStringAndSize(buf + tok_start[0], subject_len);
        if (subject == NULL)
            return NULL;
        PyObject *reply;
        if (n_tok == 3) {
            reply = PyBytes_FromStringAndSize(buf + tok_start[1], tok_end[1] - tok_start[1]);
            if (reply == NULL) {
                Py_DECREF(subject);
                return NULL;
            }
        } else {
            reply = Py_NewRef(Py_None);
        }
        PyObject *payload = size < ZERO_COPY_MIN ? PyBytes_FromStringAndSize(buf + start, size)
                                                 : PySequence_GetSlice(view, start, stop);
        PyObject *digits = payload == NULL ? NULL
            : size_object(size, buf + tok_start[last_tok], tok_end[last_tok] - tok_start[last_tok]);
        /* A NamedTuple subclass of tuple: allocated as one, its five items set in place. */
        PyObject *op = digits == NULL ? NULL : pub_type->tp_alloc(pub_type, 5);
        if (op == NULL) {
            Py_DECREF(subject);
            Py_DECREF(reply);
            Py_XDECREF(payload);
            Py_XDECREF(digits);
            return NULL;
        }
        PyTuple_SET_ITEM(op, 0, subject);
        PyTuple_SET_ITEM(op, 1, reply);
        PyTuple_SET_ITEM(op, 2, Py_NewRef(minus_one));
        PyTuple_SET_ITEM(op, 3, digits);
        PyTuple_SET_ITEM(op, 4, payload);
        int failed = PyList_Append(ops, op);
        Py_DECREF(op);
        if (failed)
            return NULL;
        last_start = pos;
        last_subject = buf + tok_start[0];
        last_subject_len = subject_len;
        pos = stop + 2;
    }
    return Py_BuildValue("(nn)", pos, last_start);
}

/* scan_hpubs(buf, pos, view, ops, pub_type, max_payload, max_control_line) -> pos

   The twin of Parser._hpubs: appends a pub_type(subject, reply, header size, "hdr total"
   digits (or the total's alone when the header size is 0), payload) to ``ops`` for each
   upper-case "HPUB subject [reply] hdr_size size" line from ``pos`` on whose tokens are
   separated by blanks, whose sizes are canonical digits, five at most (the header's no
   larger than the total, the total within max_payload), whose arguments fit
   max_control_line, with its payload and CR LF at hand; stops before the first it is not sure
   of, where _hpubs (then the exact path) goes on. Returns the position reached. */
static PyObject *
scan_hpubs(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7 || !PyBytes_CheckExact(args[0]) || !PyList_CheckExact(args[3]) || !PyType_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError, "scan_hpubs(buf, pos, view, ops, pub_type, max_payload, max_control_line)");
        return NULL;
    }
    PyObject *view = args[2];
    PyObject *ops = args[3];
    PyTypeObject *pub_type = (PyTypeObject *)args[4];
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    Py_ssize_t max_payload = PyLong_AsSsize_t(args[5]);
    Py_ssize_t max_control_line = PyLong_AsSsize_t(args[6]);
    if (PyErr_Occurred())
        return NULL;
    const char *buf = PyBytes_AS_STRING(args[0]);
    Py_ssize_t len = PyBytes_GET_SIZE(args[0]);

    while (pos >= 0 && len - pos >= 5 && memcmp(buf + pos, "HPUB ", 5) == 0) {
        /* Up to four tokens: subject, [reply,] header size, size. */
        Py_ssize_t tok_start[4], tok_end[4], nl;
        int n_tok = arg_tokens(buf, len, pos + 5, max_control_line, 4, tok_start, tok_end, &nl);
        if (n_tok < 3)
            break;
        Py_ssize_t header_size = canonical_size(buf + tok_start[n_tok - 2], tok_end[n_tok - 2] - tok_start[n_tok - 2]);
        Py_ssize_t size = canonical_size(buf + tok_start[n_tok - 1], tok_end[n_tok - 1] - tok_start[n_tok - 1]);
        if (header_size < 0 || size < 0 || header_size > size || size > max_payload)
            break;
        Py_ssize_t start = nl + 1, stop = start + size;
        if (stop + 2 > len || buf[stop] != '\r' || buf[stop + 1] != '\n')
            break;

        PyObject *subject = PyBytes_FromStringAndSize(buf + tok_start[0], tok_end[0] - tok_start[0]);
        PyObject *reply = n_tok == 4 ? PyBytes_FromStringAndSize(buf + tok_start[1], tok_end[1] - tok_start[1])
                                     : Py_NewRef(Py_None);
        PyObject *hsize = PyLong_FromSsize_t(header_size);
        PyObject *digits = header_size > 0 ? PyBytes_FromFormat("%zd %zd", header_size, size)
                                           : size_object(size, buf + tok_start[n_tok - 1], tok_end[n_tok - 1] - tok_start[n_tok - 1]);
        PyObject *payload = size < ZERO_COPY_MIN ? PyBytes_FromStringAndSize(buf + start, size)
                                                 : PySequence_GetSlice(view, start, stop);
        PyObject *op = NULL;
        if (subject != NULL && reply != NULL && hsize != NULL && digits != NULL && payload != NULL)
            op = pub_type->tp_alloc(pub_type, 5);
        if (op == NULL) {
            Py_XDECREF(subject);
            Py_XDECREF(reply);
            Py_XDECREF(hsize);
            Py_XDECREF(digits);
            Py_XDECREF(payload);
            return NULL;
        }
        PyTuple_SET_ITEM(op, 0, subject);
        PyTuple_SET_ITEM(op, 1, reply);
        PyTuple_SET_ITEM(op, 2, hsize);
        PyTuple_SET_ITEM(op, 3, digits);
        PyTuple_SET_ITEM(op, 4, payload);
        int failed = PyList_Append(ops, op);
        Py_DECREF(op);
        if (failed)
            return NULL;
        pos = stop + 2;
    }
    return PyLong_FromSsize_t(pos);
}

/* Where the first CR LF of p[0:window] starts, or -1. */
static Py_ssize_t
crlf_in(const char *p, Py_ssize_t window)
{
    for (Py_ssize_t i = 0; i + 1 < window; i++) {
        if (p[i] == '\r' && p[i + 1] == '\n')
            return i;
    }
    return -1;
}

/* scan_run(buf, pos, prefix, run_size, max_payload, max_control_line)
   -> (pos, messages, payload bytes, all of size run_size, some with a reply)

   The rest of an open run: the messages from ``pos`` on that are exactly
   "<prefix>[<reply> ]<size>\r\n<payload>\r\n" (canonical size digits, five at most, within
   the limits; a reply of one token), as the Python run loop reads them; it stops where that
   loop would. */
static PyObject *
scan_run(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6 || !PyBytes_CheckExact(args[0]) || !PyBytes_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError, "scan_run(buf, pos, prefix, run_size, max_payload, max_control_line)");
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    Py_ssize_t run_size = PyLong_AsSsize_t(args[3]);
    Py_ssize_t max_payload = PyLong_AsSsize_t(args[4]);
    Py_ssize_t max_control_line = PyLong_AsSsize_t(args[5]);
    if (PyErr_Occurred())
        return NULL;
    const char *buf = PyBytes_AS_STRING(args[0]);
    Py_ssize_t len = PyBytes_GET_SIZE(args[0]);
    const char *prefix = PyBytes_AS_STRING(args[2]);
    Py_ssize_t skip = PyBytes_GET_SIZE(args[2]);
    Py_ssize_t count = 0, bytes = 0;
    int uniform = 1, replies = 0;
    while (pos >= 0 && len - pos >= skip && memcmp(buf + pos, prefix, (size_t)skip) == 0) {
        /* The digits end at the first CR LF of the next MAX_FAST_DIGITS + 2 bytes (the Python
           loop's window, parser._SIZE_WINDOW). */
        Py_ssize_t d = pos + skip, window = len - d < MAX_FAST_DIGITS + 2 ? len - d : MAX_FAST_DIGITS + 2;
        Py_ssize_t n = crlf_in(buf + d, window);
        Py_ssize_t size = canonical_size(buf + d, n < 0 ? window : n);
        int with_reply = 0;
        if (size < 0) {
            /* "<reply> <size>": the first CR LF of the next LINE_WINDOW bytes, the line's last
               space before the size, a reply of one token (no blank, CR, LF, \x0b, \x0c). */
            window = len - d < LINE_WINDOW ? len - d : LINE_WINDOW;
            n = crlf_in(buf + d, window);
            if (n < 0)
                break;
            Py_ssize_t space = n - 1;
            while (space >= 0 && buf[d + space] != ' ')
                space--;
            if (space <= 0)
                break;
            int token = 1;
            for (Py_ssize_t i = 0; i < space && token; i++) {
                char c = buf[d + i];
                token = !(c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\x0b' || c == '\x0c');
            }
            if (!token)
                break;
            size = canonical_size(buf + d + space + 1, n - space - 1);
            if (size < 0)
                break;
            with_reply = 1;
        }
        if (n < 0 || size > max_payload)
            break;
        Py_ssize_t nl = d + n + 1;
        if (nl - pos - 5 > max_control_line)
            break;
        Py_ssize_t stop = nl + 1 + size;
        if (stop + 2 > len || buf[stop] != '\r' || buf[stop + 1] != '\n')
            break;
        count++;
        bytes += size;
        if (size != run_size)
            uniform = 0;
        replies |= with_reply;
        pos = stop + 2;
    }
    return Py_BuildValue("(nnnOO)", pos, count, bytes, uniform ? Py_True : Py_False, replies ? Py_True : Py_False);
}

/* restride(data, count, skip, head) -> bytes

   ``data`` is ``count`` messages of one length each (a PubRun whose payloads have one size and
   no reply: its control lines are alike too); each message's first ``skip`` bytes (the PUB
   prefix) are replaced with ``head`` (the MSG head). What data.replace(prefix, head) gives when
   the prefix is in no payload, in one copy and without searching (callgrind, 1 -> 1 1 KiB: the
   search was a sixth of a message's instructions), and exact even when a payload holds it.
   ``data`` may be any contiguous buffer: a long run is a memoryview of the parser's read. */
static PyObject *
restride(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyObject_CheckBuffer(args[0]) || !PyBytes_CheckExact(args[3])) {
        PyErr_SetString(PyExc_TypeError, "restride(data: bytes-like, count: int, skip: int, head: bytes)");
        return NULL;
    }
    Py_ssize_t count = PyLong_AsSsize_t(args[1]);
    Py_ssize_t skip = PyLong_AsSsize_t(args[2]);
    if (PyErr_Occurred())
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const char *data = view.buf;
    Py_ssize_t len = view.len;
    const char *head = PyBytes_AS_STRING(args[3]);
    Py_ssize_t head_len = PyBytes_GET_SIZE(args[3]);
    if (count <= 0 || len % count != 0 || skip < 0 || skip > len / count) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "restride: data is not count messages of one length");
        return NULL;
    }
    Py_ssize_t stride = len / count, rest = stride - skip;
    PyObject *out = PyBytes_FromStringAndSize(NULL, count * (head_len + rest));
    if (out != NULL) {
        char *p = PyBytes_AS_STRING(out);
        for (Py_ssize_t i = 0; i < count; i++) {
            memcpy(p, head, (size_t)head_len);
            memcpy(p + head_len, data + i * stride + skip, (size_t)rest);
            p += head_len + rest;
        }
    }
    PyBuffer_Release(&view);
    return out;
}

static PyMethodDef methods[] = {
    {"scan_run", (PyCFunction)(void (*)(void))scan_run, METH_FASTCALL,
     "Read the rest of an open run of PUBs exactly as the Python run loop would."},
    {"restride", (PyCFunction)(void (*)(void))restride, METH_FASTCALL,
     "Replace the prefix of each of count equal-length messages (see the comment above)."},
    {"scan_pubs", (PyCFunction)(void (*)(void))scan_pubs, METH_FASTCALL,
     "Parse consecutive plain PUBs exactly as the Python fast path would (see module doc)."},
    {"scan_hpubs", (PyCFunction)(void (*)(void))scan_hpubs, METH_FASTCALL,
     "Parse consecutive HPUBs as Parser._hpubs would, stopping at any doubt."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "natserver.protocol._cscan",
    "Compiled twin of the parser's per-message PUB loop.", -1, methods,
};

PyMODINIT_FUNC
PyInit__cscan(void)
{
    minus_one = PyLong_FromLong(-1);
    if (minus_one == NULL)
        return NULL;
    for (int n = 0; n <= MAX_FAST_SIZE; n++) {
        size_digits[n] = PyBytes_FromFormat("%d", n);
        if (size_digits[n] == NULL)
            return NULL;
    }
    return PyModule_Create(&module_def);
}
