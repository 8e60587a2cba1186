/* One vector step over in-process sub-envs, the EnvRunner's hot loop below Python.
 *
 * step_envs(step_fns, actions, nxt, rew, term, trunc, ep_ret, fit, fast)
 *     -> (ended, failed, finite)
 *
 * For each sub-env i: call step_fns[i](actions[i]) and unpack (obs, reward, terminated,
 * truncated, info). An Exception from the call or the unpack is not raised: it goes into
 * `failed` as (i, exception) and the sub-env is skipped (a BaseException that is not an
 * Exception, such as KeyboardInterrupt, propagates). Otherwise obs is written into row i
 * of `nxt` (C-contiguous float32, shape (envs, dim)): when `fast` is true and obs is a
 * 1-D float64/float32 buffer of `dim` items it is copied (cast like numpy's assignment),
 * anything else goes through `fit(nxt, i, obs, "step")`, the runner's checked encoder
 * write, which refuses an observation of the wrong size. Then rew[i] = reward,
 * ep_ret[i] += reward, term[i]/trunc[i] = True when set, and i is appended to `ended`
 * when either is. `finite` is false when a written observation row or a reward holds NaN
 * or inf (the caller then runs its exact per-env check). Errors from `fit` or from adding
 * the reward propagate. The pure-Python loop in ftrl/rl/env_runner.py does the same.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <string.h>

/* items[0..4] = new references to the 5 values of res, or -1 with an exception set */
static int
unpack5(PyObject *res, PyObject **items)
{
    PyObject *tup = res;
    if (!PyTuple_CheckExact(res)) {
        tup = PySequence_Tuple(res);
        if (tup == NULL)
            return -1;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(tup);
    if (n != 5) {
        if (n < 5)
            PyErr_Format(PyExc_ValueError, "not enough values to unpack (expected 5, got %zd)", n);
        else
            PyErr_SetString(PyExc_ValueError, "too many values to unpack (expected 5)");
        if (tup != res)
            Py_DECREF(tup);
        return -1;
    }
    for (int k = 0; k < 5; k++) {
        items[k] = PyTuple_GET_ITEM(tup, k);
        Py_INCREF(items[k]);
    }
    if (tup != res)
        Py_DECREF(tup);
    return 0;
}

/* 1: obs (a 1-D float64/float32 buffer of d items) copied into row, *finite updated;
 * 0: obs is something else (the caller writes it through fit) */
static int
copy_row(PyObject *obs, float *row, Py_ssize_t d, int *finite)
{
    Py_buffer v;
    if (!PyObject_CheckBuffer(obs))
        return 0;
    if (PyObject_GetBuffer(obs, &v, PyBUF_RECORDS_RO) < 0) {
        PyErr_Clear();
        return 0;
    }
    int ok = 0;
    const char *f = v.format != NULL ? v.format : "B";
    if (f[0] == '<' || f[0] == '=' || f[0] == '@')
        f++;
    if (v.ndim == 1 && v.shape[0] == d && f[0] != '\0' && f[1] == '\0') {
        const char *p = (const char *)v.buf;
        Py_ssize_t s = v.strides[0];
        if (f[0] == 'd' && v.itemsize == 8) {
            for (Py_ssize_t j = 0; j < d; j++)
                row[j] = (float)*(const double *)(p + j * s);
            ok = 1;
        } else if (f[0] == 'f' && v.itemsize == 4) {
            for (Py_ssize_t j = 0; j < d; j++)
                row[j] = *(const float *)(p + j * s);
            ok = 1;
        }
        if (ok)
            for (Py_ssize_t j = 0; j < d; j++)
                if (!isfinite(row[j]))
                    *finite = 0;
    }
    PyBuffer_Release(&v);
    return ok;
}

/* obs written through fit(nxt, i, obs, "step"); 0 or -1 with an exception set */
static int
fit_row(PyObject *fit, PyObject *nxt, Py_ssize_t i, PyObject *obs, const float *row, Py_ssize_t d,
        int *finite)
{
    PyObject *idx = PyLong_FromSsize_t(i);
    PyObject *what = PyUnicode_FromString("step");
    PyObject *x = NULL;
    if (idx != NULL && what != NULL)
        x = PyObject_CallFunctionObjArgs(fit, nxt, idx, obs, what, NULL);
    Py_XDECREF(idx);
    Py_XDECREF(what);
    if (x == NULL)
        return -1;
    Py_DECREF(x);
    for (Py_ssize_t j = 0; j < d; j++)
        if (!isfinite(row[j]))
            *finite = 0;
    return 0;
}

/* ep_ret[i] += r and rew[i] = r; *finite cleared for a NaN/inf reward; -1 on error */
static int
add_reward(PyObject *ep_ret, PyObject *rew, Py_ssize_t i, PyObject *r, int *finite)
{
    PyObject *acc = PyList_GET_ITEM(ep_ret, i);
    PyObject *sum;
    double rv;
    if (PyFloat_CheckExact(r) && PyFloat_CheckExact(acc)) {
        rv = PyFloat_AS_DOUBLE(r);
        sum = PyFloat_FromDouble(PyFloat_AS_DOUBLE(acc) + rv);
    } else {
        sum = PyNumber_InPlaceAdd(acc, r);
        if (sum == NULL)
            return -1;
        rv = PyFloat_AsDouble(r);
        if (rv == -1.0 && PyErr_Occurred()) {
            Py_DECREF(sum);
            return -1;
        }
    }
    if (sum == NULL)
        return -1;
    if (!isfinite(rv))
        *finite = 0;
    PyList_SetItem(ep_ret, i, sum);
    Py_INCREF(r);
    PyList_SetItem(rew, i, r);
    return 0;
}

static int
append_failure(PyObject *failed, Py_ssize_t i)
{
    PyObject *typ, *exc, *tb;
    PyErr_Fetch(&typ, &exc, &tb);
    PyErr_NormalizeException(&typ, &exc, &tb);
    if (tb != NULL && exc != NULL)
        PyException_SetTraceback(exc, tb);
    Py_XDECREF(typ);
    Py_XDECREF(tb);
    PyObject *pair = Py_BuildValue("(nN)", i, exc);
    if (pair == NULL)
        return -1;
    int rc = PyList_Append(failed, pair);
    Py_DECREF(pair);
    return rc;
}

static int
set_true(PyObject *list, Py_ssize_t i)
{
    Py_INCREF(Py_True);
    return PyList_SetItem(list, i, Py_True);
}

static PyObject *
step_envs(PyObject *self, PyObject *args)
{
    PyObject *fns, *actions, *nxt, *rew, *term, *trunc, *ep_ret, *fit;
    int fast;
    if (!PyArg_ParseTuple(args, "O!O!OO!O!O!O!Op:step_envs", &PyList_Type, &fns, &PyList_Type,
                          &actions, &nxt, &PyList_Type, &rew, &PyList_Type, &term, &PyList_Type,
                          &trunc, &PyList_Type, &ep_ret, &fit, &fast))
        return NULL;
    Py_ssize_t e = PyList_GET_SIZE(fns);
    if (PyList_GET_SIZE(actions) != e || PyList_GET_SIZE(rew) != e || PyList_GET_SIZE(term) != e
        || PyList_GET_SIZE(trunc) != e || PyList_GET_SIZE(ep_ret) != e) {
        PyErr_SetString(PyExc_ValueError, "step_envs: the lists must have one item per sub-env");
        return NULL;
    }
    Py_buffer out;
    if (PyObject_GetBuffer(nxt, &out, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return NULL;
    if (out.ndim != 2 || out.shape[0] != e || out.itemsize != 4 || out.format == NULL
        || strcmp(out.format, "f") != 0) {
        PyBuffer_Release(&out);
        PyErr_SetString(PyExc_ValueError,
                        "step_envs: nxt must be a C-contiguous float32 array of shape (envs, dim)");
        return NULL;
    }
    Py_ssize_t d = out.shape[1];
    float *base = (float *)out.buf;
    int finite = 1;
    PyObject *ended = PyList_New(0);
    PyObject *failed = PyList_New(0);
    if (ended == NULL || failed == NULL)
        goto error;
    for (Py_ssize_t i = 0; i < e; i++) {
        PyObject *items[5];
        PyObject *res = PyObject_CallOneArg(PyList_GET_ITEM(fns, i), PyList_GET_ITEM(actions, i));
        int rc = -1;
        if (res != NULL) {
            rc = unpack5(res, items);
            Py_DECREF(res);
        }
        if (rc < 0) {
            if (!PyErr_ExceptionMatches(PyExc_Exception) || append_failure(failed, i) < 0)
                goto error;
            continue;
        }
        float *row = base + i * d;
        int te = PyObject_IsTrue(items[2]);
        int tr = te < 0 ? -1 : PyObject_IsTrue(items[3]);
        rc = tr < 0 ? -1 : 0;
        if (rc == 0 && !(fast && copy_row(items[0], row, d, &finite)))
            rc = fit_row(fit, nxt, i, items[0], row, d, &finite);
        if (rc == 0)
            rc = add_reward(ep_ret, rew, i, items[1], &finite);
        for (int k = 0; k < 5; k++)
            Py_DECREF(items[k]);
        if (rc < 0)
            goto error;
        if (te || tr) {
            if ((te && set_true(term, i) < 0) || (tr && set_true(trunc, i) < 0))
                goto error;
            PyObject *idx = PyLong_FromSsize_t(i);
            if (idx == NULL || PyList_Append(ended, idx) < 0) {
                Py_XDECREF(idx);
                goto error;
            }
            Py_DECREF(idx);
        }
    }
    PyBuffer_Release(&out);
    return Py_BuildValue("(NNO)", ended, failed, finite ? Py_True : Py_False);
error:
    PyBuffer_Release(&out);
    Py_XDECREF(ended);
    Py_XDECREF(failed);
    return NULL;
}

static PyMethodDef methods[] = {
    {"step_envs", step_envs, METH_VARARGS, "One vector step over in-process sub-envs."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "ftrl.rl._vecstep",
    "The EnvRunner's vector step below Python (see ftrl/rl/_vecstep.c).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__vecstep(void)
{
    return PyModule_Create(&module);
}
