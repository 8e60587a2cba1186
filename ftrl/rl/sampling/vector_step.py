"""One vector step over in-process sub-envs: the EnvRunner's hot loop, in C or in Python.

`step_envs` below is the pure-Python twin of `ftrl.rl.sampling._vecstep.step_envs`
(ftrl/rl/sampling/_vecstep.c, built by `pip install` where a C compiler is found): the
same signature, return value, calls in the same order and the same side effects, so the
runner calls whichever `select_step_envs()` picks through one code path:

    step_envs(step_fns, actions, nxt, rew, term, trunc, ep_ret, fit, fast[, reset_fns[, infos]])
        -> (ended, failed, finite, resets)

For each sub-env i: `o, r, te, tr, info = step_fns[i](actions[i])`; an Exception there goes
into `failed` as (i, exception) and the sub-env is skipped (other BaseExceptions
propagate). When `infos` is a list (the runner's episode callbacks asked for them),
infos[i] = info right after the unpack; with None (the default) infos are dropped.
Otherwise `o` is written into row i of `nxt` (C-contiguous float32 or uint8, shape (envs,
dim)): into float32 rows copied when `fast` and it is a 1-D native float64/float32 array
of `dim` items, else (and always into uint8 rows: pixels) through `fit(nxt, i, o,
"step")` (the runner's checked encoder write). Then
rew[i] = r, ep_ret[i] += r, term[i]/trunc[i] = True when set, and i is appended to
`ended` when either is. `finite` is False when a written row holds NaN or inf, or a
reward is NaN, inf or no float (the caller then runs its exact per-env check; uint8 rows
are always finite). Errors
from `fit` or from adding the reward propagate.

Episode ends: only when `reset_fns` is given, a sub-env whose step ended its episode by
termination alone, with a finite row and reward, and whose reset_fns[i] is not None is
reset at once: `o, _ = reset_fns[i]()` written into row i the same way (through
fit(nxt, i, o, "reset") unless fast), and (i, outcome) appended to `resets`: None (the
row holds the new episode's first observation), the exception the call or unpack
raised, or False (the written row holds NaN or inf). Any other ended sub-env is left to
the caller.

The twins differ in three ways that change no result: the C step copies any 1-D native
float buffer (memoryview, ctypes array, an ndarray subclass) itself where Python sends
it through `fit`, and it sends a view overlapping `nxt` through `fit` where numpy's
assignment copes with the overlap; a float64 observation beyond float32's range
becomes inf without numpy's RuntimeWarning in C.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

import numpy as np

#: (ended, failed, finite, resets), as both twins return it
StepResult = tuple[list[int], list[tuple[int, BaseException]], bool, list[tuple[int, Any]]]
StepEnvs = Callable[..., StepResult]

#: rows of these dtypes are copied directly on the fast path (as _vecstep.c's native floats)
_F32, _F64, _U8 = np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.uint8)
_FLOAT_ROWS = (_F32, _F64)
_ndarray = np.ndarray
_isfinite = math.isfinite
#: x.x of a row or batch: NaN/inf (or a huge value) makes it non-finite; the cheapest
#: check per vector step (a non-finite result goes to the exact per-row check)
sq_sum = np.vdot


def step_envs(
    step_fns: list,
    actions: list,
    nxt: np.ndarray,
    rew: list,
    term: list,
    trunc: list,
    ep_ret: list,
    fit: Callable[[np.ndarray, int, Any, str], Any],
    fast: bool,
    reset_fns: list | None = None,
    infos: list | None = None,
) -> StepResult:
    """One vector step in Python; the contract is the module docstring's (and _vecstep.c's)."""
    e = len(step_fns)
    # the arguments checked as the C step checks them (plain lists and arrays: one test each)
    if (type(step_fns) is not list or type(actions) is not list or type(rew) is not list
            or type(term) is not list or type(trunc) is not list or type(ep_ret) is not list
            or (reset_fns is not None and type(reset_fns) is not list)
            or (infos is not None and type(infos) is not list)
            or len(actions) != e or len(rew) != e or len(term) != e or len(trunc) != e or len(ep_ret) != e):
        _check_lists(step_fns, actions, rew, term, trunc, ep_ret, reset_fns, infos)
    if type(nxt) is not _ndarray or nxt.dtype is not _F32 or nxt.ndim != 2 or nxt.shape[0] != e \
            or not nxt.flags.c_contiguous:
        _check_rows(nxt, e)
    if nxt.dtype == _U8:  # byte rows (pixels): every observation goes through `fit`
        fast = False
    d = nxt.shape[1]
    ended: list[int] = []
    failed: list[tuple[int, BaseException]] = []
    resets: list[tuple[int, Any]] = []
    unchecked: list[int] | None = None  # rows the finite check skips: failed steps, bad resets
    for i in range(e):
        try:
            o, r, te, tr, info = step_fns[i](actions[i])
        except Exception as exc:
            failed.append((i, exc))
            if unchecked is None:
                unchecked = []
            unchecked.append(i)
            continue
        if infos is not None:
            infos[i] = info
        if (fast and type(o) is _ndarray and ((dt := o.dtype) is _F32 or dt is _F64 or dt in _FLOAT_ROWS)
                and o.ndim == 1 and len(o) == d):  # (`_float_row` inline: the hot path)
            nxt[i] = o
        else:
            fit(nxt, i, o, "step")
        rew[i] = r
        ep_ret[i] += r
        if te or tr:
            te, tr = (True, bool(tr)) if te else (False, True)  # each truth value once, before any flag (as C)
            if te:
                term[i] = True
            if tr:
                trunc[i] = True
            ended.append(i)
            if te and not tr and reset_fns is not None:
                reset_fn = reset_fns[i]
                if reset_fn is not None and _row_finite(nxt, i) and _reward_finite(r):
                    outcome = _reset_into(reset_fn, nxt, i, fit, fast)
                    resets.append((i, outcome))
                    if outcome is False:
                        if unchecked is None:
                            unchecked = []
                        unchecked.append(i)
    try:
        finite = _isfinite(sum(rew)) and (nxt.dtype == _U8 or _isfinite(sq_sum(nxt, nxt)))
    except (TypeError, ValueError):  # a reward that is no float
        finite = False
    if not finite:  # exactly, over the rows and rewards this step wrote (as the C step checks)
        finite = _all_finite(nxt, rew, unchecked or ())
    return ended, failed, finite, resets


def _float_row(dt: np.dtype) -> bool:
    """A native float32/float64 dtype (identity first: numpy's builtin dtypes are shared)."""
    return dt is _F32 or dt is _F64 or dt in _FLOAT_ROWS


def _check_lists(*lists: Any) -> None:
    """Raise as the C step does for arguments that are no lists, or not one item per sub-env."""
    *lists, reset_fns, infos = lists
    if not all(isinstance(x, list) for x in lists):
        raise TypeError("step_envs: step_fns, actions, rew, term, trunc and ep_ret must be lists")
    if reset_fns is not None and not isinstance(reset_fns, list):
        raise TypeError("step_envs: reset_fns must be a list or None")
    if infos is not None and not isinstance(infos, list):
        raise TypeError("step_envs: infos must be a list or None")
    if any(len(x) != len(lists[0]) for x in lists):
        raise ValueError("step_envs: the lists must have one item per sub-env")


def _check_rows(nxt: Any, e: int) -> None:
    """Raise unless `nxt` is a C-contiguous float32 or uint8 array of shape (e, dim)."""
    if (not isinstance(nxt, _ndarray) or nxt.dtype not in (_F32, _U8) or nxt.ndim != 2 or nxt.shape[0] != e
            or not nxt.flags.c_contiguous):
        raise ValueError("step_envs: nxt must be a C-contiguous float32 or uint8 array of shape (envs, dim)")


def _reset_into(reset_fn: Callable[[], Any], nxt: np.ndarray, i: int, fit: Callable, fast: bool) -> Any:
    """Reset one sub-env into row i of `nxt`: its outcome (None, the exception, or False)."""
    try:
        o, _ = reset_fn()
    except Exception as exc:
        return exc
    if fast and type(o) is _ndarray and _float_row(o.dtype) and o.ndim == 1 and len(o) == nxt.shape[1]:
        nxt[i] = o
    else:
        fit(nxt, i, o, "reset")
    return None if _row_finite(nxt, i) else False


def _row_finite(nxt: np.ndarray, i: int) -> bool:
    if nxt.dtype == _U8:
        return True
    row = nxt[i]
    return _isfinite(sq_sum(row, row)) or bool(np.isfinite(row).all())


def _reward_finite(r: Any) -> bool:
    try:
        return _isfinite(r)
    except (TypeError, ValueError):
        return False


def _all_finite(nxt: np.ndarray, rew: list, unchecked: Any) -> bool:
    """Every row and reward written this step is finite (`unchecked`: sub-envs whose step
    failed, whose row and reward were not written, and rows holding a failed reset)."""
    for i in range(len(rew)):
        if i in unchecked:
            continue
        if not _reward_finite(rew[i]) or not _row_finite(nxt, i):
            return False
    return True


def native_step_envs() -> StepEnvs | None:
    """The C step (`ftrl.rl.sampling._vecstep.step_envs`), or None where it is not built
    or `FTRL_PURE_PYTHON=1` asks for the Python one."""
    if os.environ.get("FTRL_PURE_PYTHON", "") not in ("", "0"):
        return None
    try:
        from ftrl.rl.sampling._vecstep import step_envs as native
    except ImportError:
        return None
    return native


def select_step_envs() -> StepEnvs:
    """The vector step to use: the C one when built (and not turned off), else `step_envs`."""
    return native_step_envs() or step_envs


def loop_name(fn: StepEnvs) -> str:
    """"python" for the pure-Python twin, "c" for anything else (the C step)."""
    return "python" if fn is step_envs else "c"
