# Runs one Python execution for the sandboxd agent, like `python3 -c CODE`, plus rich-output capture:
# matplotlib figures (every plt.show() and every figure still open at the end) become PNG files
# with their chart data (sbx_charts.py), and the value of a last-line expression becomes result.txt
# (and HTML/SVG/... when the object has a _repr_*_ method, e.g. a pandas DataFrame). Everything
# goes into OUT_DIR, created on first use.
#
# usage: python3 sbx_run.py OUT_DIR (-c CODE | -f FILE)
# (or run_main([OUT_DIR, ...]) in a process forked from sbx_zygote.py).
# Kept free of imports beyond what the interpreter has loaded already: it runs on every execution.
import sys
import os

_out_dir = ''
_seq = [0]


def _out_path(kind, ext):
    os.makedirs(_out_dir, exist_ok=True)
    _seq[0] += 1
    return os.path.join(_out_dir, '%03d-%s.%s' % (_seq[0], kind, ext))


_here = os.path.dirname(os.path.abspath(__file__))
_charts = []


def _chart_module():
    """sbx_charts.py beside this file, loaded on the first figure (only matplotlib users pay),
    kept out of sys.modules and sys.path so that no module of the user's can shadow it."""
    if not _charts:
        path = os.path.join(_here, 'sbx_charts.py')
        mod = type(sys)('sbx_charts')
        mod.__file__ = path
        with open(path, 'rb') as f:
            exec(compile(f.read(), path, 'exec'), mod.__dict__)
        _charts.append(mod)
    return _charts[0]


def _save_figure(fig):
    """The figure as NNN-figure.png and, when its data can be read, its chart (E2B's `chart`
    field) as NNN-figure.chart: same number, so the two make one result."""
    path = _out_path('figure', 'png')
    try:
        fig.savefig(path, format='png', bbox_inches='tight')
    except Exception as e:  # a broken figure must not hide the user's own output
        sys.stderr.write('[sandboxd] could not save figure: %r\n' % (e,))
        return
    try:
        chart = _chart_module().chart_of(fig)  # after savefig: tick labels exist once drawn
        if chart is not None:
            import json
            text = json.dumps(chart, allow_nan=False, separators=(',', ':'))
            with open(path[:-len('png')] + 'chart', 'w') as f:
                f.write(text)
    except Exception:
        pass  # no chart, the PNG still comes


def _save_open_figures(close):
    plt = sys.modules.get('matplotlib.pyplot')
    if plt is None:
        return
    try:
        nums = plt.get_fignums()
    except Exception:
        return
    for num in nums:
        _save_figure(plt.figure(num))
    if close and nums:
        plt.close('all')


def _patch_pyplot(plt):
    def show(*args, **kwargs):
        _save_open_figures(True)
    show.__doc__ = plt.show.__doc__
    plt.show = show
    figure_mod = sys.modules.get('matplotlib.figure')
    if figure_mod is not None:
        figure_mod.Figure.show = lambda self, *a, **k: _save_figure(self)


class _PyplotHook:
    """Patches matplotlib.pyplot.show as soon as anything imports pyplot."""

    def find_spec(self, name, path, target=None):
        if name != 'matplotlib.pyplot':
            return None
        from importlib.machinery import PathFinder
        spec = PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, 'exec_module'):
            return spec
        loader_exec = spec.loader.exec_module

        def exec_module(module):
            loader_exec(module)
            _patch_pyplot(module)
        spec.loader.exec_module = exec_module
        return spec


def _write(kind, ext, text, mode='w'):
    with open(_out_path(kind, ext), mode) as f:
        f.write(text)


def _save_rich(value, kind='output'):
    """Writes the rich forms of `value` (a figure, or what its _repr_*_ methods give) as output
    files, numbered in the order they come; whether there was any. `kind` names them: 'main' for
    the last expression's value (E2B's code interpreter makes them its main result)."""
    figure_mod = sys.modules.get('matplotlib.figure')
    if figure_mod is not None and isinstance(value, figure_mod.Figure):
        _save_figure(value)
        return True
    if isinstance(value, type):
        return False
    wrote = False
    for meth, ext in (('_repr_html_', 'html'), ('_repr_svg_', 'svg'),
                      ('_repr_markdown_', 'md'), ('_repr_json_', 'json')):
        fn = getattr(value, meth, None)
        data = fn() if callable(fn) else None
        if isinstance(data, tuple):
            data = data[0]
        if data is None:
            continue
        if ext == 'json':
            import json
            data = json.dumps(data)
        _write(kind, ext, data)
        wrote = True
        break
    fn = getattr(value, '_repr_png_', None)
    data = fn() if callable(fn) else None
    if isinstance(data, (bytes, bytearray)):
        _write(kind, 'png', data, 'wb')
        wrote = True
    return wrote


def _capture_value(value):
    """What a notebook would display for the last expression."""
    try:
        figure_mod = sys.modules.get('matplotlib.figure')
        if figure_mod is not None and isinstance(value, figure_mod.Figure):
            return  # saved with the other open figures at exit
        _save_rich(value, 'main')
        text = repr(value)
        if len(text) > 1048576:
            text = text[:1048576] + '...'
        os.makedirs(_out_dir, exist_ok=True)
        with open(os.path.join(_out_dir, 'result.txt'), 'w') as f:
            f.write(text)
    except Exception as e:
        sys.stderr.write('[sandboxd] could not capture the result: %r\n' % (e,))


def display(*objs, **kwargs):
    """IPython's display() where IPython is not running: each object's rich form (HTML, SVG,
    Markdown, JSON, PNG, a figure) becomes an output, in order; an object without one is printed."""
    for obj in objs:
        try:
            shown = _save_rich(obj)
        except Exception as e:
            sys.stderr.write('[sandboxd] could not display %s: %r\n' % (type(obj).__name__, e))
            shown = False
        if not shown:
            print(repr(obj))


def _install_display():
    import builtins
    if not hasattr(builtins, 'display'):
        builtins.display = display


_STATEMENT_STARTS = ('print(', 'import ', 'from ', 'def ', 'class ', 'return', 'pass', 'if ', 'for ', 'while ',
                     'with ', 'try:', 'except', 'else', 'elif ', 'finally', 'raise', 'assert ', 'del ', 'global ',
                     'nonlocal ', 'break', 'continue', '@', 'async ', '#')


def _may_end_with_expression(source):
    """Cheap pre-check: building an AST costs ~0.5 ms, so skip it when the last line is surely not
    an expression whose value is worth showing (the common `print(...)` case included)."""
    if isinstance(source, bytes):
        return True
    end = len(source)
    while True:
        start = source.rfind('\n', 0, end) + 1
        line = source[start:end]
        if line.strip() or start == 0:
            break
        end = start - 1
    if not line.strip() or line[0] in ' \t':
        return False
    return not line.startswith(_STATEMENT_STARTS)


def _print_exception(e, filename, source):
    import traceback
    if isinstance(source, str):
        import linecache
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    tb = e.__traceback__
    # Drop this bootstrap's own frames so the traceback looks like `python3 -c`.
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    traceback.print_exception(type(e), e, tb)


def _exit_code(e):
    code = e.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    sys.stderr.write(str(code) + '\n')
    return 1


def exec_source(source, filename, ns):
    """Runs `source` in the namespace `ns` as `python3 -c` would, and returns the value of a
    last-line expression (None when there is none). Exceptions are the caller's."""
    if not _may_end_with_expression(source):
        exec(compile(source, filename, 'exec', dont_inherit=True), ns)
        return None
    import _ast
    tree = compile(source, filename, 'exec', _ast.PyCF_ONLY_AST, dont_inherit=True)
    last = None
    if tree.body and isinstance(tree.body[-1], _ast.Expr):
        last = _ast.Expression(tree.body.pop().value)
    exec(compile(tree, filename, 'exec', dont_inherit=True), ns)
    if last is None:
        return None
    return eval(compile(last, filename, 'eval', dont_inherit=True), ns)


def run_main(args):
    global _out_dir
    _out_dir = args[0]
    if args[1] == '-f':
        filename = args[2]
        with open(filename, 'rb') as f:
            source = f.read()
    else:
        filename = '<string>'
        source = args[2]
    sys.argv = ['-c']
    sys.path[0] = ''
    if 'MPLBACKEND' not in os.environ:
        os.environ['MPLBACKEND'] = 'Agg'
    sys.meta_path.insert(0, _PyplotHook())
    _install_display()

    main = type(sys)('__main__')
    main.__builtins__ = sys.modules['builtins']
    sys.modules['__main__'] = main
    ns = main.__dict__
    code = 0
    try:
        value = exec_source(source, filename, ns)
        if value is not None:
            _capture_value(value)
    except SystemExit as e:
        code = _exit_code(e)
    except BaseException as e:
        _print_exception(e, filename, source)
        code = 1
    try:
        _save_open_figures(False)
    except BaseException:
        pass
    try:
        sys.stdout.flush()
    except BaseException:
        pass
    return code


if __name__ == '__main__':
    sys.exit(run_main(sys.argv[1:]))
