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

   Built by tools/build_native.py beside the mypyc group; see
   kdissect/native.py for when a build is used. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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
    {"times", (PyCFunction)entry_times, METH_NOARGS, "The seven broker times (ms, or None), in LogEntry.times's order."},
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

typedef struct {
    const char *p;
    const char *end;
} Cursor;

static void skip_space(Cursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\r' || *c->p == '\n'))
        c->p++;
}

static int hex_value(char x) {
    if (x >= '0' && x <= '9') return x - '0';
    if (x >= 'a' && x <= 'f') return x - 'a' + 10;
    if (x >= 'A' && x <= 'F') return x - 'A' + 10;
    return -1;
}

/* bytes a string holds as they are: 0x20-0x7e but the quote and the backslash */
static unsigned char plain_byte[256];

static void fill_plain_bytes(void) {
    for (int b = 0x20; b <= 0x7e; b++)
        plain_byte[b] = b != '"' && b != '\\';
}

/* a string at c->p (its opening quote): its raw text in [*start, *start + *length);
   *plain = no escape in it. Bytes outside 0x20-0x7e and surrogate escapes decline.
   (The scan needs no bound inside a run of plain bytes: every line ends in a
   newline, which is not one, and the end is checked where a run stops.) */
static int read_string(Cursor *c, const char **start, Py_ssize_t *length, int *plain) {
    if (c->p >= c->end || *c->p != '"')
        return 0;
    const unsigned char *p = (const unsigned char *)++c->p;
    const unsigned char *end = (const unsigned char *)c->end;
    int escapes = 0;
    for (;;) {
        while (plain_byte[p[0]] && plain_byte[p[1]] && plain_byte[p[2]] && plain_byte[p[3]])
            p += 4;
        while (plain_byte[*p])
            p++;
        if (p >= end)
            return 0;
        if (*p == '"') {
            *start = c->p;
            *length = (const char *)p - c->p;
            *plain = !escapes;
            c->p = (const char *)p + 1;
            return 1;
        }
        if (*p != '\\' || p + 1 >= end)
            return 0;
        escapes = 1;
        unsigned char e = p[1];
        if (e == 'u') {
            if (p + 5 >= end)
                return 0;
            int code = 0;
            for (int k = 2; k < 6; k++) {
                int h = hex_value((char)p[k]);
                if (h < 0)
                    return 0;
                code = code * 16 + h;
            }
            if (code >= 0xD800 && code <= 0xDFFF)
                return 0;
            p += 6;
            continue;
        }
        if (!(e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't'))
            return 0;
        p += 2;
    }
}

/* a JSON number's text: 1 an integer (-?(0|[1-9][0-9]*)), 2 with a fraction, 3 with an exponent */
static int read_number(Cursor *c, const char **start, Py_ssize_t *length) {
    const char *p = c->p, *e = c->end;
    int kind = 1;
    *start = p;
    if (p < e && *p == '-')
        p++;
    if (p >= e || !is_digit(*p))
        return 0;
    if (*p == '0')
        p++;
    else
        while (p < e && is_digit(*p))
            p++;
    if (p < e && *p == '.') {
        p++;
        if (p >= e || !is_digit(*p))
            return 0;
        while (p < e && is_digit(*p))
            p++;
        kind = 2;
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < e && (*p == '+' || *p == '-'))
            p++;
        if (p >= e || !is_digit(*p))
            return 0;
        while (p < e && is_digit(*p))
            p++;
        kind = 3;
    }
    *length = p - *start;
    c->p = p;
    return kind;
}

static int literal(Cursor *c, const char *word, Py_ssize_t n) {
    if (c->end - c->p < n || memcmp(c->p, word, n) != 0)
        return 0;
    c->p += n;
    return 1;
}

/* any value, validated and skipped */
static int skip_value(Cursor *c, int depth) {
    const char *s;
    Py_ssize_t n;
    int plain;
    if (depth > MAX_DEPTH)
        return 0;
    skip_space(c);
    if (c->p >= c->end)
        return 0;
    switch (*c->p) {
    case '"':
        return read_string(c, &s, &n, &plain);
    case '{':
        c->p++;
        skip_space(c);
        if (c->p < c->end && *c->p == '}') {
            c->p++;
            return 1;
        }
        for (;;) {
            skip_space(c);
            if (!read_string(c, &s, &n, &plain))
                return 0;
            skip_space(c);
            if (c->p >= c->end || *c->p != ':')
                return 0;
            c->p++;
            if (!skip_value(c, depth + 1))
                return 0;
            skip_space(c);
            if (c->p >= c->end)
                return 0;
            if (*c->p == ',') {
                c->p++;
                continue;
            }
            if (*c->p == '}') {
                c->p++;
                return 1;
            }
            return 0;
        }
    case '[':
        c->p++;
        skip_space(c);
        if (c->p < c->end && *c->p == ']') {
            c->p++;
            return 1;
        }
        for (;;) {
            if (!skip_value(c, depth + 1))
                return 0;
            skip_space(c);
            if (c->p >= c->end)
                return 0;
            if (*c->p == ',') {
                c->p++;
                continue;
            }
            if (*c->p == ']') {
                c->p++;
                return 1;
            }
            return 0;
        }
    case 't':
        return literal(c, "true", 4);
    case 'f':
        return literal(c, "false", 5);
    case 'n':
        return literal(c, "null", 4);
    default: {
        int kind = read_number(c, &s, &n);
        /* exponents and long numbers: the Python path decides what they mean */
        return kind == 1 || (kind == 2 && n <= 40);
    }
    }
}

/* an int member: a plain JSON integer of at most 18 digits */
static int read_int(Cursor *c, long long *out) {
    const char *s;
    Py_ssize_t n;
    skip_space(c);
    if (read_number(c, &s, &n) != 1 || n > 18)
        return 0;
    int negative = *s == '-';
    long long value = 0;
    for (Py_ssize_t i = negative; i < n; i++)
        value = value * 10 + (s[i] - '0');
    *out = negative ? -value : value;
    return 1;
}

/* a float-or-None member: null, or a non-negative integer or decimal fraction
   of at most 24 characters (read as the Python path reads it: correctly rounded) */
static int read_time(Cursor *c, double *out, int *present) {
    const char *s;
    Py_ssize_t n;
    skip_space(c);
    if (c->p < c->end && *c->p == 'n') {
        *present = 0;
        return literal(c, "null", 4);
    }
    int kind = read_number(c, &s, &n);
    if ((kind != 1 && kind != 2) || n > 24 || *s == '-')
        return 0;
    if (kind == 1 && n > 15)  /* (integers beyond 2**53 are not exact either way; declined) */
        return 0;
    /* at most 15 digits, at most 22 of them after the point: the digits as an
       integer (exact in a double) over a power of ten (exact too), one
       correctly rounded division; else the interpreter's own reading */
    if (n <= 16) {
        long long mantissa = 0;
        int digits = 0, fraction = -1;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (s[i] == '.') {
                fraction = 0;
                continue;
            }
            mantissa = mantissa * 10 + (s[i] - '0');
            digits++;
            if (fraction >= 0)
                fraction++;
        }
        if (digits <= 15) {
            static const double powers[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
                                            1e12, 1e13, 1e14, 1e15, 1e16};
            *out = (double)mantissa / powers[fraction < 0 ? 0 : fraction];
            *present = 1;
            return 1;
        }
    }
    char text[32];
    memcpy(text, s, n);
    text[n] = 0;
    char *stop;
    *out = PyOS_string_to_double(text, &stop, NULL);
    if (*out == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    if (stop != text + n)
        return 0;
    *present = 1;
    return 1;
}

/* a str-or-None member without escapes: a new reference in *out */
static int read_text(Cursor *c, PyObject **out, int allow_null) {
    const char *s;
    Py_ssize_t n;
    int plain;
    skip_space(c);
    if (allow_null && c->p < c->end && *c->p == 'n') {
        if (!literal(c, "null", 4))
            return 0;
        Py_INCREF(Py_None);
        *out = Py_None;
        return 1;
    }
    if (!read_string(c, &s, &n, &plain) || !plain)
        return 0;
    *out = shared_text(s, n);
    return *out != NULL;
}

/* the members of an object at c->p ('{'): for each, `member(c, name, length, state)`
   returns 1 read, 0 decline, 2 not one of its names (skipped here) */
typedef int (*MemberReader)(Cursor *c, const char *name, Py_ssize_t n, void *state);

static int read_object(Cursor *c, MemberReader member, void *state) {
    skip_space(c);
    if (c->p >= c->end || *c->p != '{')
        return 0;
    c->p++;
    skip_space(c);
    if (c->p < c->end && *c->p == '}') {
        c->p++;
        return 1;
    }
    for (;;) {
        const char *name;
        Py_ssize_t n;
        int plain;
        skip_space(c);
        if (!read_string(c, &name, &n, &plain) || !plain)
            return 0;
        skip_space(c);
        if (c->p >= c->end || *c->p != ':')
            return 0;
        c->p++;
        int done = member(c, name, n, state);
        if (done == 0)
            return 0;
        if (done == 2 && !skip_value(c, 2))
            return 0;
        skip_space(c);
        if (c->p >= c->end)
            return 0;
        if (*c->p == ',') {
            c->p++;
            continue;
        }
        if (*c->p == '}') {
            c->p++;
            return 1;
        }
        return 0;
    }
}

#define NAMED(literal_name) (n == (Py_ssize_t)(sizeof(literal_name) - 1) && memcmp(name, literal_name, n) == 0)

typedef struct {
    long long api_key, api_version, correlation_id;
    PyObject *client_id;
    unsigned seen;
} Header;

static int header_member(Cursor *c, const char *name, Py_ssize_t n, void *state) {
    Header *h = state;
    unsigned bit;
    if (NAMED("requestApiKey")) bit = 1;
    else if (NAMED("requestApiVersion")) bit = 2;
    else if (NAMED("correlationId")) bit = 4;
    else if (NAMED("clientId")) bit = 8;
    else return 2;
    if (h->seen & bit)  /* a repeated member: declined */
        return 0;
    h->seen |= bit;
    switch (bit) {
    case 1: return read_int(c, &h->api_key);
    case 2: return read_int(c, &h->api_version);
    case 4: return read_int(c, &h->correlation_id);
    default: return read_text(c, &h->client_id, 1);
    }
}

typedef struct {
    PyObject *name, *version;
    unsigned seen;
} Software;

static int software_member(Cursor *c, const char *name, Py_ssize_t n, void *state) {
    Software *s = state;
    if (NAMED("softwareName")) {
        if (s->seen & 1)
            return 0;
        s->seen |= 1;
        return read_text(c, &s->name, 1);
    }
    if (NAMED("softwareVersion")) {
        if (s->seen & 2)
            return 0;
        s->seen |= 2;
        return read_text(c, &s->version, 1);
    }
    return 2;
}

static const char *const TIME_NAMES[TIMES] = {
    "totalTimeMs", "requestQueueTimeMs", "localTimeMs", "remoteTimeMs", "throttleTimeMs",
    "responseQueueTimeMs", "sendTimeMs",
};
static const Py_ssize_t TIME_LENGTHS[TIMES] = {11, 18, 11, 12, 14, 19, 10};

typedef struct {
    Header header;
    Software software;
    const char *connection;
    Py_ssize_t connection_length;
    PyObject *security_protocol, *principal, *listener;
    double times[TIMES];
    unsigned char present;
    unsigned seen;
} Line;

#define OWN_PREFIX "~kdissect~"

static int line_member(Cursor *c, const char *name, Py_ssize_t n, void *state) {
    Line *l = state;
    if (n >= 10 && memcmp(name, OWN_PREFIX, 10) == 0)  /* LogEntry's own fields: the Python path */
        return 0;
    for (int i = 0; i < TIMES; i++) {
        if (n == TIME_LENGTHS[i] && name[0] == TIME_NAMES[i][0] && memcmp(name, TIME_NAMES[i], n) == 0) {
            unsigned bit = 1u << (8 + i);
            int present = 0;
            if (l->seen & bit)
                return 0;
            l->seen |= bit;
            if (!read_time(c, &l->times[i], &present))
                return 0;
            if (present)
                l->present |= (unsigned char)(1u << i);
            return 1;
        }
    }
    if (NAMED("requestHeader")) {
        if (l->seen & 1)
            return 0;
        l->seen |= 1;
        if (!read_object(c, header_member, &l->header))
            return 0;
        return (l->header.seen & 7) == 7;  /* the three ints are required */
    }
    if (NAMED("connection")) {
        const char *s;
        int plain;
        if (l->seen & 2)
            return 0;
        l->seen |= 2;
        skip_space(c);
        if (!read_string(c, &s, &l->connection_length, &plain) || !plain)
            return 0;
        l->connection = s;
        return 1;
    }
    if (NAMED("securityProtocol")) {
        if (l->seen & 4) return 0;
        l->seen |= 4;
        return read_text(c, &l->security_protocol, 1);
    }
    if (NAMED("principal")) {
        if (l->seen & 8) return 0;
        l->seen |= 8;
        return read_text(c, &l->principal, 1);
    }
    if (NAMED("listener")) {
        if (l->seen & 16) return 0;
        l->seen |= 16;
        return read_text(c, &l->listener, 1);
    }
    if (NAMED("clientInformation")) {
        if (l->seen & 32) return 0;
        l->seen |= 32;
        skip_space(c);
        if (c->p < c->end && *c->p == 'n')
            return literal(c, "null", 4);
        return read_object(c, software_member, &l->software);
    }
    return 2;
}

static void clear_line(Line *l) {
    Py_CLEAR(l->header.client_id);
    Py_CLEAR(l->software.name);
    Py_CLEAR(l->software.version);
    Py_CLEAR(l->security_protocol);
    Py_CLEAR(l->principal);
    Py_CLEAR(l->listener);
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
    Cursor c = {s + LEVEL_AT + LEVEL_LENGTH - 1, s + n - END_LENGTH + 1};  /* from "{" to the last "}" */
    PyObject *connection = NULL, *client = NULL, *broker = NULL;
    if (!read_object(&c, line_member, &line) || (skip_space(&c), c.p != c.end) || !(line.seen & 1)
        || !(line.seen & 2)) {
        clear_line(&line);
        Py_DECREF(ts);
        return NULL;  /* (an error set by a str's creation stays set: the caller checks) */
    }
    int ends = connection_ends(line.connection, line.connection_length, &connection, &client, &broker);
    if (ends != 1) {
        clear_line(&line);
        Py_DECREF(ts);
        return NULL;
    }
    Entry *entry = PyObject_New(Entry, &EntryType);
    PyObject *correlation = PyLong_FromLongLong(line.header.correlation_id);
    PyObject *api_key = PyLong_FromLongLong(line.header.api_key);
    PyObject *key = (entry && correlation && api_key) ? PyTuple_New(3) : NULL;
    if (key == NULL || line.header.api_version < INT_MIN || line.header.api_version > INT_MAX) {
        Py_XDECREF(correlation);
        Py_XDECREF(api_key);
        if (entry != NULL) {
            /* (nothing set yet: freed as it came) */
            PyObject_Free(entry);
        }
        Py_DECREF(connection);
        Py_DECREF(client);
        Py_DECREF(broker);
        clear_line(&line);
        Py_DECREF(ts);
        return NULL;
    }
    Py_INCREF(client);
    PyTuple_SET_ITEM(key, 0, client);
    PyTuple_SET_ITEM(key, 1, correlation);
    PyTuple_SET_ITEM(key, 2, api_key);
    entry->ts = ts;
    entry->key = key;
    entry->client = client;
    entry->broker = broker;
    entry->connection = connection;
#define OR_NONE(x) ((x) != NULL ? (x) : (Py_INCREF(Py_None), Py_None))
    entry->client_id = OR_NONE(line.header.client_id);
    entry->security_protocol = OR_NONE(line.security_protocol);
    entry->principal = OR_NONE(line.principal);
    entry->listener = OR_NONE(line.listener);
    entry->software_name = OR_NONE(line.software.name);
    entry->software_version = OR_NONE(line.software.version);
    memcpy(entry->times, line.times, sizeof line.times);
    entry->present = line.present;
    entry->api_version = (int)line.header.api_version;
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

static PyMethodDef module_methods[] = {
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
    fill_plain_bytes();
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
