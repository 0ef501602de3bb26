# onefix asyncio bootstrap: put on PYTHONPATH by `onefix record` when it starts a Python program
# in wall mode. With ONEFIX_ASYNCIO set (a FIFO that onefix reads), a daemon thread writes, at
# the sampling rate, the await chain of every live asyncio task, so that onefix can charge the
# event loop's waiting time to the await line that waits. Without the variable it does nothing
# but chain to the sitecustomize it shadows. It only reads interpreter state: it never changes
# a task, a loop or a frame, and it stops for good at the first error.

# The channel is lines of tab-separated fields (strings escape \\, \t and \n):
#   H pid helper_tid                         this thread, announced once at start
#   S pid helper_tid monotonic_s count       a snapshot: the next `count` T lines belong to it
#   T pid loop_tid task_id name state chain children
#                                            state r(unning), j(oining other tasks), w(aiting);
#                                            chain: frames outermost first, joined by \x1e,
#                                            each qualname \x1f filename \x1f line;
#                                            children: ids of the tasks it awaits, comma-separated
#   U pid version                            no known task registry on this Python version
#   V pid uvloop                             the program runs uvloop

import os
import sys


def _chain_shadowed_sitecustomize():
    # This file shadows any other sitecustomize on the path (Debian ships one): import that one
    # too, as Python would have without us.
    here = os.path.dirname(os.path.abspath(__file__))
    saved_path, saved_module = sys.path[:], sys.modules.pop("sitecustomize", None)
    try:
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
        import importlib

        importlib.import_module("sitecustomize")
    except ImportError:
        pass
    except Exception as e:  # the shadowed file's own error is reported as Python would
        print(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(e).__name__}: {e}", file=sys.stderr)
    finally:
        sys.path[:] = saved_path
        if saved_module is not None:
            sys.modules["sitecustomize"] = saved_module


_chain_shadowed_sitecustomize()

_CHANNEL = os.environ.pop("ONEFIX_ASYNCIO", None)  # popped: child processes are not followed
_RATE_HZ = float(os.environ.pop("ONEFIX_ASYNCIO_HZ", "100") or 100)
_MAX_TASKS = 256
_MAX_DEPTH = 48


def _task_sources():
    """Functions returning the live tasks, per CPython version (the registries are private)."""
    import asyncio.tasks as t

    v = sys.version_info[:2]
    if v == (3, 11):
        return lambda: list(t._all_tasks)
    if v in ((3, 12), (3, 13)):
        # 3.12 split the registry: scheduled tasks (weak) and eager tasks (started in place).
        return lambda: list(t._scheduled_tasks) + list(t._eager_tasks)
    return None


import types as _types

_COROUTINE, _GENERATOR = _types.CoroutineType, _types.GeneratorType
# asyncio's own fan-in helpers: a task waiting in one of them waits for other tasks.
_FAN_IN = {("tasks.py", n) for n in ("wait", "_wait", "wait_for", "as_completed", "_wait_for_one")}
_FAN_IN |= {("taskgroups.py", n) for n in ("__aexit__", "_aexit")}
# Per code object: its frame text up to the line, and whether it is a fan-in helper. Code objects
# live as long as their functions, so this holds a few hundred entries in practice.
_CODE_TEXT = {}


def _code_text(code):
    known = _CODE_TEXT.get(code)
    if known is None:
        if len(_CODE_TEXT) > 20000:
            _CODE_TEXT.clear()
        name = getattr(code, "co_qualname", code.co_name)
        fan_in = "asyncio" in code.co_filename and (os.path.basename(code.co_filename), code.co_name) in _FAN_IN
        known = _CODE_TEXT[code] = (f"{_esc(name)}\x1f{_esc(code.co_filename)}\x1f", fan_in)
    return known


def _walk(aw):
    """The await chain from coroutine `aw`: its frames' text joined, and whether the innermost
    frame is one of asyncio's fan-in helpers."""
    parts = []
    fan_in = False
    while len(parts) < _MAX_DEPTH:
        kind = type(aw)
        if kind is _COROUTINE:
            f, nxt = aw.cr_frame, aw.cr_await
        elif kind is _GENERATOR:  # a generator-based step (`yield from`)
            f, nxt = aw.gi_frame, aw.gi_yieldfrom
        else:  # a future (or its iterator): the end of the chain
            break
        if f is None:
            break
        text, fan_in = _code_text(f.f_code)
        parts.append(f"{text}{f.f_lineno or 0}")
        aw = nxt
    return "\x1e".join(parts), fan_in


def _esc(s):
    return str(s).replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")


def _run():
    import threading
    import time

    me = threading.get_native_id()
    interval = 1.0 / max(_RATE_HZ, 1.0)
    try:
        fd = os.open(_CHANNEL, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return
    # Say at once which thread is ours, so that onefix leaves it out of every sample.
    try:
        os.write(fd, f"H\t{os.getpid()}\t{me}\n".encode())
    except OSError:
        return
    # Until the program imports asyncio there is nothing to read: look rarely.
    while "asyncio.tasks" not in sys.modules:
        time.sleep(0.2)
    import asyncio.tasks as tasks

    sources = _task_sources()
    if sources is None:
        os.write(fd, f"U\t{os.getpid()}\t{sys.version.split()[0]}\n".encode())
        os.close(fd)
        return
    joins = (tasks.Task, getattr(tasks, "_GatheringFuture", tasks.Task))
    uvloop_said = False
    loop_idents = set()
    pid = os.getpid()
    pause = interval
    while True:
        time.sleep(pause)
        # A snapshot is used only while a loop waits in its selector: if one is running a step,
        # look again a little later, twice at most, and skip this round if it still runs (a
        # busy loop is not slowed by walks that would not be used).
        busy = False
        for attempt in range(3):
            frames = sys._current_frames()
            busy = any(i in frames and not frames[i].f_code.co_filename.endswith("selectors.py") for i in loop_idents)
            del frames
            if not busy or attempt == 2:
                break
            time.sleep(interval / 5)
        if busy:
            continue
        now = time.monotonic()
        for _ in range(10):  # another thread may add a task while the set is copied
            try:
                live = sources()
                break
            except RuntimeError:
                live = None
        if live is None:
            continue
        loop_idents = set()
        current = getattr(tasks, "_current_tasks", {})
        thread_of = {}
        lines = []
        for task in live[:_MAX_TASKS]:
            try:
                if task.done():
                    continue
                loop = task.get_loop()
                tid = thread_of.get(loop, -1)
                if tid == -1:
                    ident = getattr(loop, "_thread_id", None)
                    loop_idents.add(ident)
                    th = threading._active.get(ident) if ident is not None else None
                    tid = thread_of[loop] = getattr(th, "native_id", None)
                    if not uvloop_said and type(loop).__module__.startswith("uvloop"):
                        uvloop_said = True
                        lines.append(f"V\t{pid}\tuvloop\n")
                if tid is None:
                    continue
                waiter = task._fut_waiter
                chain, fan_in = _walk(task.get_coro())
                if current.get(loop) is task:
                    state = "r"
                elif fan_in or isinstance(waiter, joins):
                    state = "j"
                else:
                    state = "w"
                children = getattr(waiter, "_children", None) or ([waiter] if isinstance(waiter, tasks.Task) else [])
                kids = ",".join(str(id(c)) for c in children[:_MAX_TASKS])
                lines.append(f"T\t{pid}\t{tid}\t{id(task)}\t{_esc(task.get_name())}\t{state}\t{chain}\t{kids}\n")
            except Exception:
                continue
        # The walk holds the GIL: keep it under 5% of the time, snapshotting less often when
        # there are many tasks (onefix then charges fewer waits, never wrong ones).
        pause = max(interval, 20 * (time.monotonic() - now))
        record = f"S\t{pid}\t{me}\t{now:.6f}\t{len(lines)}\n" + "".join(lines)
        try:
            data = record.encode("utf-8", "replace")
            while data:
                n = os.write(fd, data)
                data = data[n:]
        except BlockingIOError:
            continue  # onefix is behind: this snapshot is lost, the program is not slowed
        except OSError:
            break  # onefix has gone
    try:
        os.close(fd)
    except OSError:
        pass


if _CHANNEL:
    import threading as _threading

    _threading.Thread(target=_run, name="onefix-asyncio", daemon=True).start()
