#!/usr/bin/env python3
"""Turn one benchmark CSV (contender,metric,value,unit,note) into a markdown
report (one row per workload, absolute values, the best peer, and the ratios
ferry / best peer and ferry / copy baseline, >1 = ferry better) and a chart
(PNG with matplotlib when importable, else a hand-written SVG).

usage: report.py --csv F --contenders TSV --out PREFIX --mode quick|full --env TEXT --sizes TEXT
"""
import argparse
import csv
import math
import re

# metric id -> (label, higher_is_better), in report order.
METRICS = []
for _pat, _bs in (("seq", "1m"), ("seq", "4k"), ("rand", "4k"), ("rand", "1m")):
    for _state in ("cold", "warm"):
        for _j in (1, 8, 32):
            METRICS.append(("read_%s_%s_%s_%dj" % (_pat, _bs, _state, _j),
                            "%s read %s, %s, %d job%s [%s]" % (
                                _pat, "1 MiB" if _bs == "1m" else "4 KiB", _state, _j,
                                "" if _j == 1 else "s", "MiB/s" if _bs == "1m" else "IOPS"), True))
METRICS += [
    ("write_1m_return", "seq write, 1 MiB blocks (dd): return [s]", False),
    ("write_1m_durable", "seq write, 1 MiB blocks (dd): durable in the bucket [s]", False),
    ("write_4m_return", "seq write, 4 MiB blocks (dd): return [s]", False),
    ("write_4m_durable", "seq write, 4 MiB blocks (dd): durable in the bucket [s]", False),
    ("small_return", "small files: create/write/close (cp -r) return [s]", False),
    ("small_listed", "small files: all in the bucket [s]", False),
    ("small_list", "small files: ls -l of them [s]", False),
    ("small_readback", "small files: read back, cold [s]", False),
    ("scan_read", "small objects: find -exec cat of the tree, cold [s]", False),
    ("zarr_read", "Zarr-shaped read, chunks in key order, cold [s]", False),
    ("meta_lsr", "metadata: ls -lR of the key tree, cold [s]", False),
    ("meta_stat", "metadata: stat of names, cold [files/s]", True),
    ("cpu_per_gib_cold", "client CPU per GiB, cold seq read 1 MiB, 1 job [s/GiB]", False),
    ("task_wall", "task workload: wall [s]", False),
    ("task_eff", "task workload: compute / wall", True),
    ("task_pagecache", "task workload: page cache growth while reading / reference size [x]", False),
    ("task_wall_shared", "task workload, one mount for all tasks: wall [s]", False),
    ("task_eff_shared", "task workload, one mount for all tasks: compute / wall", True),
    ("task_wall_8t", "task workload, 8 tasks: wall [s]", False),
    ("task_eff_8t", "task workload, 8 tasks: compute / wall", True),
    ("task_pagecache_8t", "task workload, 8 tasks: page cache growth while reading / reference size [x]", False),
    ("task_wall_shared_8t", "task workload, 8 tasks, one mount for all tasks: wall [s]", False),
    ("task_eff_shared_8t", "task workload, 8 tasks, one mount for all tasks: compute / wall", True),
    ("stage_wall_off", "staged-input tasks, staging off: wall [s]", False),
    ("stage_wall_on", "staged-input tasks, staging on: wall [s]", False),
    ("stage_speedup", "staged-input tasks: wall off / wall on", True),
    ("stage_wasted", "staged-input tasks: staged, never read [MiB]", False),
]
PHASES = (("read", "read jobs"), ("write", "writes"), ("small", "small files"), ("scan", "small-object scans"),
          ("meta", "metadata"), ("task", "task workload"))
for _ph, _what in PHASES:
    METRICS.append(("rss_" + _ph, "peak RSS, %s [MiB]" % _what, False))
for _ph, _what in PHASES:
    METRICS.append(("cpu_" + _ph, "client CPU, %s [s]" % _what, False))
METRICS += [("rss_peak", "peak RSS, all workloads [MiB]", False),
            ("cpu_total", "client CPU, all workloads [s]", False)]
BASELINES = ("getfloor", "copy", "local", "compute-only")


def cell(row):
    """(number or None, lower_bound_flag, display text) of one CSV row."""
    v, note = row["value"], row["note"]
    if v == "timeout":
        m = re.search(r"(?:in|after) (\d+(?:\.\d+)?) s", note)
        lb = float(m.group(1)) if m else None
        return lb, True, "timeout (> %.0f s)" % lb if m else "timeout"
    try:
        x = float(v)
    except ValueError:
        return None, False, v or "?"
    return x, False, ("%.0f" % x if abs(x) >= 100 else "%.3g" % x if abs(x) < 10 else "%.1f" % x)


def better(a, b, hib):
    return a > b if hib else a < b


def ratio(f, p, hib):
    """ferry vs p as '>1 = ferry better' text; f and p are cells."""
    (fx, flb, _), (px, plb, _) = f, p
    if fx is None or px is None or fx == 0 or px == 0:
        return "n/a"
    r = fx / px if hib else px / fx
    if flb and plb:
        return "n/a (both timed out)"
    txt = "%.2f" % r if r >= 0.1 else "%.2g" % r
    return ("< " if flb else "> " if plb else "") + txt


# Metrics of the task workload, which run.sh may record once per run
# (TASK_RUNS): the report takes their median.
REPEATED = ("task_", "rss_task", "cpu_task")


def median_row(rows):
    """The row of the median value of rows (all numeric; with an even count
    the upper one), its note saying every run's value; rows with any value
    that is not a number (timeout, unsupported) leave the last row as it is."""
    try:
        vals = [float(r["value"]) for r in rows]
    except ValueError:
        return rows[-1]
    order = sorted(range(len(rows)), key=lambda i: vals[i])
    r = dict(rows[order[len(rows) // 2]])
    runs = " ".join(r2["value"] for r2 in rows)
    r["note"] = "median of %d runs (%s)%s" % (len(rows), runs, "; this run: " + r["note"] if r["note"] else "")
    return r


def load(path):
    rows = list(csv.DictReader(open(path)))
    data, order, many = {}, [], {}
    for r in rows:
        c = r["contender"]
        if c not in order:
            order.append(c)
        data.setdefault(c, {})[r["metric"]] = r
        if r["metric"].startswith(REPEATED):
            many.setdefault((c, r["metric"]), []).append(r)
    for (c, m), rs in many.items():
        if len(rs) > 1:
            data[c][m] = median_row(rs)
    return data, order


def report(a):
    data, order = load(a.csv)
    conts = [line.rstrip("\n").split("\t") for line in open(a.contenders) if line.strip()]
    installed = [c[0] for c in conts if c[1] != "not installed"]
    # contenders first, then the baselines in their usual order (getfloor runs first)
    installed = [c for c in installed if c not in BASELINES] + [b for b in BASELINES if b in installed]
    cols = [c for c in installed if c in data] + [c for c in ("compute-only",) if c in data]
    # ferry-nopt (passthrough off), ferry-nocold (cold passthrough off) and
    # ferry-stage are ferry, not peers.
    peers = [c for c in cols if not c.startswith("ferry") and c not in BASELINES]
    md = ["# ferry benchmark: %s mode" % a.mode, "", a.env + ".", "",
          "Sizes (scaled to the machine): " + a.sizes + ".", "",
          "One row per workload. `best peer` is the best FUSE client other than ferry "
          "(ferry-nopt is ferry with `--passthrough off`, ferry-nocold with `--cold-passthrough off`); "
          "ratios are ferry / best peer and ferry / baseline (getfloor: plain parallel ranged GETs; copy; local disk), oriented so that **> 1 means "
          "ferry is better** (for times and RSS: peer / ferry; for throughput: ferry / peer). "
          "`timeout` rows are lower bounds; `n/a` = does not apply; `unsupported` = the "
          "operation failed.", ""]
    missing = [c[0] for c in conts if c[1] == "not installed"]
    if missing:
        md += ["Not installed (not on PATH, so not measured): %s." % ", ".join(missing), ""]
    bad = {c: data[c]["valid"]["note"] for c in order if data[c].get("valid", {}).get("value") == "INVALID"}
    if bad:
        md += ["**INVALID runs: %s.** The machine swapped or a server exited or restarted while they "
               "ran (see \"Validity of each run\"); their figures are kept for the record, are not results, "
               "and are not used for the best peer or the ratios." % "; ".join(
                   "%s (%s)" % (c, why) for c, why in bad.items()), ""]
    invalid = {c: why for c, why in bad.items() if c in cols}
    peers = [c for c in peers if c not in invalid]
    head = {c: c + " (INVALID)" if c in invalid else c for c in cols}
    chart_at = len(md)
    md.append("| workload | better | " + " | ".join(head[c] for c in cols) + " | best peer | ferry / best peer | ferry / getfloor | ferry / copy | ferry / local |")
    md.append("|---|---|" + "---|" * len(cols) + "---|---|---|---|---|")
    chart = []
    for mid, label, hib in METRICS:
        if not any(mid in data.get(c, {}) for c in cols):
            continue
        cells = {c: cell(data[c][mid]) if mid in data.get(c, {}) else (None, False, "-") for c in cols}
        best = None
        for p in peers:
            x, lb, _ = cells[p]
            if x is None:
                continue
            if best is None or (cells[best][1] and not lb) or (
                    lb == cells[best][1] and better(x, cells[best][0], hib)):
                best = p
        def vs(other):
            if "ferry" not in cells or not other or other not in cells:
                return "n/a"
            if "ferry" in invalid or other in invalid:
                return "INVALID"
            return ratio(cells["ferry"], cells[other], hib)
        rf, rg, rc, rl = vs(best), vs("getfloor"), vs("copy"), vs("local")
        if mid.startswith("stage_") and "ferry-stage" in bad:
            label += " (INVALID run)"  # the staged-input tasks run on their own (run.sh)
        md.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
            label, "higher" if hib else "lower", " | ".join(cells[c][2] for c in cols),
            best or "n/a", rf, rg, rc, rl))
        chart.append((label, hib, {head[c]: cells[c][0] for c in cols if cells[c][0] is not None},
                      {head[c] for c in cols if cells[c][1]}))
    md += validity(data, order)
    md += ["", "## Contenders and mount options", "", "| contender | version | command |", "|---|---|---|"]
    for c in conts:
        md.append("| %s | %s | `%s` |" % (c[0], c[1], c[2] if len(c) > 2 and c[2] else "-"))
    notes = [(c, m, r["note"]) for c in order for m, r in data[c].items() if r["note"]]
    md += ["", "## Notes per measurement", ""]
    md += ["- %s / %s: %s" % n for n in notes]
    img = plot(chart, [head[c] for c in cols], a.out)
    md[chart_at:chart_at] = ["![chart](%s)" % img.split("/")[-1], ""]
    open(a.out + ".md", "w").write("\n".join(md) + "\n")


VALIDITY = (("proxy_rss_peak", "proxy peak RSS [MiB]"), ("minio_rss_peak", "MinIO peak RSS [MiB]"),
            ("swapin", "swapped in [pages]"), ("server_restarts", "server restarts"))


def validity(data, order):
    """The validity table: per run (contender or baseline), the fresh proxy's
    and MinIO's peak RSS, the machine's swap-ins, server restarts, and whether
    the run counts."""
    runs = [c for c in order if "valid" in data[c]]
    if not runs:
        return []
    md = ["", "## Validity of each run", "",
          "Each contender and baseline, and the staged-input tasks (ferry-stage), ran with a fresh "
          "toxiproxy process. A run is INVALID when the "
          "machine swapped in pages (pswpin of /proc/vmstat) or MinIO or the proxy exited, restarted "
          "or was not ready during it.", "",
          "| run | valid | " + " | ".join(lbl for _, lbl in VALIDITY) + " | why |",
          "|---|---|" + "---|" * len(VALIDITY) + "---|"]
    for c in runs:
        d = data[c]
        md.append("| %s | %s | %s | %s |" % (
            c, "**INVALID**" if d["valid"]["value"] == "INVALID" else d["valid"]["value"],
            " | ".join(d[m]["value"] if m in d else "-" for m, _ in VALIDITY), d["valid"]["note"] or "-"))
    return md


COLORS = ["#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf",
          "#7f7f7f", "#bcbd22", "#ff7f0e"]


def plot(chart, cols, out):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return svg(chart, cols, out)
    n = len(chart)
    ncol = 4
    nrow = math.ceil(n / ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.2 * ncol, 2.9 * nrow), squeeze=False)
    for i, (label, hib, vals, lbs) in enumerate(chart):
        ax = axes[i // ncol][i % ncol]
        xs = list(range(len(cols)))
        ys = [vals.get(c, 0) for c in cols]
        ax.bar(xs, [y if y > 0 else float("nan") for y in ys],
               color=[COLORS[j % len(COLORS)] for j in xs])
        ax.set_yscale("log")
        pos = [y for y in ys if y > 0]
        if pos:  # a common floor well below the smallest bar, room above the largest
            ax.set_ylim(min(pos) / 4, max(pos) * 3)
        for x, y, c in zip(xs, ys, cols):
            if y > 0:  # ">" marks a timeout (lower bound)
                ax.text(x, y, (">" if c in lbs else "") + ("%.0f" if y >= 10 else "%.2g") % y,
                        ha="center", va="bottom", fontsize=6)
        ax.set_xticks(xs)
        ax.set_xticklabels(cols, rotation=45, ha="right", fontsize=7)
        ax.set_title("%s\n(%s is better)" % (label, "higher" if hib else "lower"), fontsize=8)
        ax.tick_params(axis="y", labelsize=7)
    for j in range(n, nrow * ncol):
        axes[j // ncol][j % ncol].axis("off")
    fig.tight_layout()
    fig.savefig(out + ".png", dpi=90)
    return out + ".png"


def svg(chart, cols, out):
    """Fallback chart: one row of log-scale horizontal bars per workload."""
    w, rowh, barh = 900, 18 + 12 * len(cols), 10
    parts = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-size="10" '
             'font-family="sans-serif">' % (w, rowh * len(chart) + 10)]
    for i, (label, hib, vals, _) in enumerate(chart):
        y0 = i * rowh + 12
        parts.append('<text x="4" y="%d" font-weight="bold">%s (%s is better, log scale)</text>'
                     % (y0, label, "higher" if hib else "lower"))
        pos = [v for v in vals.values() if v > 0]
        lo, hi = (math.log10(min(pos)) - 0.3, math.log10(max(pos))) if pos else (0, 1)
        for j, c in enumerate(cols):
            v = vals.get(c)
            y = y0 + 4 + j * 12
            bw = 0 if not v or v <= 0 else 20 + 600 * (math.log10(v) - lo) / max(hi - lo, 1e-9)
            parts.append('<text x="4" y="%d">%s</text><rect x="120" y="%d" width="%.0f" height="%d" '
                         'fill="%s"/><text x="%.0f" y="%d">%s</text>' % (
                             y + 9, c, y, bw, barh, COLORS[j % len(COLORS)], 125 + bw, y + 9,
                             "%.3g" % v if v else "n/a"))
    parts.append("</svg>")
    open(out + ".svg", "w").write("\n".join(parts))
    return out + ".svg"


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    for f in ("--csv", "--contenders", "--out", "--mode", "--env", "--sizes"):
        ap.add_argument(f, required=True)
    report(ap.parse_args())
