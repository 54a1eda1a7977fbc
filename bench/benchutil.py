# SPDX-License-Identifier: MIT
"""Helpers shared by the Python benchmarks (python_aio.py,
torch_offload.py): sizes, the machine's load, the filesystem under a
folder, medians and spreads, a command's output (run), a line plot as
SVG (svg_lines)."""
import os
import statistics
import subprocess


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    s = s.strip().upper()
    if s and s[-1] in mult:
        return int(s[:-1]) * mult[s[-1]]
    return int(s)


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def fs_type(folder):
    """The filesystem type of the mount holding @folder."""
    path, best, kind = os.path.realpath(folder), "", "?"
    with open("/proc/mounts") as f:
        for line in f:
            mnt, typ = line.split()[1:3]
            inside = path == mnt or path.startswith(mnt.rstrip("/") + "/")
            if inside and len(mnt) >= len(best):
                best, kind = mnt, typ
    return kind


def med(v):
    return statistics.median(v)


def spread(xs, fmt="{:.2f}"):
    """'median [min-max]' of xs, each by fmt; '-' where there are none
    (or a run had none: a None among them)."""
    if not xs or None in xs:
        return "-"
    return (f"{fmt.format(statistics.median(xs))} [{fmt.format(min(xs))}"
            f"-{fmt.format(max(xs))}]")


def run(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}):\n"
                           f"{out.stdout[-2000:]}{out.stderr[-2000:]}")
    return out.stdout


def svg_lines(path, title, xlabel, ylabel, series, logx=False):
    """A line plot as an SVG file (no plotting library needed): series
    maps a name to [(x, y)], each drawn with its points marked and
    named in a legend; axes from 0 (x from its least with logx), five
    ticks each."""
    import math
    W, H, L, R, T, B = 640, 400, 70, 170, 40, 50
    pts = [p for s in series.values() for p in s]
    fx = (lambda x: math.log2(x)) if logx else (lambda x: x)
    x0 = min(fx(x) for x, _ in pts) if logx else 0.0
    x1 = max(fx(x) for x, _ in pts)
    y1 = max(y for _, y in pts) * 1.1 or 1.0
    x1 = x1 if x1 > x0 else x0 + 1

    def px(x):
        return L + (fx(x) - x0) / (x1 - x0) * (W - L - R)

    def py(y):
        return H - B - y / y1 * (H - T - B)

    colors = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
              "#8c564b"]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" '
           f'height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="20" text-anchor="middle" '
           f'font-size="14">{title}</text>',
           f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" '
           'stroke="black"/>',
           f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H - B}" '
           'stroke="black"/>',
           f'<text x="{(L + W - R) / 2}" y="{H - 12}" '
           f'text-anchor="middle">{xlabel}</text>',
           f'<text x="16" y="{(T + H - B) / 2}" text-anchor="middle" '
           f'transform="rotate(-90 16 {(T + H - B) / 2})">{ylabel}</text>']
    xs = sorted({x for x, _ in pts})
    for x in xs:
        out.append(f'<text x="{px(x):.1f}" y="{H - B + 16}" '
                   f'text-anchor="middle">{x:g}</text>')
    for k in range(6):
        y = y1 * k / 5
        out.append(f'<line x1="{L - 4}" y1="{py(y):.1f}" x2="{W - R}" '
                   f'y2="{py(y):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{L - 8}" y="{py(y) + 4:.1f}" '
                   f'text-anchor="end">{y:.0f}</text>')
    for n, (name, s) in enumerate(series.items()):
        c = colors[n % len(colors)]
        s = sorted(s)
        line = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in s)
        out.append(f'<polyline points="{line}" fill="none" stroke="{c}" '
                   'stroke-width="2"/>')
        for x, y in s:
            out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" '
                       f'fill="{c}"/>')
        ly = T + 10 + 18 * n
        out.append(f'<line x1="{W - R + 10}" y1="{ly}" x2="{W - R + 30}" '
                   f'y2="{ly}" stroke="{c}" stroke-width="2"/>')
        out.append(f'<text x="{W - R + 35}" y="{ly + 4}">{name}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
