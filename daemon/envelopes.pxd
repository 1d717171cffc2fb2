# The compiled build's declarations for envelopes.py (docs/COMPILED.md): one message's two
# parts received by C calls into pyzmq's libzmq, whose functions are bound at run time
# (``wt_bind``), so nothing links against it and no zmq.h is needed.

cdef extern from *:
    """
    #include <errno.h>
    #include <stdint.h>
    #include <string.h>
    /* zmq_msg_t: 64 bytes, pointer-aligned (zmq.h since libzmq 4.1) */
    typedef struct { int64_t _w[8]; } wt_zmsg;
    static int (*wt_msg_init)(wt_zmsg *);
    static int (*wt_msg_recv)(wt_zmsg *, void *, int);
    static int (*wt_msg_more)(const wt_zmsg *);
    static int (*wt_msg_close)(wt_zmsg *);
    static void *(*wt_msg_data)(wt_zmsg *);
    static size_t (*wt_msg_size)(const wt_zmsg *);
    static const char *(*wt_msg_gets)(const wt_zmsg *, const char *);

    static void wt_bind(size_t init, size_t recv, size_t more, size_t close, size_t data, size_t size,
                        size_t gets) {
        wt_msg_init = (int (*)(wt_zmsg *))init;
        wt_msg_recv = (int (*)(wt_zmsg *, void *, int))recv;
        wt_msg_more = (int (*)(const wt_zmsg *))more;
        wt_msg_close = (int (*)(wt_zmsg *))close;
        wt_msg_data = (void *(*)(wt_zmsg *))data;
        wt_msg_size = (size_t (*)(const wt_zmsg *))size;
        wt_msg_gets = (const char *(*)(const wt_zmsg *, const char *))gets;
    }

    /* One part, not waiting (ZMQ_DONTWAIT = 1): 0 and *out (a new bytes, or NULL when
       out is NULL) and *more, or the errno. With user (not NULL): also the part's
       "User-Id" property as a new str, or EINVAL where it has none (pyzmq's Frame.get). */
    static int wt_part(void *sock, PyObject **out, int *more, PyObject **user) {
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
        if (user != NULL) {
            const char *uid = wt_msg_gets(&msg, "User-Id");
            if (uid == NULL) {
                int err = errno;
                wt_msg_close(&msg);
                return err ? err : EINVAL;
            }
            *user = PyUnicode_DecodeUTF8(uid, (Py_ssize_t)strlen(uid), NULL);
            if (*user == NULL) {
                wt_msg_close(&msg);
                return -1;    /* the decode's exception is set */
            }
        }
        if (out != NULL)
            *out = PyBytes_FromStringAndSize((const char *)wt_msg_data(&msg), (Py_ssize_t)wt_msg_size(&msg));
        wt_msg_close(&msg);
        return 0;
    }

    /* (identity, frame), (identity, None) for a message of other than two parts (the
       rest received and dropped), or the errno as an int (EAGAIN: nothing waits);
       NULL with an exception set (MemoryError, a User-Id not UTF-8). with_user: a
       third item, the frame's User-Id (None for a message not ours). */
    static PyObject *wt_recv(size_t handle, int with_user) {
        void *sock = (void *)handle;
        PyObject *identity = NULL, *frame = NULL, *user = NULL, *out;
        int more = 0, err;
        if (sock == NULL)
            return PyLong_FromLong(ENOTSOCK);
        err = wt_part(sock, &identity, &more, NULL);
        if (err)
            return PyLong_FromLong(err);
        if (identity == NULL)
            return NULL;
        if (more) {
            err = wt_part(sock, &frame, &more, with_user ? &user : NULL);
            if (err < 0) {
                Py_DECREF(identity);
                return NULL;
            }
            if (err) {        /* nothing after the identity (a message arrives whole), or no User-Id */
                Py_DECREF(identity);
                while (more && wt_part(sock, NULL, &more, NULL) == 0)
                    ;
                return PyLong_FromLong(err);
            }
            if (frame == NULL) {
                Py_DECREF(identity);
                Py_XDECREF(user);
                return NULL;
            }
            if (more) {       /* more parts: received and dropped */
                Py_CLEAR(frame);
                Py_CLEAR(user);
                while (more && wt_part(sock, NULL, &more, NULL) == 0)
                    ;
            }
        }
        if (frame == NULL) { frame = Py_None; Py_INCREF(frame); }
        if (with_user) {
            if (user == NULL) { user = Py_None; Py_INCREF(user); }
            out = PyTuple_Pack(3, identity, frame, user);
            Py_DECREF(user);
        } else {
            out = PyTuple_Pack(2, identity, frame);
        }
        Py_DECREF(identity);
        Py_DECREF(frame);
        return out;
    }
    """
    void wt_bind(size_t init, size_t recv, size_t more, size_t close, size_t data, size_t size,
                 size_t gets)
    object wt_recv(size_t handle, int with_user)


cdef class Envelopes:
    cdef public object sock
    cdef public bint native
    cdef size_t _handle
    cdef object _native(self, int with_user)
