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


def _frame_of(aw):
    return getattr(aw, "cr_frame", None) or getattr(aw, "gi_frame", None) or getattr(aw, "ag_frame", None)


def _next_of(aw):
    for name in ("cr_await", "gi_yieldfrom", "ag_await"):
        nxt = getattr(aw, name, None)
        if nxt is not None:
            return nxt
    return None


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
    # asyncio's own fan-in helpers: a task waiting in one of them waits for other tasks.
    fan_in = {("tasks.py", n) for n in ("wait", "_wait", "wait_for", "as_completed", "_wait_for_one")}
    fan_in |= {("taskgroups.py", n) for n in ("__aexit__", "_aexit")}
    uvloop_said = False
    loop_idents = set()
    while True:
        time.sleep(interval)
        # A snapshot is wanted while the loops wait in their selectors (that is when onefix
        # uses it): if one is running a step, look again a little later, a few times at most.
        for _ in range(3):
            frames = sys._current_frames()
            running = [i for i in loop_idents if i in frames and not frames[i].f_code.co_filename.endswith("selectors.py")]
            del frames
            if not running:
                break
            time.sleep(interval / 5)
        now = time.monotonic()
        loop_idents = set()
        for _ in range(10):  # another thread may add a task while the set is copied
            try:
                live = sources()
                break
            except RuntimeError:
                live = None
        if live is None:
            continue
        current = getattr(tasks, "_current_tasks", {})
        thread_of = {}
        lines = []
        for task in live[:_MAX_TASKS]:
            try:
                if task.done():
                    continue
                loop = task.get_loop()
                if loop not in thread_of:
                    ident = getattr(loop, "_thread_id", None)
                    loop_idents.add(ident)
                    th = threading._active.get(ident) if ident is not None else None
                    thread_of[loop] = getattr(th, "native_id", None)
                    if not uvloop_said and type(loop).__module__.startswith("uvloop"):
                        uvloop_said = True
                        lines.append(f"V\t{os.getpid()}\tuvloop\n")
                tid = thread_of[loop]
                if tid is None:
                    continue
                running = current.get(loop) is task
                waiter = getattr(task, "_fut_waiter", None)
                chain = []
                innermost = None
                aw = task.get_coro()
                while aw is not None and len(chain) < _MAX_DEPTH:
                    f = _frame_of(aw)
                    if f is None:
                        break
                    code = f.f_code
                    chain.append(f"{_esc(getattr(code, 'co_qualname', code.co_name))}\x1f{_esc(code.co_filename)}\x1f{f.f_lineno or 0}")
                    innermost = code
                    aw = _next_of(aw)
                join = isinstance(waiter, joins) or (
                    innermost is not None
                    and "asyncio" in innermost.co_filename
                    and (os.path.basename(innermost.co_filename), innermost.co_name) in fan_in
                )
                state = "r" if running else ("j" if join else "w")
                # The tasks this one waits for, when it awaits them directly or through gather:
                # their stacks continue this one's.
                children = getattr(waiter, "_children", None) or ([waiter] if isinstance(waiter, tasks.Task) else [])
                kids = ",".join(str(id(c)) for c in children[:_MAX_TASKS])
                lines.append(f"T\t{os.getpid()}\t{tid}\t{id(task)}\t{_esc(task.get_name())}\t{state}\t" + "\x1e".join(chain) + f"\t{kids}\n")
            except Exception:
                continue
        record = f"S\t{os.getpid()}\t{me}\t{now:.6f}\t{len(lines)}\n" + "".join(lines)
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
