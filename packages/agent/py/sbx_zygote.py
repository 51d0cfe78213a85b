# A warm Python for the sandboxd agent: started once, it forks a fresh process per execution instead of
# paying interpreter start-up (site, .pth files: 10-20 ms) every time.
#
# usage: python3 sbx_zygote.py SOCKET_PATH SBX_RUN_PY
#
# sbx-helper's `zrun` mode connects to SOCKET_PATH and sends its stdin/stdout/stderr (SCM_RIGHTS), its
# working directory, argv and environment. For each request the zygote forks a supervisor, which
# makes itself a child subreaper, reports its pid, forks the worker and reports the worker's exit
# status when it ends (or kills the worker's whole tree on SIGTERM, or when the helper goes away).
# The worker takes the helper's fds, directory and environment, starts a new session and runs
# sbx_run.run_main() -- the same code a cold `python3 sbx_run.py ...` runs.
#
# Wire format, helper -> zygote: u32le length, then that many bytes of NUL-separated fields:
#   "v1", cwd, argc, argv..., envc, "K=V"...   (three fds ride on the first chunk)
# zygote -> helper: u32le supervisor pid, then i32le exit status (128+N for signal N).
import os
import sys
import signal
import select
import socket

_sock_path = sys.argv[1]
_run_path = sys.argv[2]

_boot = {'__name__': 'sbx_run', '__file__': _run_path, '__builtins__': sys.modules['builtins']}
with open(_run_path, 'rb') as _f:
    exec(compile(_f.read(), _run_path, 'exec'), _boot)

try:
    import ctypes
    _libc = ctypes.CDLL(None, use_errno=True)
    _prctl = _libc.prctl
    _prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG: go when the agent goes
except Exception:
    _prctl = None

_MAX_REQUEST = 16 * 1024 * 1024


def _recv_exact(conn, n):
    chunks = []
    while n > 0:
        b = conn.recv(min(n, 1 << 20))
        if not b:
            raise EOFError('short request')
        chunks.append(b)
        n -= len(b)
    return b''.join(chunks)


def _read_request(conn):
    msg, anc, _flags, _addr = conn.recvmsg(4, socket.CMSG_SPACE(3 * 4))
    fds = []
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            for i in range(0, len(data) - len(data) % 4, 4):
                fds.append(int.from_bytes(data[i:i + 4], sys.byteorder))
    if len(msg) < 4:
        msg += _recv_exact(conn, 4 - len(msg))
    size = int.from_bytes(msg, 'little')
    if len(fds) != 3 or size > _MAX_REQUEST:
        for fd in fds:
            os.close(fd)
        raise ValueError('bad request')
    fields = _recv_exact(conn, size).split(b'\0')
    if fields[0] != b'v1':
        raise ValueError('unknown request version')
    cwd = os.fsdecode(fields[1])
    argc = int(fields[2])
    argv = [os.fsdecode(a) for a in fields[3:3 + argc]]
    envc = int(fields[3 + argc])
    env = {}
    for item in fields[4 + argc:4 + argc + envc]:
        k, _, v = item.partition(b'=')
        env[os.fsdecode(k)] = os.fsdecode(v)
    return fds, cwd, argv, env


def _serve():
    """Accepts requests forever; returns (in the forked supervisor) the request to run."""
    tmp = '%s.%d.tmp' % (_sock_path, os.getpid())
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass
    listener.bind(tmp)
    listener.listen(128)
    os.rename(tmp, _sock_path)  # appears only once it accepts
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # supervisors are reaped by the kernel
    import gc
    gc.freeze()
    while True:
        conn, _ = listener.accept()
        try:
            req = _read_request(conn)
        except Exception as e:
            sys.stderr.write('sbx_zygote: dropping a request: %r\n' % (e,))
            conn.close()
            continue
        pid = os.fork()
        if pid == 0:
            listener.close()
            return conn, req
        for fd in req[0]:
            os.close(fd)
        conn.close()


def _children():
    me = os.getpid()
    out = []
    for name in os.listdir('/proc'):
        if not name.isdigit():
            continue
        try:
            with open('/proc/%s/stat' % name, 'rb') as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b')') + 2:].split()
        if int(fields[1]) == me:
            out.append(int(name))
    return out


def _kill_tree(worker):
    for fn, arg in ((os.killpg, worker), (os.kill, worker)):
        try:
            fn(arg, signal.SIGKILL)
        except OSError:
            pass
    for _ in range(1000):
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            return
        kids = _children()
        for pid in kids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if not kids:
            select.select([], [], [], 0.001)


def _supervise(conn, req):
    """In the supervisor: returns only in the worker, with the request to run."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    if _prctl is not None:
        _prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: escaped grandchildren stay ours
        _prctl(1, 0, 0, 0, 0)  # no parent-death signal: the zygote may be replaced while we run
    term = []
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGTERM, lambda *a: term.append(1))
    signal.signal(signal.SIGCHLD, lambda *a: None)
    conn.sendall(os.getpid().to_bytes(4, 'little'))
    worker = os.fork()
    if worker == 0:
        signal.set_wakeup_fd(-1)
        os.close(wake_r)
        os.close(wake_w)
        return req
    for fd in req[0]:
        os.close(fd)
    status = 125
    while True:
        if term:
            _kill_tree(worker)
            status = 128 + signal.SIGKILL
            break
        pid, st = os.waitpid(worker, os.WNOHANG)
        if pid == worker:
            status = os.WEXITSTATUS(st) if os.WIFEXITED(st) else 128 + os.WTERMSIG(st)
            break
        try:
            ready, _, _ = select.select([conn, wake_r], [], [], 5.0)
        except InterruptedError:
            continue
        if wake_r in ready:
            os.read(wake_r, 512)
        if conn in ready and not conn.recv(16):
            term.append(1)  # the helper is gone (killed): nobody waits for this run any more
    try:
        conn.sendall(status.to_bytes(4, 'little', signed=True))
    finally:
        os._exit(0)


def _work(conn, req):
    fds, cwd, argv, env = req
    conn.close()
    os.setsid()
    for i in range(3):
        os.dup2(fds[i], i)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    try:
        with open('/proc/self/oom_score_adj', 'w') as f:
            f.write('500')
    except OSError:
        pass
    if env.get('PYTHONUNBUFFERED'):
        import io
        sys.stdout = io.TextIOWrapper(open(1, 'wb', buffering=0, closefd=False), encoding=sys.stdout.encoding, errors=sys.stdout.errors, write_through=True)
        sys.stderr = io.TextIOWrapper(open(2, 'wb', buffering=0, closefd=False), encoding=sys.stderr.encoding, errors='backslashreplace', write_through=True)
    # argv as the helper got it: python3 sbx_run.py OUT_DIR (-c CODE | -f FILE)
    return _boot['run_main'](argv[2:])


def _quick_exit(code):
    """What interpreter shutdown does that a program can notice, without tearing down every module
    the zygote had loaded (that alone costs ~6 ms): non-daemon threads are joined, atexit handlers
    run, the objects of __main__ are released (so files left open there are flushed), stdio is
    flushed. Objects kept only in other modules' globals are not finalized."""
    try:
        threading = sys.modules.get('threading')
        if threading is not None:
            threading._shutdown()
    except BaseException:
        pass
    try:
        import atexit
        atexit._run_exitfuncs()
    except BaseException:
        pass
    try:
        sys.modules['__main__'].__dict__.clear()
        import gc
        gc.collect()
    except BaseException:
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    os._exit(code)


def _main():
    conn, req = _serve()
    req = _supervise(conn, req)
    code = _work(conn, req)
    _quick_exit(code if isinstance(code, int) else 1)


if __name__ == '__main__':
    sys.exit(_main())
