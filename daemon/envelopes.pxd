# The compiled build's declarations for envelopes.py (docs/COMPILED.md): one message's two
# parts received by C calls into pyzmq's libzmq, whose functions are bound at run time
# (``wt_bind``), so nothing links against it and no zmq.h is needed.

cdef extern from *:
    """
    #include <errno.h>
    #include <stdint.h>
    /* zmq_msg_t: 64 bytes, pointer-aligned (zmq.h since libzmq 4.1) */
    typedef struct { int64_t _w[8]; } wt_zmsg;
    static int (*wt_msg_init)(wt_zmsg *);
    static int (*wt_msg_recv)(wt_zmsg *, void *, int);
    static int (*wt_msg_more)(const wt_zmsg *);
    static int (*wt_msg_close)(wt_zmsg *);
    static void *(*wt_msg_data)(wt_zmsg *);
    static size_t (*wt_msg_size)(const wt_zmsg *);

    static void wt_bind(size_t init, size_t recv, size_t more, size_t close, size_t data, size_t size) {
        wt_msg_init = (int (*)(wt_zmsg *))init;
        wt_msg_recv = (int (*)(wt_zmsg *, void *, int))recv;
        wt_msg_more = (int (*)(const wt_zmsg *))more;
        wt_msg_close = (int (*)(wt_zmsg *))close;
        wt_msg_data = (void *(*)(wt_zmsg *))data;
        wt_msg_size = (size_t (*)(const wt_zmsg *))size;
    }

    /* One part, not waiting (ZMQ_DONTWAIT = 1): 0 and *out (a new bytes, or NULL when
       out is NULL) and *more, or the errno. */
    static int wt_part(void *sock, PyObject **out, int *more) {
        wt_zmsg msg;
        int rc;
        wt_msg_init(&msg);
        do {
            rc = wt_msg_recv(&msg, sock, 1);
        } while (rc < 0 && errno == EINTR);
        if (rc < 0) {
            int err = errno;
            wt_msg_close(&msg);
            return err ? err : EAGAIN;
        }
        *more = wt_msg_more(&msg);
        if (out != NULL)
            *out = PyBytes_FromStringAndSize((const char *)wt_msg_data(&msg), (Py_ssize_t)wt_msg_size(&msg));
        wt_msg_close(&msg);
        return 0;
    }

    /* (identity, frame), (identity, None) for a message of other than two parts (the
       rest received and dropped), or the errno as an int (EAGAIN: nothing waits);
       NULL with MemoryError set. */
    static PyObject *wt_recv2(size_t handle) {
        void *sock = (void *)handle;
        PyObject *identity = NULL, *frame = NULL;
        int more = 0, err;
        if (sock == NULL)
            return PyLong_FromLong(ENOTSOCK);
        err = wt_part(sock, &identity, &more);
        if (err)
            return PyLong_FromLong(err);
        if (identity == NULL)
            return NULL;
        if (!more) {          /* a ROUTER always sends the identity first: not a pair */
            frame = Py_None;
            Py_INCREF(frame);
        } else {
            err = wt_part(sock, &frame, &more);
            if (err) {        /* a message arrives whole: not expected */
                Py_DECREF(identity);
                return PyLong_FromLong(err);
            }
            if (frame == NULL) {
                Py_DECREF(identity);
                return NULL;
            }
            if (more) {       /* more parts: received and dropped */
                Py_DECREF(frame);
                frame = Py_None;
                Py_INCREF(frame);
                while (more && wt_part(sock, NULL, &more) == 0)
                    ;
            }
        }
        {
            PyObject *pair = PyTuple_Pack(2, identity, frame);
            Py_DECREF(identity);
            Py_DECREF(frame);
            return pair;
        }
    }
    """
    void wt_bind(size_t init, size_t recv, size_t more, size_t close, size_t data, size_t size)
    object wt_recv2(size_t handle)


cdef class Envelopes:
    cdef public object sock
    cdef public bint native
    cdef size_t _handle
