/* The broker's request-log lines read natively: one job, the plain case only.

   `block_entries(data, end)` reads the complete lines of data[:end] (each
   ending in "\n") as kdissect.conn.brokerlog.parse's block path reads them
   with msgspec, and returns their entries as `Entry` objects, or None when
   any line is not the plain case (another layout, a line without the marker,
   JSON that is not strictly valid, an escape or a non-ASCII byte in a field
   the join uses or in a key, a duplicated member, a number form outside the
   plain ones, an IPv6 or named host, anything unexpected). None sends the
   block to the Python path, which decides as it always did: this module only
   accepts lines on which both paths give the same values, and declines the
   rest.

   An `Entry` holds the fields the join and the tables read: the time (ns),
   the identity tuple (client endpoint, correlation id, api key), the
   endpoints and connection id, the header's version and client id, the
   seven broker times as C doubles (a float or None made only when read:
   the entries never joined never make them), the security protocol,
   principal, listener and client software. Repeated strings (endpoints,
   client ids, principals) are shared through a small cache. Nothing of the
   request and response bodies is kept: they are validated and skipped.

   `take(exchange, entry)` is join._take for a native entry: its columns and
   network_ms set on the joined exchange (`configure` gives it join._take,
   which it calls for anything else).

   Built by tools/build_native.py beside the mypyc group; see
   kdissect/native.py for when a build is used. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#define TIMES 7
#define MAX_DEPTH 64

typedef struct {
    PyObject_HEAD
    PyObject *ts;                /* int: ns since the epoch (UTC), the line's time */
    PyObject *key;               /* (client, correlation id, api key) */
    PyObject *client;            /* "ip:port" of the connection's client side */
    PyObject *broker;
    PyObject *connection;        /* the broker's connection id */
    PyObject *client_id;         /* str or None */
    PyObject *security_protocol; /* str or None, and the next four */
    PyObject *principal;
    PyObject *listener;
    PyObject *software_name;
    PyObject *software_version;
    double times[TIMES];         /* total, request queue, local, remote, throttle, response queue, send */
    int api_version;
    unsigned char present;       /* bit i: times[i] was given (else None) */
    char matched;
} Entry;

static PyTypeObject EntryType;

static void entry_dealloc(Entry *self) {
    Py_XDECREF(self->ts);
    Py_XDECREF(self->key);
    Py_XDECREF(self->client);
    Py_XDECREF(self->broker);
    Py_XDECREF(self->connection);
    Py_XDECREF(self->client_id);
    Py_XDECREF(self->security_protocol);
    Py_XDECREF(self->principal);
    Py_XDECREF(self->listener);
    Py_XDECREF(self->software_name);
    Py_XDECREF(self->software_version);
    PyObject_Free(self);
}

static PyObject *time_value(Entry *self, int i) {
    if (!(self->present & (1u << i)))
        Py_RETURN_NONE;
    return PyFloat_FromDouble(self->times[i]);
}

static PyObject *get_total(Entry *s, void *c) { return time_value(s, 0); }
static PyObject *get_request_queue(Entry *s, void *c) { return time_value(s, 1); }
static PyObject *get_local(Entry *s, void *c) { return time_value(s, 2); }
static PyObject *get_remote(Entry *s, void *c) { return time_value(s, 3); }
static PyObject *get_throttle(Entry *s, void *c) { return time_value(s, 4); }
static PyObject *get_response_queue(Entry *s, void *c) { return time_value(s, 5); }
static PyObject *get_send(Entry *s, void *c) { return time_value(s, 6); }

static PyObject *get_correlation_id(Entry *s, void *c) {
    PyObject *v = PyTuple_GET_ITEM(s->key, 1);
    Py_INCREF(v);
    return v;
}

static PyObject *get_api_key(Entry *s, void *c) {
    PyObject *v = PyTuple_GET_ITEM(s->key, 2);
    Py_INCREF(v);
    return v;
}

static PyObject *get_api_version(Entry *s, void *c) { return PyLong_FromLong(s->api_version); }

static int truthy(PyObject *text) { return text != Py_None && PyUnicode_GET_LENGTH(text) > 0; }

/* clientInformation as "name/version" (None when it names neither), as LogEntry.software */
static PyObject *get_software(Entry *s, void *c) {
    if (!truthy(s->software_name) && !truthy(s->software_version))
        Py_RETURN_NONE;
    return PyUnicode_FromFormat("%S/%S", s->software_name, s->software_version);
}

static PyObject *entry_times(Entry *s, PyObject *unused) {
    PyObject *out = PyTuple_New(TIMES);
    if (out == NULL)
        return NULL;
    for (int i = 0; i < TIMES; i++) {
        PyObject *v = time_value(s, i);
        if (v == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, i, v);
    }
    return out;
}

static PyObject *entry_repr(Entry *s) {
    return PyUnicode_FromFormat("Entry(ts=%R, key=%R, connection=%R)", s->ts, s->key, s->connection);
}

static PyMemberDef entry_members[] = {
    {"ts", T_OBJECT_EX, offsetof(Entry, ts), READONLY, NULL},
    {"key", T_OBJECT_EX, offsetof(Entry, key), READONLY, NULL},
    {"client", T_OBJECT_EX, offsetof(Entry, client), READONLY, NULL},
    {"broker", T_OBJECT_EX, offsetof(Entry, broker), READONLY, NULL},
    {"connection", T_OBJECT_EX, offsetof(Entry, connection), READONLY, NULL},
    {"client_id", T_OBJECT_EX, offsetof(Entry, client_id), READONLY, NULL},
    {"security_protocol", T_OBJECT_EX, offsetof(Entry, security_protocol), READONLY, NULL},
    {"principal", T_OBJECT_EX, offsetof(Entry, principal), READONLY, NULL},
    {"listener", T_OBJECT_EX, offsetof(Entry, listener), READONLY, NULL},
    {"matched", T_BOOL, offsetof(Entry, matched), 0, NULL},
    {NULL},
};

static PyGetSetDef entry_getset[] = {
    {"total_ms", (getter)get_total, NULL, NULL, NULL},
    {"request_queue_ms", (getter)get_request_queue, NULL, NULL, NULL},
    {"local_ms", (getter)get_local, NULL, NULL, NULL},
    {"remote_ms", (getter)get_remote, NULL, NULL, NULL},
    {"throttle_ms", (getter)get_throttle, NULL, NULL, NULL},
    {"response_queue_ms", (getter)get_response_queue, NULL, NULL, NULL},
    {"send_ms", (getter)get_send, NULL, NULL, NULL},
    {"correlation_id", (getter)get_correlation_id, NULL, NULL, NULL},
    {"api_key", (getter)get_api_key, NULL, NULL, NULL},
    {"api_version", (getter)get_api_version, NULL, NULL, NULL},
    {"software", (getter)get_software, NULL, NULL, NULL},
    {NULL},
};

static PyMethodDef entry_methods[] = {
    {"times", (PyCFunction)entry_times, METH_NOARGS,
     "The seven broker times (ms, or None), in LogEntry.times's order."},
    {NULL},
};

static PyTypeObject EntryType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kdissect.conn.brokerlog._native_lines.Entry",
    .tp_basicsize = sizeof(Entry),
    .tp_dealloc = (destructor)entry_dealloc,
    .tp_repr = (reprfunc)entry_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One completed request as the broker logged it (read natively; LogEntry's fields).",
    .tp_members = entry_members,
    .tp_getset = entry_getset,
    .tp_methods = entry_methods,
};

/* ---- shared strings: a direct-mapped cache of short ASCII texts ---------- */

#define CACHE_SLOTS 1024
#define CACHE_TEXT 128

typedef struct {
    Py_ssize_t length;
    char text[CACHE_TEXT];
    PyObject *value;
} CachedText;

static CachedText text_cache[CACHE_SLOTS];

static uint32_t hash_bytes(const char *p, Py_ssize_t n) {
    uint32_t h = 2166136261u;
    for (Py_ssize_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)p[i]) * 16777619u;
    return h;
}

/* a new reference to the str of p[:n] (ASCII, checked by the caller) */
static PyObject *shared_text(const char *p, Py_ssize_t n) {
    if (n > CACHE_TEXT)
        return PyUnicode_DecodeASCII(p, n, NULL);
    CachedText *slot = &text_cache[hash_bytes(p, n) & (CACHE_SLOTS - 1)];
    if (slot->value != NULL && slot->length == n && memcmp(slot->text, p, n) == 0) {
        Py_INCREF(slot->value);
        return slot->value;
    }
    PyObject *value = PyUnicode_DecodeASCII(p, n, NULL);
    if (value == NULL)
        return NULL;
    Py_XDECREF(slot->value);
    memcpy(slot->text, p, n);
    slot->length = n;
    slot->value = value;
    Py_INCREF(value);
    return value;
}

/* connection id -> (connection, client, broker) strs */
typedef struct {
    Py_ssize_t length;
    char text[CACHE_TEXT];
    PyObject *connection, *client, *broker;
} CachedConnection;

static CachedConnection connection_cache[CACHE_SLOTS];

static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* "host:port-host:port-rest" with IPv4 hosts (digits and dots) and ports of
   1-9 digits, as parse._endpoints reads it: the client is the second pair.
   0: not that form (the Python path decides). */
static int connection_ends(const char *p, Py_ssize_t n, PyObject **connection, PyObject **client,
                           PyObject **broker) {
    if (n > CACHE_TEXT)
        return 0;
    CachedConnection *slot = &connection_cache[hash_bytes(p, n) & (CACHE_SLOTS - 1)];
    if (slot->connection != NULL && slot->length == n && memcmp(slot->text, p, n) == 0) {
        Py_INCREF(slot->connection);
        Py_INCREF(slot->client);
        Py_INCREF(slot->broker);
        *connection = slot->connection;
        *client = slot->client;
        *broker = slot->broker;
        return 1;
    }
    const char *host[2];
    Py_ssize_t host_length[2];
    long port[2];
    Py_ssize_t i = 0;
    for (int side = 0; side < 2; side++) {
        Py_ssize_t start = i;
        int digits = 0;
        while (i < n && (is_digit(p[i]) || p[i] == '.')) {
            digits += is_digit(p[i]);
            i++;
        }
        if (i == start || digits == 0 || i >= n || p[i] != ':')
            return 0;
        host[side] = p + start;
        host_length[side] = i - start;
        i++;
        Py_ssize_t port_start = i;
        long value = 0;
        while (i < n && is_digit(p[i])) {
            value = value * 10 + (p[i] - '0');
            i++;
        }
        if (i == port_start || i - port_start > 9 || i >= n || p[i] != '-')
            return 0;
        port[side] = value;
        i++;
    }
    if (i >= n)  /* the processor and index: at least one character */
        return 0;
    char text[CACHE_TEXT + 16];
    PyObject *made[3];
    made[0] = PyUnicode_DecodeASCII(p, n, NULL);
    for (int side = 0; side < 2; side++) {
        memcpy(text, host[side], host_length[side]);
        int extra = sprintf(text + host_length[side], ":%ld", port[side]);
        made[2 - side] = PyUnicode_DecodeASCII(text, host_length[side] + extra, NULL);
    }
    if (made[0] == NULL || made[1] == NULL || made[2] == NULL) {
        Py_XDECREF(made[0]);
        Py_XDECREF(made[1]);
        Py_XDECREF(made[2]);
        return -1;
    }
    /* made[1]: the client (the second pair), made[2]: the broker (the first) */
    Py_XDECREF(slot->connection);
    Py_XDECREF(slot->client);
    Py_XDECREF(slot->broker);
    memcpy(slot->text, p, n);
    slot->length = n;
    slot->connection = made[0];
    slot->client = made[1];
    slot->broker = made[2];
    Py_INCREF(made[0]);
    Py_INCREF(made[1]);
    Py_INCREF(made[2]);
    *connection = made[0];
    *client = made[1];
    *broker = made[2];
    return 1;
}

/* ---- strict JSON, the plain case -------------------------------------------- */

/* Every reader below takes the position of what it reads and returns the
   position after it, or NULL to decline the line. `end` is the JSON's end
   (just after its last "}"), `limit` the line's end (after its newline): how
   far a 16-byte look may read. */

static unsigned char plain_byte[256];  /* bytes a string holds as they are: 0x20-0x7e but '"' and '\\' */
static unsigned char space_byte[256];  /* JSON's whitespace */

static void fill_byte_tables(void) {
    for (int b = 0x20; b <= 0x7e; b++)
        plain_byte[b] = b != '"' && b != '\\';
    space_byte[' '] = space_byte['\t'] = space_byte['\r'] = space_byte['\n'] = 1;
}

#define SKIP_SPACE(p, end) while ((p) < (end) && space_byte[*(p)]) (p)++

static int hex_value(unsigned char x) {
    if (x >= '0' && x <= '9') return x - '0';
    if (x >= 'a' && x <= 'f') return x - 'a' + 10;
    if (x >= 'A' && x <= 'F') return x - 'A' + 10;
    return -1;
}

/* the first byte from p on that a string does not hold as it is: 16 bytes at
   a time while they lie within the line, then byte by byte (the line's
   newline, not such a byte, stops that) */
static inline const unsigned char *plain_run(const unsigned char *p, const unsigned char *limit) {
#ifdef __SSE2__
    const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\');
    const __m128i space = _mm_set1_epi8(0x20), del = _mm_set1_epi8(0x7f);
    while (p + 16 <= limit) {
        __m128i v = _mm_loadu_si128((const __m128i *)p);
        /* (compared signed: bytes of 0x80 and over count as below 0x20) */
        __m128i odd = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)),
                                   _mm_or_si128(_mm_cmplt_epi8(v, space), _mm_cmpeq_epi8(v, del)));
        int mask = _mm_movemask_epi8(odd);
        if (mask)
            return p + __builtin_ctz((unsigned)mask);
        p += 16;
    }
#endif
    while (plain_byte[p[0]] && plain_byte[p[1]] && plain_byte[p[2]] && plain_byte[p[3]])
        p += 4;
    while (plain_byte[*p])
        p++;
    return p;
}

/* a string (p at its opening quote): bytes outside 0x20-0x7e and surrogate
   escapes decline; *escaped set when it has an escape */
static const unsigned char *string_end(const unsigned char *p, const unsigned char *end,
                                       const unsigned char *limit, int *escaped) {
    p++;
    for (;;) {
        p = plain_run(p, limit);
        if (p >= end)
            return NULL;
        if (*p == '"')
            return p + 1;
        if (*p != '\\' || p + 1 >= end)
            return NULL;
        *escaped = 1;
        unsigned char e = p[1];
        if (e == 'u') {
            if (p + 5 >= end)
                return NULL;
            int code = 0;
            for (int k = 2; k < 6; k++) {
                int h = hex_value(p[k]);
                if (h < 0)
                    return NULL;
                code = code * 16 + h;
            }
            if (code >= 0xD800 && code <= 0xDFFF)
                return NULL;
            p += 6;
            continue;
        }
        if (!(e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't'))
            return NULL;
        p += 2;
    }
}

/* a number: *kind 1 an integer (-?(0|[1-9][0-9]*)), 2 with a fraction, 3 with an exponent */
static const unsigned char *number_end(const unsigned char *p, const unsigned char *end, int *kind) {
    *kind = 1;
    if (p < end && *p == '-')
        p++;
    if (p >= end || *p < '0' || *p > '9')
        return NULL;
    if (*p == '0')
        p++;
    else
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    if (p < end && *p == '.') {
        p++;
        if (p >= end || *p < '0' || *p > '9')
            return NULL;
        while (p < end && *p >= '0' && *p <= '9')
            p++;
        *kind = 2;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        if (p >= end || *p < '0' || *p > '9')
            return NULL;
        while (p < end && *p >= '0' && *p <= '9')
            p++;
        *kind = 3;
    }
    return p;
}

/* any value, validated and skipped (p at its first byte, no space before):
   one loop over its tokens, the open objects and arrays on a stack */
static const unsigned char *skip_value(const unsigned char *p, const unsigned char *end,
                                       const unsigned char *limit) {
    char open[MAX_DEPTH];
    int depth = 0, escaped = 0, kind;
    const unsigned char *start;
value:
    if (p >= end)
        return NULL;
    switch (*p) {
    case '"':
        p = string_end(p, end, limit, &escaped);
        if (p == NULL)
            return NULL;
        goto after;
    case '{':
        if (depth == MAX_DEPTH)
            return NULL;
        p++;
        SKIP_SPACE(p, end);
        if (p < end && *p == '}') {
            p++;
            goto after;
        }
        open[depth++] = '}';
        goto key;
    case '[':
        if (depth == MAX_DEPTH)
            return NULL;
        p++;
        SKIP_SPACE(p, end);
        if (p < end && *p == ']') {
            p++;
            goto after;
        }
        open[depth++] = ']';
        goto value;
    case 't':
        if (end - p < 4 || memcmp(p, "true", 4) != 0)
            return NULL;
        p += 4;
        goto after;
    case 'f':
        if (end - p < 5 || memcmp(p, "false", 5) != 0)
            return NULL;
        p += 5;
        goto after;
    case 'n':
        if (end - p < 4 || memcmp(p, "null", 4) != 0)
            return NULL;
        p += 4;
        goto after;
    default:
        start = p;
        p = number_end(p, end, &kind);
        /* exponents and long numbers: the Python path decides what they mean */
        if (p == NULL || !(kind == 1 || (kind == 2 && p - start <= 40)))
            return NULL;
        goto after;
    }
key:
    if (p >= end || *p != '"')
        return NULL;
    p = string_end(p, end, limit, &escaped);
    if (p == NULL)
        return NULL;
    SKIP_SPACE(p, end);
    if (p >= end || *p != ':')
        return NULL;
    p++;
    SKIP_SPACE(p, end);
    goto value;
after:
    if (depth == 0)
        return p;
    SKIP_SPACE(p, end);
    if (p >= end)
        return NULL;
    if (*p == ',') {
        p++;
        SKIP_SPACE(p, end);
        if (open[depth - 1] == '}')
            goto key;
        goto value;
    }
    if (*p == open[depth - 1]) {
        p++;
        depth--;
        goto after;
    }
    return NULL;
}

/* an int member: a plain JSON integer of at most 18 characters */
static const unsigned char *read_int(const unsigned char *p, const unsigned char *end, long long *out) {
    int kind;
    const unsigned char *start = p;
    p = number_end(p, end, &kind);
    if (p == NULL || kind != 1 || p - start > 18)
        return NULL;
    int negative = *start == '-';
    long long value = 0;
    for (const unsigned char *d = start + negative; d < p; d++)
        value = value * 10 + (*d - '0');
    *out = negative ? -value : value;
    return p;
}

/* a float-or-None member: null, or a non-negative integer or decimal fraction
   of at most 24 characters, read as the Python path reads it (correctly rounded) */
static const unsigned char *read_time(const unsigned char *p, const unsigned char *end, double *out, int *present) {
    if (p < end && *p == 'n') {
        *present = 0;
        return end - p >= 4 && memcmp(p, "null", 4) == 0 ? p + 4 : NULL;
    }
    int kind;
    const unsigned char *s = p;
    p = number_end(p, end, &kind);
    if (p == NULL)
        return NULL;
    Py_ssize_t n = p - s;
    if ((kind != 1 && kind != 2) || n > 24 || *s == '-')
        return NULL;
    if (kind == 1 && n > 15)  /* (integers beyond 2**53: declined) */
        return NULL;
    *present = 1;
    /* at most 15 digits: the digits as an integer (exact in a double) over a
       power of ten (exact too), one correctly rounded division; else the
       interpreter's own reading */
    if (n <= 16) {
        long long mantissa = 0;
        int digits = 0, fraction = 0;
        for (const unsigned char *d = s; d < p; d++) {
            if (*d == '.') {
                fraction = (int)(p - d - 1);
                continue;
            }
            mantissa = mantissa * 10 + (*d - '0');
            digits++;
        }
        if (digits <= 15) {
            static const double powers[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
                                            1e12, 1e13, 1e14, 1e15, 1e16};
            *out = (double)mantissa / powers[fraction];
            return p;
        }
    }
    char text[32];
    memcpy(text, s, n);
    text[n] = 0;
    char *stop;
    *out = PyOS_string_to_double(text, &stop, NULL);
    if (*out == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return NULL;
    }
    return stop == text + n ? p : NULL;
}

/* a str-or-None member without escapes: its text's span (start NULL for null) */
typedef struct {
    const unsigned char *start;
    Py_ssize_t length;
} Span;

static const unsigned char *read_text(const unsigned char *p, const unsigned char *end, const unsigned char *limit,
                                      Span *out) {
    if (p < end && *p == 'n') {
        out->start = NULL;
        return end - p >= 4 && memcmp(p, "null", 4) == 0 ? p + 4 : NULL;
    }
    if (p >= end || *p != '"')
        return NULL;
    int escaped = 0;
    const unsigned char *after = string_end(p, end, limit, &escaped);
    if (after == NULL || escaped)
        return NULL;
    out->start = p + 1;
    out->length = after - p - 2;
    return after;
}

/* the fields a line gives */
enum { CLIENT_ID, SECURITY_PROTOCOL, PRINCIPAL, LISTENER, SOFTWARE_NAME, SOFTWARE_VERSION, TEXTS };

typedef struct {
    long long api_key, api_version, correlation_id;
    Span texts[TEXTS];
    Span connection;
    double times[TIMES];
    unsigned char present;
    unsigned seen;        /* the members met, each once (a repeated one declines) */
} Line;

#define ONCE(bit) do { if (l->seen & (bit)) return NULL; l->seen |= (bit); } while (0)
#define IS(name) (n == (Py_ssize_t)(sizeof(name) - 1) && memcmp(k, name, sizeof(name) - 1) == 0)

/* the members of an object (p at its "{"): `member` reads a member's value
   (p after the ":" and any space) and returns the position after it, or
   `skip` for a member it does not read (skipped here) */
static const unsigned char SKIP_MARK;
#define SKIP (&SKIP_MARK)

typedef const unsigned char *(*MemberReader)(const unsigned char *k, Py_ssize_t n, const unsigned char *p,
                                            const unsigned char *end, const unsigned char *limit, Line *l);

static const unsigned char *read_object(const unsigned char *p, const unsigned char *end,
                                        const unsigned char *limit, MemberReader member, Line *l) {
    if (p >= end || *p != '{')
        return NULL;
    p++;
    SKIP_SPACE(p, end);
    if (p < end && *p == '}')
        return p + 1;
    for (;;) {
        int escaped = 0;
        if (p >= end || *p != '"')
            return NULL;
        const unsigned char *k = p + 1;
        p = string_end(p, end, limit, &escaped);
        if (p == NULL || escaped)  /* (a key spelled with an escape: the Python path) */
            return NULL;
        Py_ssize_t n = p - k - 1;
        SKIP_SPACE(p, end);
        if (p >= end || *p != ':')
            return NULL;
        p++;
        SKIP_SPACE(p, end);
        const unsigned char *after = member(k, n, p, end, limit, l);
        if (after == SKIP)
            after = skip_value(p, end, limit);
        if (after == NULL)
            return NULL;
        p = after;
        SKIP_SPACE(p, end);
        if (p >= end)
            return NULL;
        if (*p == ',') {
            p++;
            SKIP_SPACE(p, end);
            continue;
        }
        if (*p == '}')
            return p + 1;
        return NULL;
    }
}

static const unsigned char *header_member(const unsigned char *k, Py_ssize_t n, const unsigned char *p,
                                          const unsigned char *end, const unsigned char *limit, Line *l) {
    if (IS("requestApiKey")) {
        ONCE(1u << 10);
        return read_int(p, end, &l->api_key);
    }
    if (IS("requestApiVersion")) {
        ONCE(1u << 11);
        return read_int(p, end, &l->api_version);
    }
    if (IS("correlationId")) {
        ONCE(1u << 12);
        return read_int(p, end, &l->correlation_id);
    }
    if (IS("clientId")) {
        ONCE(1u << 13);
        return read_text(p, end, limit, &l->texts[CLIENT_ID]);
    }
    return SKIP;
}

static const unsigned char *software_member(const unsigned char *k, Py_ssize_t n, const unsigned char *p,
                                            const unsigned char *end, const unsigned char *limit, Line *l) {
    if (IS("softwareName")) {
        ONCE(1u << 14);
        return read_text(p, end, limit, &l->texts[SOFTWARE_NAME]);
    }
    if (IS("softwareVersion")) {
        ONCE(1u << 15);
        return read_text(p, end, limit, &l->texts[SOFTWARE_VERSION]);
    }
    return SKIP;
}

static const unsigned char *time_member(int i, const unsigned char *p, const unsigned char *end, Line *l) {
    int present = 0;
    ONCE(1u << (16 + i));
    p = read_time(p, end, &l->times[i], &present);
    if (present)
        l->present |= (unsigned char)(1u << i);
    return p;
}

/* the line's members, by their names' lengths first */
static const unsigned char *line_member(const unsigned char *k, Py_ssize_t n, const unsigned char *p,
                                        const unsigned char *end, const unsigned char *limit, Line *l) {
    if (n >= 10 && memcmp(k, "~kdissect~", 10) == 0)  /* LogEntry's own fields: the Python path */
        return NULL;
    switch (n) {
    case 8:
        if (IS("listener")) {
            ONCE(1u << 4);
            return read_text(p, end, limit, &l->texts[LISTENER]);
        }
        break;
    case 9:
        if (IS("principal")) {
            ONCE(1u << 3);
            return read_text(p, end, limit, &l->texts[PRINCIPAL]);
        }
        break;
    case 10:
        if (IS("connection")) {
            ONCE(1u << 1);
            return read_text(p, end, limit, &l->connection);  /* (null: declined below) */
        }
        if (IS("sendTimeMs"))
            return time_member(6, p, end, l);
        break;
    case 11:
        if (IS("totalTimeMs"))
            return time_member(0, p, end, l);
        if (IS("localTimeMs"))
            return time_member(2, p, end, l);
        break;
    case 12:
        if (IS("remoteTimeMs"))
            return time_member(3, p, end, l);
        break;
    case 13:
        if (IS("requestHeader")) {
            ONCE(1u << 0);
            p = read_object(p, end, limit, header_member, l);
            return (l->seen & (7u << 10)) == (7u << 10) ? p : NULL;  /* the three ints are required */
        }
        break;
    case 14:
        if (IS("throttleTimeMs"))
            return time_member(4, p, end, l);
        break;
    case 16:
        if (IS("securityProtocol")) {
            ONCE(1u << 2);
            return read_text(p, end, limit, &l->texts[SECURITY_PROTOCOL]);
        }
        break;
    case 17:
        if (IS("clientInformation")) {
            ONCE(1u << 5);
            if (p < end && *p == 'n')
                return end - p >= 4 && memcmp(p, "null", 4) == 0 ? p + 4 : NULL;
            return read_object(p, end, limit, software_member, l);
        }
        break;
    case 18:
        if (IS("requestQueueTimeMs"))
            return time_member(1, p, end, l);
        break;
    case 19:
        if (IS("responseQueueTimeMs"))
            return time_member(5, p, end, l);
        break;
    }
    return SKIP;
}

/* the str of a field's text, shared with the line before when it is the same */
typedef struct {
    Py_ssize_t length;
    char text[CACHE_TEXT];
    PyObject *value;
} LastText;

static LastText last_texts[TEXTS];

static PyObject *text_value(int field, const Span *span) {
    if (span->start == NULL) {
        Py_INCREF(Py_None);
        return Py_None;
    }
    LastText *last = &last_texts[field];
    if (last->value != NULL && last->length == span->length && memcmp(last->text, span->start, span->length) == 0) {
        Py_INCREF(last->value);
        return last->value;
    }
    PyObject *value = shared_text((const char *)span->start, span->length);
    if (value != NULL && span->length <= CACHE_TEXT) {
        Py_XSETREF(last->value, value);
        Py_INCREF(value);
        memcpy(last->text, span->start, span->length);
        last->length = span->length;
    }
    return value;
}

/* ---- the line's time ----------------------------------------------------------- */

/* days from 1970-01-01 to year-month-01 (proleptic Gregorian) */
static long long days_from_civil(long long y, unsigned m) {
    y -= m <= 2;
    long long era = (y >= 0 ? y : y - 399) / 400;
    unsigned yoe = (unsigned)(y - era * 400);
    unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5;
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (long long)doe - 719468;
}

static int digits_at(const char *p, int n, int *out) {
    int value = 0;
    for (int i = 0; i < n; i++) {
        if (!is_digit(p[i]))
            return 0;
        value = value * 10 + (p[i] - '0');
    }
    *out = value;
    return 1;
}

/* "[yyyy-MM-dd HH:mm:ss,SSS" (T or space between date and time) as parse._fast_time reads it */
static int stamp_ns(const char *s, long long *out) {
    int year, month, day, hour, minute, second, millis;
    if (s[0] != '[' || s[5] != '-' || s[8] != '-' || (s[11] != ' ' && s[11] != 'T') || s[14] != ':'
        || s[17] != ':' || s[20] != ',')
        return 0;
    if (!digits_at(s + 1, 4, &year) || !digits_at(s + 6, 2, &month) || !digits_at(s + 9, 2, &day)
        || !digits_at(s + 12, 2, &hour) || !digits_at(s + 15, 2, &minute) || !digits_at(s + 18, 2, &second)
        || !digits_at(s + 21, 3, &millis))
        return 0;
    if (month < 1 || month > 12)  /* what datetime.date refuses */
        return 0;
    if (year < 1700 || year > 2200)  /* (ns since 1970 in 64 bits: the Python path reads the rest) */
        return 0;
    long long days = days_from_civil(year, (unsigned)month) + day - 1;
    long long seconds = ((days * 24 + hour) * 60 + minute) * 60 + second;
    *out = seconds * 1000000000LL + (long long)millis * 1000000LL;
    return 1;
}

/* ---- a block ----------------------------------------------------------------------- */

static const char LEVEL_DEBUG[] = "] DEBUG Completed request:{";
static const char LEVEL_TRACE[] = "] TRACE Completed request:{";
static const char LINE_END[] = "} (kafka.request.logger)\n";
#define LEVEL_AT 24
#define LEVEL_LENGTH 27
#define END_LENGTH 25

static char last_stamp[LEVEL_AT];
static PyObject *last_ts = NULL;

/* one line (with its newline): a new Entry, NULL with no error set to decline, NULL with an error */
static PyObject *line_entry(const char *s, Py_ssize_t n) {
    if (n < LEVEL_AT + LEVEL_LENGTH + END_LENGTH - 1)
        return NULL;
    if (memcmp(s + LEVEL_AT, LEVEL_DEBUG, LEVEL_LENGTH) != 0 && memcmp(s + LEVEL_AT, LEVEL_TRACE, LEVEL_LENGTH) != 0)
        return NULL;
    if (memcmp(s + n - END_LENGTH, LINE_END, END_LENGTH) != 0)
        return NULL;
    PyObject *ts;
    if (last_ts != NULL && memcmp(s, last_stamp, LEVEL_AT) == 0) {
        ts = last_ts;
        Py_INCREF(ts);
    } else {
        long long ns;
        if (!stamp_ns(s, &ns))
            return NULL;
        ts = PyLong_FromLongLong(ns);
        if (ts == NULL)
            return NULL;
        Py_XDECREF(last_ts);
        last_ts = ts;
        Py_INCREF(ts);
        memcpy(last_stamp, s, LEVEL_AT);
    }
    Line line;
    memset(&line, 0, sizeof line);
    /* the JSON: from its "{" to the line's last "}" */
    const unsigned char *json = (const unsigned char *)s + LEVEL_AT + LEVEL_LENGTH - 1;
    const unsigned char *end = (const unsigned char *)s + n - END_LENGTH + 1;
    const unsigned char *after = read_object(json, end, (const unsigned char *)s + n, line_member, &line);
    PyObject *connection = NULL, *client = NULL, *broker = NULL;
    if (after != end || (line.seen & 3) != 3 || line.connection.start == NULL
        || line.api_version < INT_MIN || line.api_version > INT_MAX
        || connection_ends((const char *)line.connection.start, line.connection.length, &connection, &client,
                           &broker) != 1) {
        Py_DECREF(ts);
        return NULL;  /* (an error set by a str's creation stays set: the caller checks) */
    }
    PyObject *texts[TEXTS];
    int made = 0;
    for (; made < TEXTS; made++) {
        texts[made] = text_value(made, &line.texts[made]);
        if (texts[made] == NULL)
            break;
    }
    Entry *entry = made == TEXTS ? PyObject_New(Entry, &EntryType) : NULL;
    PyObject *correlation = entry ? PyLong_FromLongLong(line.correlation_id) : NULL;
    PyObject *api_key = correlation ? PyLong_FromLongLong(line.api_key) : NULL;
    PyObject *key = api_key ? PyTuple_New(3) : NULL;
    if (key == NULL) {
        Py_XDECREF(correlation);
        Py_XDECREF(api_key);
        if (entry != NULL)
            PyObject_Free(entry);  /* (nothing set in it yet) */
        for (int i = 0; i < made; i++)
            Py_DECREF(texts[i]);
        Py_DECREF(connection);
        Py_DECREF(client);
        Py_DECREF(broker);
        Py_DECREF(ts);
        return NULL;
    }
    Py_INCREF(client);
    PyTuple_SET_ITEM(key, 0, client);
    PyTuple_SET_ITEM(key, 1, correlation);
    PyTuple_SET_ITEM(key, 2, api_key);
    PyObject_GC_UnTrack(key);  /* (strs and ints only: the collector need never visit it) */
    entry->ts = ts;
    entry->key = key;
    entry->client = client;
    entry->broker = broker;
    entry->connection = connection;
    entry->client_id = texts[CLIENT_ID];
    entry->security_protocol = texts[SECURITY_PROTOCOL];
    entry->principal = texts[PRINCIPAL];
    entry->listener = texts[LISTENER];
    entry->software_name = texts[SOFTWARE_NAME];
    entry->software_version = texts[SOFTWARE_VERSION];
    memcpy(entry->times, line.times, sizeof line.times);
    entry->present = line.present;
    entry->api_version = (int)line.api_version;
    entry->matched = 0;
    return (PyObject *)entry;
}

static PyObject *block_entries(PyObject *module, PyObject *args) {
    Py_buffer data;
    Py_ssize_t end;
    if (!PyArg_ParseTuple(args, "y*n:block_entries", &data, &end))
        return NULL;
    if (end < 0 || end > data.len) {
        PyBuffer_Release(&data);
        PyErr_SetString(PyExc_ValueError, "end outside the data");
        return NULL;
    }
    PyObject *entries = PyList_New(0);
    const char *p = data.buf, *stop = (const char *)data.buf + end;
    while (entries != NULL && p < stop) {
        const char *newline = memchr(p, '\n', stop - p);
        if (newline == NULL) {  /* a line without its end: the caller's to keep */
            Py_CLEAR(entries);
            break;
        }
        PyObject *entry = line_entry(p, newline + 1 - p);
        if (entry == NULL || PyList_Append(entries, entry) < 0) {
            Py_XDECREF(entry);
            Py_CLEAR(entries);
            break;
        }
        Py_DECREF(entry);
        p = newline + 1;
    }
    PyBuffer_Release(&data);
    if (entries == NULL) {
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NONE;
    }
    return entries;
}

/* ---- a joined entry's columns given to its exchange ------------------------------- */

static PyObject *python_take = NULL;  /* join._take: for what this does not take (see `take`) */
static PyObject *joined_text = NULL;  /* join.JOINED */
enum { A_BROKER_LOG, A_TOTAL, A_REQUEST_QUEUE, A_LOCAL, A_REMOTE, A_THROTTLE, A_RESPONSE_QUEUE, A_SEND,
       A_PRINCIPAL, A_SECURITY_PROTOCOL, A_LISTENER, A_NETWORK, A_REQUEST_TS, A_RESPONSE_FIRST_TS,
       A_SOCKET_WAIT_NS, NAMES };
static const char *const NAME_TEXTS[NAMES] = {
    "broker_log", "broker_total_ms", "broker_request_queue_ms", "broker_local_ms", "broker_remote_ms",
    "broker_throttle_ms", "broker_response_queue_ms", "broker_send_ms", "principal", "security_protocol",
    "listener", "network_ms", "request_ts", "response_first_ts", "socket_wait_ns",
};
static PyObject *names[NAMES];

static PyObject *configure(PyObject *module, PyObject *args) {
    PyObject *take_function, *joined;
    if (!PyArg_ParseTuple(args, "OU:configure", &take_function, &joined))
        return NULL;
    for (int i = 0; i < NAMES; i++)
        if (names[i] == NULL && (names[i] = PyUnicode_InternFromString(NAME_TEXTS[i])) == NULL)
            return NULL;
    Py_INCREF(take_function);
    Py_XSETREF(python_take, take_function);
    Py_INCREF(joined);
    Py_XSETREF(joined_text, joined);
    Py_RETURN_NONE;
}

/* an exact int attribute as a long long in *out (None: *none set); 0 when it is neither */
static int int_attribute(PyObject *exchange, int name, long long *out, int *none) {
    PyObject *value = PyObject_GetAttr(exchange, names[name]);
    if (value == NULL) {
        PyErr_Clear();
        return 0;
    }
    *none = value == Py_None;
    int fine = 1;
    if (!*none) {
        int overflow = 0;
        fine = PyLong_CheckExact(value) && ((*out = PyLong_AsLongLongAndOverflow(value, &overflow)), !overflow)
               && !(*out == -1 && PyErr_Occurred());
        PyErr_Clear();
    }
    Py_DECREF(value);
    return fine;
}

/* join._take for a native entry: the exchange gets the entry's columns and
   its network_ms (the same integer ns arithmetic, the same float), the entry
   is marked matched. Anything else (a msgspec entry, ns that do not fit in
   64 bits or are not exact ints, a quotient not exact in a double) goes to
   join._take itself. */
static PyObject *take(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "take(exchange, entry)");
        return NULL;
    }
    PyObject *exchange = args[0];
    if (Py_TYPE(args[1]) != &EntryType || python_take == NULL)
        goto python;
    Entry *entry = (Entry *)args[1];
    long long request_ts = 0, first_ts = 0, wait_ns = 0;
    int request_none = 1, first_none = 1, wait_none = 1;
    if (!int_attribute(exchange, A_REQUEST_TS, &request_ts, &request_none)
        || !int_attribute(exchange, A_RESPONSE_FIRST_TS, &first_ts, &first_none)
        || !int_attribute(exchange, A_SOCKET_WAIT_NS, &wait_ns, &wait_none))
        goto python;
    PyObject *network;
    int total = entry->present & 1, send = entry->present & (1u << 6);
    if (request_none || first_none || !total || !send) {
        network = Py_None;
        Py_INCREF(network);
    } else {
        double before_send = (entry->times[0] - entry->times[6]) * 1000000.0;
        if (before_send - before_send != 0) {
            network = Py_None;
            Py_INCREF(network);
        } else {
            /* round(): to nearest, ties to even (the default rounding mode) */
            double rounded = nearbyint(before_send);
            if (!(rounded > -9.0e15 && rounded < 9.0e15))
                goto python;
            const long long far = 4000000000000000000LL;  /* (ns of the year 2096: no difference overflows) */
            if (request_ts > far || request_ts < -far || first_ts > far || first_ts < -far || wait_ns > far
                || wait_ns < -far)
                goto python;
            long long ns = first_ts - request_ts - (wait_none ? 0 : wait_ns) - (long long)rounded;
            if (ns > 9007199254740992LL || ns < -9007199254740992LL)  /* (beyond 2**53: not exact in a double) */
                goto python;
            network = PyFloat_FromDouble((double)ns / 1000000.0);  /* (one correctly rounded division) */
            if (network == NULL)
                return NULL;
        }
    }
    PyObject *values[12] = {joined_text, time_value(entry, 0), time_value(entry, 1), time_value(entry, 2),
                            time_value(entry, 3), time_value(entry, 4), time_value(entry, 5),
                            time_value(entry, 6), entry->principal, entry->security_protocol, entry->listener,
                            network};
    static const int targets[12] = {A_BROKER_LOG, A_TOTAL, A_REQUEST_QUEUE, A_LOCAL, A_REMOTE, A_THROTTLE,
                                    A_RESPONSE_QUEUE, A_SEND, A_PRINCIPAL, A_SECURITY_PROTOCOL, A_LISTENER,
                                    A_NETWORK};
    Py_INCREF(joined_text);
    Py_INCREF(entry->principal);
    Py_INCREF(entry->security_protocol);
    Py_INCREF(entry->listener);
    int failed = 0;
    for (int i = 0; i < 12; i++)
        failed = failed || values[i] == NULL;
    for (int i = 0; i < 12 && !failed; i++)
        failed = PyObject_SetAttr(exchange, names[targets[i]], values[i]) < 0;
    for (int i = 0; i < 12; i++)
        Py_XDECREF(values[i]);
    if (failed)
        return NULL;
    entry->matched = 1;
    Py_RETURN_NONE;
python:
    return PyObject_Vectorcall(python_take, args, 2, NULL);
}

static PyMethodDef module_methods[] = {
    {"configure", configure, METH_VARARGS,
     "configure(take, joined): join._take (for the entries `take` leaves to it) and join.JOINED."},
    {"take", (PyCFunction)(void (*)(void))take, METH_FASTCALL,
     "take(exchange, entry): join._take, natively for a native entry."},
    {"block_entries", block_entries, METH_VARARGS,
     "block_entries(data, end) -> list of Entry for the complete lines of data[:end], or None when any of them "
     "is not the plain case (the Python path reads that block)."},
    {NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_native_lines",
    "The broker's request-log lines, the plain case, read natively (see the C source's head).", -1,
    module_methods,
};

PyMODINIT_FUNC PyInit__native_lines(void) {
    fill_byte_tables();
    if (PyType_Ready(&EntryType) < 0)
        return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL)
        return NULL;
    Py_INCREF(&EntryType);
    if (PyModule_AddObject(module, "Entry", (PyObject *)&EntryType) < 0) {
        Py_DECREF(&EntryType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
