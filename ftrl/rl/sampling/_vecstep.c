/* One vector step over in-process sub-envs, the EnvRunner's hot loop below Python.
 *
 * step_envs(step_fns, actions, nxt, rew, term, trunc, ep_ret, fit, fast[, reset_fns[, infos]])
 *     -> (ended, failed, finite, resets)
 *
 * For each sub-env i: call step_fns[i](actions[i]) and unpack (obs, reward, terminated,
 * truncated, info). An Exception from the call or the unpack is not raised: it goes into
 * `failed` as (i, exception) and the sub-env is skipped (a BaseException that is not an
 * Exception, such as KeyboardInterrupt, propagates). Otherwise obs is written into row i
 * of `nxt` (C-contiguous float32 or uint8, shape (envs, dim)): into float32 rows, when
 * `fast` is true and obs is a 1-D float64/float32 buffer of `dim` items it is copied (cast
 * like numpy's assignment); anything else, and every obs into uint8 rows (pixels, always
 * finite), goes through `fit(nxt, i, obs, "step")`, the runner's checked encoder
 * write, which refuses an observation of the wrong size. Then rew[i] = reward,
 * ep_ret[i] += reward, term[i]/trunc[i] = True when set, and i is appended to `ended`
 * when either is. `finite` is false when a written observation row holds NaN or inf, or
 * a reward is NaN, inf or no float (the caller then runs its exact per-env check). Errors from `fit` or from adding
 * the reward propagate, after the same side effects as in the pure-Python loop in
 * ftrl/rl/sampling/env_runner.py, which does the same (one difference: a float64 observation
 * beyond float32's range becomes inf without numpy's RuntimeWarning; the row is flagged).
 *
 * Episode ends, in C too (the runner's other hot path: a CartPole fragment of 1,024 steps
 * has ~46 of them): when `reset_fns` is given and a sub-env's step ended its episode by
 * termination alone (no truncation: that one needs the final observation's value) with
 * a finite row and reward, and reset_fns[i] is not None, the sub-env is reset at once:
 * reset_fns[i]() is unpacked as (obs, info) and obs written into row i of `nxt` the same
 * way (through fit(nxt, i, obs, "reset") unless fast). (i, outcome) is appended to
 * `resets`: outcome None when the row holds the new episode's first observation, the
 * exception when the call or the unpack raised one (an Exception, as for steps), False
 * when the written row holds NaN or inf. Any other ended sub-env is left to the caller.
 * When `infos` is a list (the runner's episode callbacks asked for them), infos[i] is set
 * to the step's info right after the unpack; with None (the default) infos are dropped.
 * Python code called from here cannot crash it by changing the lists: IndexError.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <string.h>

/* items[0..n-1] = new references to the n values of res, unpacked as Python's
 * `o, r, te, tr, _ = res` (n = 5) or `o, _ = res` (n = 2) does (any iterable, read no
 * further than item n + 1), or -1 with Python's exception set */
static int
unpack_n(PyObject *res, PyObject **items, int want)
{
    if (PyTuple_CheckExact(res) && PyTuple_GET_SIZE(res) == want) {
        for (int k = 0; k < want; k++) {
            items[k] = PyTuple_GET_ITEM(res, k);
            Py_INCREF(items[k]);
        }
        return 0;
    }
    PyObject *it = PyObject_GetIter(res);
    if (it == NULL) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "cannot unpack non-iterable %.200s object",
                         Py_TYPE(res)->tp_name);
        }
        return -1;
    }
    int n = 0;
    for (; n < want; n++) {
        items[n] = PyIter_Next(it);
        if (items[n] == NULL)
            break;
    }
    PyObject *extra = NULL;
    if (n == want && !PyErr_Occurred())
        extra = PyIter_Next(it);
    Py_DECREF(it);
    if (n == want && extra == NULL && !PyErr_Occurred())
        return 0;
    if (!PyErr_Occurred()) {
        if (n < want)
            PyErr_Format(PyExc_ValueError, "not enough values to unpack (expected %d, got %d)", want, n);
        else
            PyErr_Format(PyExc_ValueError, "too many values to unpack (expected %d)", want);
    }
    Py_XDECREF(extra);
    for (int k = 0; k < n; k++)
        Py_DECREF(items[k]);
    return -1;
}

/* the format of a native float64 ('d') or float32 ('f') item, or 0 */
static char
native_float(const char *f)
{
    if (f == NULL)
        return 0;
#if PY_LITTLE_ENDIAN
    if (f[0] == '<' || f[0] == '=' || f[0] == '@')
#else
    if (f[0] == '>' || f[0] == '!' || f[0] == '=' || f[0] == '@')
#endif
        f++;
    if ((f[0] == 'd' || f[0] == 'f') && f[1] == '\0')
        return f[0];
    return 0;
}

/* 1: obs (a 1-D float64/float32 buffer of d items, not overlapping `out`) copied into row
 * with numpy's cast, *finite cleared for NaN/inf; 0: anything else (the caller writes it
 * through fit) */
static int
copy_row(PyObject *obs, float *row, Py_ssize_t d, const Py_buffer *out, int *finite)
{
    Py_buffer v;
    if (!PyObject_CheckBuffer(obs))
        return 0;
    if (PyObject_GetBuffer(obs, &v, PyBUF_RECORDS_RO) < 0) {
        PyErr_Clear();
        return 0;
    }
    char kind = native_float(v.format);
    int ok = kind != 0 && v.ndim == 1 && v.itemsize == (kind == 'd' ? 8 : 4)
             && (v.shape != NULL ? v.shape[0] : v.len / v.itemsize) == d;
    Py_ssize_t s = v.strides != NULL ? v.strides[0] : v.itemsize;  /* no strides: contiguous */
    const char *p = (const char *)v.buf;
    if (ok && d > 0) {  /* a view of the rows being written: numpy's assignment handles it */
        const char *lo = s >= 0 ? p : p + (d - 1) * s;
        const char *hi = (s >= 0 ? p + (d - 1) * s : p) + v.itemsize;
        const char *olo = (const char *)out->buf;
        ok = !(lo < olo + out->len && olo < hi);
    }
    for (Py_ssize_t j = 0; ok && j < d; j++) {
        if (kind == 'd') {
            double x;
            memcpy(&x, p + j * s, sizeof x);
            row[j] = (float)x;
        } else {
            memcpy(&row[j], p + j * s, sizeof(float));
        }
        if (!isfinite(row[j]))
            *finite = 0;
    }
    PyBuffer_Release(&v);
    return ok;
}

/* obs written through fit(nxt, i, obs, what); 0 or -1 with an exception set */
static int
fit_row(PyObject *fit, PyObject *nxt, Py_ssize_t i, PyObject *obs, const float *row, Py_ssize_t d,
        const char *what_s, int *finite)
{
    PyObject *idx = PyLong_FromSsize_t(i);
    PyObject *what = PyUnicode_FromString(what_s);
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

/* IndexError unless every list still has item i (Python code called from here could
 * have shrunk one) */
static int
check_index(PyObject *const *lists, int nlists, Py_ssize_t i)
{
    for (int k = 0; k < nlists; k++)
        if (i >= PyList_GET_SIZE(lists[k])) {
            PyErr_SetString(PyExc_IndexError, "list index out of range");
            return -1;
        }
    return 0;
}

/* rew[i] = r, then ep_ret[i] += r (the Python loop's order); *finite cleared for a
 * reward that is NaN/inf or not convertible to float (the caller's exact check then
 * raises as the Python loop does); -1 on error */
static int
add_reward(PyObject *ep_ret, PyObject *rew, Py_ssize_t i, PyObject *r, int *finite)
{
    PyObject *const lists[] = {ep_ret, rew};
    if (check_index(lists, 2, i) < 0)
        return -1;
    Py_INCREF(r);
    if (PyList_SetItem(rew, i, r) < 0)
        return -1;
    PyObject *acc = PyList_GET_ITEM(ep_ret, i);
    PyObject *sum;
    double rv;
    if (PyFloat_CheckExact(r) && PyFloat_CheckExact(acc)) {
        rv = PyFloat_AS_DOUBLE(r);
        sum = PyFloat_FromDouble(PyFloat_AS_DOUBLE(acc) + rv);
    } else {
        Py_INCREF(acc);
        sum = PyNumber_InPlaceAdd(acc, r);
        Py_DECREF(acc);
        if (sum == NULL)
            return -1;
        rv = PyFloat_AsDouble(r);
        if (rv == -1.0 && PyErr_Occurred()) {
            PyErr_Clear();
            rv = NAN;
        }
    }
    if (sum == NULL)
        return -1;
    if (!isfinite(rv))
        *finite = 0;
    if (check_index(lists, 1, i) < 0) {
        Py_DECREF(sum);
        return -1;
    }
    return PyList_SetItem(ep_ret, i, sum);
}

/* (i, outcome) appended to `list` (outcome: a new reference, or NULL for an error) */
static int
append_pair(PyObject *list, Py_ssize_t i, PyObject *outcome)
{
    if (outcome == NULL)
        return -1;
    PyObject *pair = Py_BuildValue("(nN)", i, outcome);
    if (pair == NULL)
        return -1;
    int rc = PyList_Append(list, pair);
    Py_DECREF(pair);
    return rc;
}

/* (i, the exception being raised, with its traceback) appended to `failed`, the
 * exception cleared */
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
    return append_pair(failed, i, exc);
}

/* sub-env i reset into its row by reset_fn() (see the top): (i, outcome) appended to
 * `resets`; 0, or -1 with an exception set */
static int
reset_one(PyObject *reset_fn, PyObject *nxt, const Py_buffer *out, PyObject *fit, int fast,
          Py_ssize_t i, PyObject *resets)
{
    Py_INCREF(reset_fn);
    PyObject *res = PyObject_CallNoArgs(reset_fn);
    Py_DECREF(reset_fn);
    PyObject *items[2];
    int rc = -1;
    if (res != NULL) {
        rc = unpack_n(res, items, 2);
        Py_DECREF(res);
    }
    if (rc < 0) {
        if (!PyErr_ExceptionMatches(PyExc_Exception))
            return -1;
        return append_failure(resets, i);
    }
    Py_ssize_t d = out->shape[1];
    int floats = out->itemsize == 4;  /* else uint8 rows (pixels): always through fit, finite */
    float *row = floats ? (float *)out->buf + i * d : NULL;
    int row_finite = 1;
    if (!(fast && floats && copy_row(items[0], row, d, out, &row_finite)))
        rc = fit_row(fit, nxt, i, items[0], row, floats ? d : 0, "reset", &row_finite);
    Py_DECREF(items[0]);
    Py_DECREF(items[1]);
    if (rc < 0)
        return -1;
    PyObject *outcome = row_finite ? Py_None : Py_False;
    Py_INCREF(outcome);
    return append_pair(resets, i, outcome);
}

static int
set_true(PyObject *list, Py_ssize_t i)
{
    Py_INCREF(Py_True);
    return PyList_SetItem(list, i, Py_True);
}

/* step sub-env i: call, unpack, write obs/reward/flags, reset it when its episode ended
 * and reset_fns allow (see the top); 1: stepped, 0: the step failed (the exception is in
 * `failed`), -1: error */
static int
step_one(PyObject *const *lists, PyObject *nxt, const Py_buffer *out, PyObject *fit, int fast,
         PyObject *reset_fns, PyObject *infos, Py_ssize_t i, PyObject *ended, PyObject *failed,
         PyObject *resets, int *finite)
{
    PyObject *fns = lists[0], *actions = lists[1], *rew = lists[2], *term = lists[3],
             *trunc = lists[4], *ep_ret = lists[5];
    if (check_index(lists, 2, i) < 0)
        return -1;
    PyObject *fn = PyList_GET_ITEM(fns, i), *action = PyList_GET_ITEM(actions, i);
    Py_INCREF(fn);
    Py_INCREF(action);
    PyObject *res = PyObject_CallOneArg(fn, action);
    Py_DECREF(fn);
    Py_DECREF(action);
    PyObject *items[5];
    int rc = -1;
    if (res != NULL) {
        rc = unpack_n(res, items, 5);
        Py_DECREF(res);
    }
    if (rc < 0) {
        if (!PyErr_ExceptionMatches(PyExc_Exception) || append_failure(failed, i) < 0)
            return -1;
        return 0;
    }
    if (infos != NULL) {
        if (i >= PyList_GET_SIZE(infos)) {
            for (int k = 0; k < 5; k++)
                Py_DECREF(items[k]);
            PyErr_SetString(PyExc_IndexError, "list index out of range");
            return -1;
        }
        Py_INCREF(items[4]);
        if (PyList_SetItem(infos, i, items[4]) < 0) {
            for (int k = 0; k < 5; k++)
                Py_DECREF(items[k]);
            return -1;
        }
    }
    Py_ssize_t d = out->shape[1];
    int floats = out->itemsize == 4;  /* else uint8 rows (pixels): always through fit, finite */
    float *row = floats ? (float *)out->buf + i * d : NULL;
    int row_finite = 1;
    if (!(fast && floats && copy_row(items[0], row, d, out, &row_finite)))
        rc = fit_row(fit, nxt, i, items[0], row, floats ? d : 0, "step", &row_finite);
    if (rc == 0)
        rc = add_reward(ep_ret, rew, i, items[1], &row_finite);
    if (!row_finite)
        *finite = 0;
    int te = rc < 0 ? -1 : PyObject_IsTrue(items[2]);
    int tr = te < 0 ? -1 : PyObject_IsTrue(items[3]);
    for (int k = 0; k < 5; k++)
        Py_DECREF(items[k]);
    if (tr < 0)
        return -1;
    if (te || tr) {
        PyObject *const flags[] = {term, trunc};
        if (check_index(flags, 2, i) < 0)
            return -1;
        if ((te && set_true(term, i) < 0) || (tr && set_true(trunc, i) < 0))
            return -1;
        PyObject *idx = PyLong_FromSsize_t(i);
        if (idx == NULL || PyList_Append(ended, idx) < 0) {
            Py_XDECREF(idx);
            return -1;
        }
        Py_DECREF(idx);
        if (te && !tr && row_finite && reset_fns != NULL) {
            if (i >= PyList_GET_SIZE(reset_fns)) {
                PyErr_SetString(PyExc_IndexError, "list index out of range");
                return -1;
            }
            PyObject *reset_fn = PyList_GET_ITEM(reset_fns, i);
            if (reset_fn != Py_None && reset_one(reset_fn, nxt, out, fit, fast, i, resets) < 0)
                return -1;
        }
    }
    return 1;
}

static PyObject *
step_envs(PyObject *self, PyObject *args)
{
    PyObject *fns, *actions, *nxt, *rew, *term, *trunc, *ep_ret, *fit, *reset_fns = Py_None;
    PyObject *infos = Py_None;
    int fast;
    if (!PyArg_ParseTuple(args, "O!O!OO!O!O!O!Op|OO:step_envs", &PyList_Type, &fns, &PyList_Type,
                          &actions, &nxt, &PyList_Type, &rew, &PyList_Type, &term, &PyList_Type,
                          &trunc, &PyList_Type, &ep_ret, &fit, &fast, &reset_fns, &infos))
        return NULL;
    if (reset_fns != Py_None && !PyList_Check(reset_fns)) {
        PyErr_SetString(PyExc_TypeError, "step_envs: reset_fns must be a list or None");
        return NULL;
    }
    if (infos != Py_None && !PyList_Check(infos)) {
        PyErr_SetString(PyExc_TypeError, "step_envs: infos must be a list or None");
        return NULL;
    }
    Py_ssize_t e = PyList_GET_SIZE(fns);
    if (PyList_GET_SIZE(actions) != e || PyList_GET_SIZE(rew) != e || PyList_GET_SIZE(term) != e
        || PyList_GET_SIZE(trunc) != e || PyList_GET_SIZE(ep_ret) != e) {
        PyErr_SetString(PyExc_ValueError, "step_envs: the lists must have one item per sub-env");
        return NULL;
    }
    Py_buffer out;
    if (PyObject_GetBuffer(nxt, &out, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return NULL;
    if (out.ndim != 2 || out.shape[0] != e || out.format == NULL
        || !((out.itemsize == 4 && strcmp(out.format, "f") == 0)
             || (out.itemsize == 1 && strcmp(out.format, "B") == 0))) {
        PyBuffer_Release(&out);
        PyErr_SetString(PyExc_ValueError,
                        "step_envs: nxt must be a C-contiguous float32 or uint8 array of shape (envs, dim)");
        return NULL;
    }
    PyObject *const lists[] = {fns, actions, rew, term, trunc, ep_ret};
    int finite = 1;
    PyObject *ended = PyList_New(0);
    PyObject *failed = PyList_New(0);
    PyObject *resets = PyList_New(0);
    PyObject *rfns = reset_fns == Py_None ? NULL : reset_fns;
    PyObject *ifos = infos == Py_None ? NULL : infos;
    if (ended == NULL || failed == NULL || resets == NULL)
        goto error;
    for (Py_ssize_t i = 0; i < e; i++)
        if (step_one(lists, nxt, &out, fit, fast, rfns, ifos, i, ended, failed, resets, &finite) < 0)
            goto error;
    PyBuffer_Release(&out);
    return Py_BuildValue("(NNON)", ended, failed, finite ? Py_True : Py_False, resets);
error:
    PyBuffer_Release(&out);
    Py_XDECREF(ended);
    Py_XDECREF(failed);
    Py_XDECREF(resets);
    return NULL;
}

static PyMethodDef methods[] = {
    {"step_envs", step_envs, METH_VARARGS, "One vector step over in-process sub-envs."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "ftrl.rl.sampling._vecstep",
    "The EnvRunner's vector step below Python (see ftrl/rl/sampling/_vecstep.c).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__vecstep(void)
{
    return PyModule_Create(&module);
}
