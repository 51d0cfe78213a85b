# Structured data of a matplotlib figure, in the shape of E2B's code-interpreter `chart` field:
# chart_of(figure) -> dict or None. Loaded by sbx_run.py only when a figure is saved (so only
# matplotlib users pay for it), after the figure was drawn (tick labels exist only then).
#
# Each Axes is classified by the artists on it (texts, legends and axhline/axvline-style
# reference lines aside): Line2D only -> line; PathCollection only -> scatter; Rectangles of bar
# containers -> bar; Wedges -> pie; the boxes, whiskers, medians and fliers of boxplot() ->
# box_and_whisker; anything else -> unknown (title, no elements). A figure with several Axes is a
# superchart of one chart per Axes. Values are plain floats and strings (dates as ISO strings);
# NaN and infinities are left out. Never raises: a failure is None (the PNG still comes).
import math

MAX_POINTS = 10000  # per figure, over all its series (longer series are evenly thinned)
MAX_ELEMENTS = 10000  # bars, wedges, boxes per chart
MAX_TICKS = 1000


def chart_of(figure):
    try:
        return _figure(figure)
    except Exception:
        return None


def _figure(figure):
    axes = [ax for ax in figure.get_axes() if ax.get_visible()]
    if not axes or not any(ax.has_data() for ax in axes):
        return None
    budget = [MAX_POINTS]
    if len(axes) == 1:
        return _axes(axes[0], budget)
    sup = getattr(figure, '_suptitle', None)
    title = sup.get_text() if sup is not None else ''
    return {'type': 'superchart', 'title': title or None,
            'elements': [_axes(ax, budget) for ax in axes]}


# ---- values ----

def _num(v):
    """A finite float, or None."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _round(v):
    """Derived values (angles, box statistics) without float noise: 8 significant digits."""
    f = _num(v)
    if f is None or f == 0:
        return f
    return round(f, 7 - int(math.floor(math.log10(abs(f)))))


def _text(v):
    return v if isinstance(v, str) else str(v)


def _axis_kind(axis):
    """'datetime', 'categorical' or None, from the unit converter matplotlib chose for the data."""
    get = getattr(axis, 'get_converter', None)
    conv = get() if callable(get) else getattr(axis, 'converter', None)
    mod = type(conv).__module__ if conv is not None else ''
    if mod == 'matplotlib.dates':
        return 'datetime'
    if mod == 'matplotlib.category':
        return 'categorical'
    return None


def _iso_of_number(x):
    from matplotlib import dates
    return dates.num2date(x).isoformat()


def _value(v, kind, categories):
    """One coordinate as the chart gives it: ISO string for dates, the category for categorical
    axes, else a finite float; None when it is none of these (NaN, inf, junk)."""
    if isinstance(v, str):
        return v
    iso = getattr(v, 'isoformat', None)
    if callable(iso) and not isinstance(v, (int, float)):
        return iso()  # datetime, date, pandas Timestamp
    dtype = getattr(v, 'dtype', None)
    if dtype is not None and getattr(dtype, 'kind', '') == 'M':
        s = str(v.astype('datetime64[s]'))
        return None if s == 'NaT' else s
    if dtype is not None and getattr(dtype, 'kind', '') in 'US':
        return str(v)
    f = _num(v)
    if f is None:
        return None
    if kind == 'datetime':
        return _iso_of_number(f)
    if kind == 'categorical' and categories is not None and f.is_integer():
        return categories.get(int(f), f)
    return f


def _categories(axis):
    mapping = getattr(getattr(axis, 'units', None), '_mapping', None)
    if not isinstance(mapping, dict):
        return None
    return {int(i): _text(k) for k, i in mapping.items()}


# ---- common fields ----

def _title(ax):
    for loc in ('center', 'left', 'right'):
        t = ax.get_title(loc=loc)
        if t:
            return t
    return None


def _unit(label):
    """What the label gives in its last (...) or [...]: 'Speed (m/s)' -> 'm/s'."""
    if not label:
        return None
    for close, open_ in ((')', '('), (']', '[')):
        end = label.rfind(close)
        start = label.rfind(open_, 0, end) if end > 0 else -1
        if start >= 0 and end > start + 1:
            return label[start + 1:end].strip() or None
    return None


def _labels_2d(ax, swap=False):
    x, y = ax.get_xlabel() or None, ax.get_ylabel() or None
    if swap:
        x, y = y, x
    return {'x_label': x, 'y_label': y, 'x_unit': _unit(x), 'y_unit': _unit(y)}


def _ticks(ax, axis, which):
    kind = _axis_kind(axis)
    locs = list(axis.get_ticklocs())[:MAX_TICKS]
    if kind == 'datetime':
        ticks = [_iso_of_number(t) for t in locs if _num(t) is not None]
    else:
        ticks = [f for f in (_num(t) for t in locs) if f is not None]
    labels = [t.get_text() for t in axis.get_ticklabels()][:MAX_TICKS]
    if kind is None:
        get_scale = ax.get_xscale if which == 'x' else ax.get_yscale
        scale = get_scale()
    else:
        scale = kind
    return {which + '_ticks': ticks, which + '_tick_labels': labels, which + '_scale': scale}


def _tick_label_at(axis, lo, hi):
    """The label of the tick nearest the middle of [lo, hi] (a bar or a box) among those in that
    range, '' when no tick is there."""
    try:
        locs = list(axis.get_ticklocs())
        labels = axis.get_ticklabels()
    except Exception:
        return ''
    lo, hi = min(lo, hi), max(lo, hi)
    mid, eps = (lo + hi) / 2.0, 1e-9 * max(1.0, abs(lo), abs(hi))
    best = None
    for loc, label in zip(locs, labels):
        d = abs(float(loc) - mid)
        if lo - eps <= float(loc) <= hi + eps and (best is None or d < best[0]):
            best = (d, label.get_text())
    return best[1] if best else ''


# ---- classification ----

def _flatten(x, out):
    if x is None:
        return out
    if isinstance(x, (list, tuple)):
        for y in x:
            _flatten(y, out)
    else:
        out.append(x)
    return out


def _decorations(ax):
    """Artists that belong to a data series without being one: error bars (their caps and bar
    lines, not the errorbar's data line) and the error bars of bar containers."""
    from matplotlib.container import BarContainer, ErrorbarContainer
    skip, names = set(), {}
    for c in ax.containers:
        if isinstance(c, ErrorbarContainer):
            lines = getattr(c, 'lines', None) or ()
            for a in _flatten(list(lines[1:]), []):
                skip.add(id(a))
            if lines and lines[0] is not None:
                names[id(lines[0])] = c.get_label()
        elif isinstance(c, BarContainer) and getattr(c, 'errorbar', None) is not None:
            for a in _flatten(list(c.errorbar.lines), []):
                skip.add(id(a))
    return skip, names


def _is_reference_line(ax, line):
    """axhline/axvline and the like: drawn partly in axes coordinates, not data."""
    try:
        return line.get_transform().contains_branch(ax.transData) is False
    except Exception:
        return False


def _axes(ax, budget):
    from matplotlib.collections import PathCollection
    from matplotlib.lines import Line2D
    from matplotlib.patches import Wedge, Rectangle
    title = _title(ax)
    skip, names = _decorations(ax)
    lines = [ln for ln in ax.lines if id(ln) not in skip and not _is_reference_line(ax, ln)]
    collections = [c for c in ax.collections if id(c) not in skip]
    patches = [p for p in ax.patches if id(p) not in skip]
    if ax.images or getattr(ax, 'tables', None):
        return _unknown(title)
    if patches and not lines and not collections and all(isinstance(p, Wedge) for p in patches):
        return _pie(ax, title, patches)
    box = _boxplot(ax, title, lines, patches) if not collections else None
    if box is not None:
        return box
    bars = [c for c in ax.containers if type(c).__name__ == 'BarContainer']
    if bars and not lines and not collections and all(isinstance(p, Rectangle) for p in patches):
        return _bar(ax, title, bars)
    if lines and not collections and not patches and all(isinstance(ln, Line2D) for ln in lines):
        return _points(ax, title, 'line', [(_series_label(names.get(id(ln), ln.get_label()), 'Line', '_child'), ln.get_xdata(), ln.get_ydata()) for ln in lines], budget)
    if collections and not lines and not patches and all(isinstance(c, PathCollection) for c in collections):
        series = []
        for c in collections:
            offsets = c.get_offsets()
            series.append((_series_label(c.get_label(), 'Scatter', '_child'), [p[0] for p in offsets], [p[1] for p in offsets]))
        return _points(ax, title, 'scatter', series, budget, converted=True)
    return _unknown(title)


def _unknown(title):
    return {'type': 'unknown', 'title': title, 'elements': []}


def _series_label(label, word, auto_prefix):
    label = _text(label)
    if label.startswith(auto_prefix) and label[len(auto_prefix):].isdigit():
        return '%s %s' % (word, label[len(auto_prefix):])
    return label


# ---- line and scatter ----

def _points(ax, title, kind, series, budget, converted=False):
    """`converted`: the coordinates are matplotlib's numbers already (scatter offsets), so
    categories and dates are mapped back from them."""
    xkind, ykind = _axis_kind(ax.xaxis), _axis_kind(ax.yaxis)
    xcat = _categories(ax.xaxis) if xkind == 'categorical' else None
    ycat = _categories(ax.yaxis) if ykind == 'categorical' else None
    if not converted:
        # Line data are the values given (strings, dates); numbers on a date axis are date numbers.
        xcat = ycat = None
    total = sum(min(len(xs), len(ys)) for _, xs, ys in series)
    step = 1
    if total > budget[0]:
        step = -(-total // max(1, budget[0]))
    elements = []
    for label, xs, ys in series:
        n = min(len(xs), len(ys))
        pts = []
        for i in range(0, n, step):
            x = _value(xs[i], xkind, xcat)
            y = _value(ys[i], ykind, ycat)
            if x is None or y is None:
                continue
            pts.append([x, y])
        budget[0] -= len(pts)
        elements.append({'label': label, 'points': pts})
    chart = {'type': kind, 'title': title}
    chart.update(_labels_2d(ax))
    chart.update(_ticks(ax, ax.xaxis, 'x'))
    chart.update(_ticks(ax, ax.yaxis, 'y'))
    chart['elements'] = elements
    return chart


# ---- bar ----

def _bar(ax, title, containers):
    horizontal = False
    elements = []
    for gi, c in enumerate(containers):
        group = _series_label(c.get_label(), 'Group', '_container')
        orientation = getattr(c, 'orientation', None)
        rects = list(c.patches)
        if orientation is None:  # older matplotlib: equal heights and varying widths -> barh
            hs = [r.get_height() for r in rects]
            ws = [r.get_width() for r in rects]
            orientation = 'horizontal' if len(set(hs)) == 1 and len(set(ws)) > 1 else 'vertical'
        horizontal = orientation == 'horizontal'
        axis = ax.yaxis if horizontal else ax.xaxis
        for r in rects:
            if len(elements) >= MAX_ELEMENTS:
                break
            if horizontal:
                lo, size, value = r.get_y(), r.get_height(), r.get_width()
            else:
                lo, size, value = r.get_x(), r.get_width(), r.get_height()
            value = _num(value)
            if value is None or _num(lo) is None or _num(size) is None:
                continue
            label = _tick_label_at(axis, lo, lo + size) or _text(_round(lo + size / 2.0))
            elements.append({'label': label, 'value': value, 'group': group})
    # The category axis is x_label, the value axis y_label, whichever way the bars run.
    chart = {'type': 'bar', 'title': title}
    chart.update(_labels_2d(ax, swap=horizontal))
    chart['elements'] = elements
    return chart


# ---- pie ----

def _pie(ax, title, wedges):
    elements = []
    for w in wedges[:MAX_ELEMENTS]:
        angle = _round(abs(float(w.theta2) - float(w.theta1)))
        radius = _num(w.r)
        if angle is None or radius is None:
            continue
        label = _text(w.get_label())
        elements.append({'label': '' if label.startswith('_') else label, 'angle': angle, 'radius': radius})
    return {'type': 'pie', 'title': title, 'elements': elements}


# ---- box and whisker ----

def _rect_of(xs, ys):
    """(x0, x1, y0, y1) when the polyline (xs, ys) is a closed axis-aligned rectangle, else None."""
    if len(xs) != 5 or len(ys) != 5 or xs[0] != xs[4] or ys[0] != ys[4]:
        return None
    if len(set(xs)) != 2 or len(set(ys)) != 2:
        return None
    for i in range(4):  # each side moves along one axis only
        if (xs[i] != xs[i + 1]) == (ys[i] != ys[i + 1]):
            return None
    return (min(xs), max(xs), min(ys), max(ys))


def _floats(seq):
    out = []
    for v in seq:
        f = _num(v)
        if f is None:
            return None
        out.append(f)
    return out


def _boxplot(ax, title, lines, patches):
    """boxplot()'s artists: boxes (5-point rectangles, as lines or PathPatches), 2-point
    whiskers/caps/medians and marker-only fliers/means. None when the Axes has anything else."""
    from matplotlib.patches import PathPatch
    boxes = []
    for p in patches:
        if not isinstance(p, PathPatch):
            return None
        path = p.get_path()
        v = [tuple(xy) for xy, code in zip(path.vertices, path.codes if path.codes is not None else [1] * len(path.vertices))
             if code != path.CLOSEPOLY]
        if len(v) == 4:
            v.append(v[0])
        xs, ys = _floats([xy[0] for xy in v]), _floats([xy[1] for xy in v])
        rect = _rect_of(xs, ys) if xs is not None and ys is not None else None
        if rect is None:
            return None
        boxes.append(rect)
    segments, markers = [], []
    for ln in lines:
        solid = ln.get_linestyle() not in ('None', '', ' ', 'none')
        if solid and len(ln.get_xdata()) > 5:
            return None  # a data line, not a box's part
        xs, ys = _floats(ln.get_xdata()), _floats(ln.get_ydata())
        if xs is None or ys is None:
            return None
        rect = _rect_of(xs, ys)
        if rect is not None:
            boxes.append(rect)
        elif len(xs) == 2 and len(ys) == 2 and (xs[0] == xs[1] or ys[0] == ys[1]):
            segments.append((xs, ys))
        elif not solid:
            markers.append((xs, ys))
        else:
            return None
    if not boxes or not segments:
        return None
    vertical = _box_orientation(boxes, segments)
    elements = []
    for b in boxes[:MAX_ELEMENTS]:
        e = _box_stats(b, segments, markers, vertical)
        if e is None:
            return None
        pos_axis = ax.xaxis if vertical else ax.yaxis
        lo, hi = (b[0], b[1]) if vertical else (b[2], b[3])
        e['label'] = _tick_label_at(pos_axis, lo, hi) or str(len(elements) + 1)
        elements.append(e)
    chart = {'type': 'box_and_whisker', 'title': title}
    chart.update(_labels_2d(ax, swap=not vertical))
    chart['elements'] = [{k: e[k] for k in ('label', 'min', 'first_quartile', 'median', 'third_quartile', 'max', 'outliers')} for e in elements]
    return chart


def _box_orientation(boxes, segments):
    """Vertical boxes have their whiskers as vertical segments that start at a box's bottom or top
    edge, within its x range; horizontal ones, horizontal segments from a left or right edge."""
    def score(vertical):
        n = 0
        for b in boxes:
            plo, phi, vlo, vhi = (b[0], b[1], b[2], b[3]) if vertical else (b[2], b[3], b[0], b[1])
            for xs, ys in segments:
                pos, val = (xs, ys) if vertical else (ys, xs)
                if pos[0] == pos[1] and plo <= pos[0] <= phi and (min(val) == vhi or max(val) == vlo):
                    n += 1
        return n
    return score(True) >= score(False)


def _box_stats(b, segments, markers, vertical):
    plo, phi, vlo, vhi = (b[0], b[1], b[2], b[3]) if vertical else (b[2], b[3], b[0], b[1])
    median, low, high = None, vlo, vhi
    for xs, ys in segments:
        pos, val = (xs, ys) if vertical else (ys, xs)
        if val[0] == val[1] and plo <= min(pos) and max(pos) <= phi and vlo <= val[0] <= vhi:
            median = val[0]  # across the box
        elif pos[0] == pos[1] and plo <= pos[0] <= phi and val[0] != val[1]:
            a, z = min(val), max(val)
            if a == vhi or (z > vhi and a >= vhi):
                high = max(high, z)  # whisker above the box
            elif z == vlo or (a < vlo and z <= vlo):
                low = min(low, a)  # whisker below
    if median is None:
        return None
    outliers = []
    for xs, ys in markers:
        pos, val = (xs, ys) if vertical else (ys, xs)
        for p, v in zip(pos, val):
            if plo <= p <= phi and (v < low or v > high):
                outliers.append(_round(v))
    return {'min': _round(low), 'first_quartile': _round(vlo), 'median': _round(median),
            'third_quartile': _round(vhi), 'max': _round(high), 'outliers': outliers[:MAX_ELEMENTS]}
