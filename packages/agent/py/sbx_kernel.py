# A persistent Python for the sandboxd agent (a "kernel" of one code context): cells run one after
# another in one __main__, so variables, imports, functions and the working directory live on
# between executions. Rich output is captured the way sbx_run.py does it for a one-off run.
#
# usage: python3 sbx_kernel.py   (started by the agent with fd 3 a socket to it)
#
# fd 3 carries JSON lines. The agent sends one per cell:
#   {"cell": NONCE, "code": SOURCE, "out_dir": DIR, "cwd": DIR|null, "env": {...}, "stdin": B64|null}
# and the kernel answers, after the cell: {"cell": NONCE, "exit_code": N, "interrupted": BOOL}.
# Before answering it writes the end marker "\0sbx-end:NONCE\0" to fd 1 and fd 2, so that the agent
# knows where the cell's output ends on each stream. SIGINT interrupts a running cell
# (KeyboardInterrupt) and is ignored between cells.
import os
import sys
import json
import signal
# Imported now, before the cells' directory is first on sys.path: a linecache.py or traceback.py
# of the user's must not replace the kernel's own.
import linecache
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sbx_run  # noqa: E402

_HERE = os.path.abspath(__file__)
_in_cell = [False]
_applied_env = {}


def _on_sigint(signum, frame):
    if _in_cell[0]:
        raise KeyboardInterrupt


def _apply_env(env):
    """The sandbox's env for this cell: what changed since the last cell is set, what went away is
    removed. Variables the code set itself are left alone unless the sandbox's env names them."""
    for k in list(_applied_env):
        if k not in env and os.environ.get(k) == _applied_env[k]:
            os.environ.pop(k, None)
    _applied_env.clear()
    for k, v in env.items():
        try:
            if os.environ.get(k) != v:
                os.environ[k] = v
            _applied_env[k] = v
        except Exception as e:  # a value the OS cannot hold (a lone surrogate, say)
            sys.stderr.write('[sandboxd] %s not set: %s\n' % (k, e))


def _print_exception(e, filename):
    tb = e.__traceback__
    # Drop this kernel's own frames so the traceback starts in the user's code.
    while tb is not None and tb.tb_frame.f_code.co_filename in (_HERE, sbx_run.__file__):
        tb = tb.tb_next
    traceback.print_exception(type(e), e, tb)


def _run_cell(ns, n, code):
    filename = '<cell-%d>' % n
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    try:
        value = sbx_run.exec_source(code, filename, ns)
        if value is not None:
            ns['_'] = value
            sbx_run._capture_value(value)
        return 0, False
    except SystemExit as e:
        return sbx_run._exit_code(e), False
    except KeyboardInterrupt as e:
        _print_exception(e, filename)
        return 130, True
    except BaseException as e:
        _print_exception(e, filename)
        return 1, False


def main():
    import socket
    import base64
    import io
    ctl = socket.socket(fileno=3)
    os.set_inheritable(3, False)
    reader = ctl.makefile('rb')
    signal.signal(signal.SIGINT, _on_sigint)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(write_through=True, line_buffering=True)
        except Exception:
            pass
    if 'MPLBACKEND' not in os.environ:
        os.environ['MPLBACKEND'] = 'Agg'
    sys.meta_path.insert(0, sbx_run._PyplotHook())
    sbx_run._install_display()
    sys.argv = ['']
    sys.path[0] = ''
    main_mod = type(sys)('__main__')
    main_mod.__builtins__ = sys.modules['builtins']
    sys.modules['__main__'] = main_mod
    ns = main_mod.__dict__
    devnull = open(os.devnull, 'r')
    ctl.sendall(b'{"ready": true}\n')
    n = 0
    last_cwd = [os.getcwd()]
    kernel_pid = os.getpid()
    while True:
        line = reader.readline()
        if not line:
            return
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if not isinstance(msg, dict) or 'cell' not in msg:
            continue  # an interrupt that came after its cell ended
        n += 1
        nonce = str(msg['cell'])
        code, interrupted = 0, False
        try:
            code, interrupted = _one_cell(ns, n, msg, last_cwd, devnull, base64, io)
        except BaseException:  # a late interrupt, or an exception whose str() raises
            code, interrupted = 1, True
        if os.getpid() != kernel_pid:
            # A child the cell forked came back here: it is not the kernel.
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            except BaseException:
                pass
            os._exit(code)
        _end_cell(ctl, nonce, code, interrupted)


def _one_cell(ns, n, msg, last_cwd, devnull, base64, io):
    sbx_run._out_dir = msg.get('out_dir') or ''
    sbx_run._seq[0] = 0
    _apply_env(msg.get('env') or {})
    code, interrupted = 0, False
    try:
        # The directory asked for, when it differs from the one asked for last: a client that
        # names the same directory with every call (the official one does) keeps the directory
        # a cell changed to, as a notebook does.
        if msg.get('cwd') and msg['cwd'] != last_cwd[0]:
            os.chdir(msg['cwd'])
            last_cwd[0] = msg['cwd']
    except OSError as e:
        sys.stderr.write('%s\n' % (e,))
        code = 1
    stdin = msg.get('stdin')
    sys.stdin = io.TextIOWrapper(io.BytesIO(base64.b64decode(stdin))) if stdin else devnull
    if code == 0:
        _in_cell[0] = True
        try:
            code, interrupted = _run_cell(ns, n, str(msg.get('code', '')))
        except KeyboardInterrupt:  # between the cell's end and the flag
            interrupted = True
        finally:
            _in_cell[0] = False
    try:
        sbx_run._save_open_figures(True)
    except BaseException:
        pass
    return code, interrupted


def _end_cell(ctl, nonce, code, interrupted):
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except BaseException:
            pass
    marker = b'\0sbx-end:' + nonce.encode() + b'\0'
    for fd in (1, 2):
        try:
            os.write(fd, marker)
        except OSError:
            pass
    ctl.sendall(json.dumps({'cell': nonce, 'exit_code': code, 'interrupted': interrupted}).encode() + b'\n')

if __name__ == '__main__':
    main()
