"""`harness report`: runs' JSONs or ledgers rendered as a self-contained HTML page, a Markdown file and PNG heatmaps.

Per release and backend an arch x method heatmap: a square's colour is the worst verdict of its cells over the
other axes (report.VERDICTS, worst first), its text the number of cells; a square with a cell not as expected has a
red frame. Clicking a square lists its cells: verdict, outcome, expected, detail, cause, link, repro command. Then
the causes: every recorded cause of a cell that is not safe, with its outcome counts, archs, methods, releases,
link and case script. Records are shown as recorded (a ledger of another release is not re-judged).
"""
from __future__ import annotations

import base64
import gzip
import html
import json
import os
import warnings
from collections import Counter, defaultdict

from .outcomes import BROKEN
from .report import CASE, VERDICTS, atomic, by_cause, histogram, names, short, verdict

COLOURS = {"broken, NEW": "#b2182b", "broken, known": "#ef8a62", "nondeterministic": "#c51b7d",
           "not checkpointed": "#fddbc7", "plain fails": "#bababa", "unsupported": "#e0e0e0",
           "safe, partly": "#d1e5f0", "safe": "#67a9cf"}
FILES = ("report.html", "report.md")


def release(versions: dict) -> str:
    """"transformers 4.57.6, peft 0.21.2, adapters 1.3.0" (the libraries installed when the cells ran)."""
    return ", ".join(f"{p} {versions[p]}" for p in ("transformers", "peft", "adapters") if versions.get(p))


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in text).strip("_")


def sections(runs: list[dict]) -> dict[tuple[str, str], list[dict]]:
    """(release, backend) -> its cells, each tagged with its release; a cell in two runs of one release is kept
    once (the later run's)."""
    out: dict[tuple[str, str], dict[str, dict]] = defaultdict(dict)
    for run in runs:
        rel = release(run.get("versions", {}))
        for r in run["cells"]:
            out[(rel, r["backend"])][r["id"]] = {**r, "release": rel}
    return {k: list(v.values()) for k, v in sorted(out.items())}


def worst(cells: list[dict]) -> str:
    return min((verdict(c) for c in cells), key=VERDICTS.index)


def causes(cells: list[dict]) -> list[dict]:
    """The recorded causes of the cells that are not safe, widest first, and one row for broken cells with none."""
    rows = []
    for (reason, link), cs in by_cause([c for c in cells if c["outcome"] != "equivalent" and
                                        (c.get("reason") or c["outcome"] in BROKEN)]).items():
        case = CASE.search(reason)
        rows.append({"reason": reason or "no recorded cause: a NEW finding", "short": short(reason) if reason else
                     "no recorded cause", "link": link, "case": case.group(0) if case else "", "cells": len(cs),
                     "outcomes": histogram(cs), "verdicts": dict(Counter(verdict(c) for c in cs)),
                     "archs": sorted({c["arch"] for c in cs}), "methods": sorted({c["method"] for c in cs}),
                     "releases": sorted({c["release"] for c in cs}), "example": cs[0]["id"]})
    return rows


def render(runs: list[dict], out_dir: str, title: str = "") -> list[str]:
    """Write report.html, report.md and one heatmap PNG per section (release, backend) into `out_dir`; the paths
    written."""
    os.makedirs(out_dir, exist_ok=True)
    secs = sections(runs)
    every = [c for cs in secs.values() for c in cs]
    found = causes(every)
    labels = sorted({r.get("label", "") for r in runs} - {""})
    title = title or "gradient checkpointing: what changes training"
    pngs = {key: _png(cells, key, out_dir) for key, cells in secs.items()}
    paths = [os.path.join(out_dir, f) for f in FILES]
    for path, text in zip(paths, (_html(secs, found, title, labels), _markdown(secs, found, title, labels, pngs))):
        with atomic(path) as fh:
            fh.write(text)
    return paths + [p for p in pngs.values() if p]


def _grid(cells: list[dict]):
    """(archs, methods, {(arch, method): cells}) of one section."""
    squares: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for c in cells:
        squares[(c["arch"], c["method"])].append(c)
    return sorted({a for a, _ in squares}), sorted({m for _, m in squares}), squares


def _counts(cells: list[dict]) -> str:
    c = Counter(verdict(x) for x in cells)
    return ", ".join(f"{v} {c[v]}" for v in VERDICTS if c[v])


def _html(secs, found, title, labels) -> str:
    e = html.escape
    parts = [f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{e(title)}</title>",
             f"<style>{CSS}</style></head><body><h1>{e(title)}</h1>"]
    if labels:
        parts.append(f"<p class='covers'>Covers: {e('; '.join(labels))}</p>")
    parts.append("<p class='legend'>" + " ".join(
        f"<span class='key' style='background:{COLOURS[v]}'>{e(v)}</span>" for v in VERDICTS) +
        " <span class='key unexpected'>not as expected</span> A square: the worst verdict of its cells over "
        "gc_mode, inputs, order, task and recipe; its number: how many cells. Click it for its cells.</p>")
    parts.append("<table id='overview'><thead><tr><th>backend</th><th>release</th><th>cells</th><th>verdicts</th>"
                 "<th>not as expected</th></tr></thead><tbody>" + "".join(
                     f"<tr><td><a href='#{_slug(rel + ' ' + backend)}'>{e(backend)}</a></td><td>{e(rel)}</td>"
                     f"<td>{len(cells)}</td><td>{e(_counts(cells))}</td><td>{sum(not c['matches'] for c in cells)}"
                     f"</td></tr>" for (rel, backend), cells in secs.items()) +
                 "</tbody></table><p><a href='#causes-title'>Causes</a></p>")
    data = {}
    for n, ((rel, backend), cells) in enumerate(secs.items()):
        archs, methods, squares = _grid(cells)
        sid = f"s{n}"
        parts.append(f"<h2 id='{_slug(rel + ' ' + backend)}'>{e(backend)} <small>{e(rel)}</small></h2>"
                     f"<p>{len(cells)} cells: {e(_counts(cells))}</p>"
                     f"<div class='scroll'><table class='heatmap' data-section='{sid}' data-backend='{e(backend)}' "
                     f"data-release='{e(rel)}'><thead><tr><th class='corner'>arch \\ method</th>" +
                     "".join(f"<th class='method'><span>{e(m)}</span></th>" for m in methods) + "</tr></thead><tbody>")
        for a in archs:
            row = [f"<tr><th class='arch'>{e(a)}</th>"]
            for m in methods:
                cs = squares.get((a, m))
                if not cs:
                    row.append("<td></td>")
                    continue
                data[f"{sid}|{a}|{m}"] = [_brief(c) for c in sorted(cs, key=lambda c: (VERDICTS.index(verdict(c)),
                                                                                           c["id"]))]
                bad = any(not c["matches"] for c in cs)
                row.append(f"<td class='square{' unexpected' if bad else ''}' data-arch='{e(a)}' "
                           f"data-method='{e(m)}' style='background:{COLOURS[worst(cs)]}' "
                           f"title='{e(a)} / {e(m)}: {e(_counts(cs))}'>{len(cs)}</td>")
            parts.append("".join(row) + "</tr>")
        parts.append("</tbody></table></div>")
    parts.append("<div id='cells' hidden><h3 id='cells-title'></h3><button id='cells-close'>close</button>"
                 "<table><thead><tr><th>cell</th><th>verdict</th><th>outcome</th><th>expected</th><th>detail</th>"
                 "<th>cause</th><th>reproduce</th></tr></thead><tbody id='cells-body'></tbody></table></div>")
    parts.append("<h2 id='causes-title'>Causes</h2><p>Every recorded cause of a cell that is not safe (and the broken "
                 "cells with none), widest first.</p><table id='causes'><thead><tr><th>cause</th><th>cells</th>"
                 "<th>outcomes</th><th>archs</th><th>methods</th><th>releases</th><th>link</th><th>case</th>"
                 "</tr></thead><tbody>")
    for row in found:
        link = f"<a href='{e(row['link'])}'>{e(_short_link(row['link']))}</a>" if row["link"].startswith("http") \
            else e(row["link"])
        parts.append(f"<tr class='cause'><td title='{e(row['reason'])}'>{e(row['short'])}</td><td>{row['cells']}</td>"
                     f"<td>{e(row['outcomes'])}</td><td>{e(names(row['archs'], 8))}</td>"
                     f"<td>{e(names(row['methods'], 8))}</td>"
                     f"<td>{e('; '.join(row['releases']))}</td><td>{link}</td><td>{e(row['case'])}</td></tr>")
    parts.append("</tbody></table>")
    # the cells of every square, gzipped (17x smaller: a product's page stays a few MB); the page inflates them
    blob = base64.b64encode(gzip.compress(json.dumps(data, separators=(",", ":")).encode(), 9, mtime=0)).decode()
    parts.append(f"<script id='data' type='application/octet-stream'>{blob}</script><script>{JS}</script></body></html>")
    return "\n".join(parts)


def _brief(c: dict) -> list:
    cause = short(c["reason"]) if c.get("reason") and c["outcome"] != "equivalent" else ""
    detail = "" if c["outcome"] == "equivalent" and c["matches"] else c.get("detail", "")[:300]
    return [c["id"], verdict(c), c["outcome"], c["expected"], detail, cause, c.get("link", "")]


def _short_link(link: str) -> str:
    return link.replace("https://github.com/", "").replace("/issues/", "#").replace("/pull/", "#")


def _markdown(secs, found, title, labels, pngs) -> str:
    out = [f"# {title}", ""]
    if labels:
        out += [f"Covers: {'; '.join(labels)}", ""]
    out += ["Verdicts, worst first: " + ", ".join(f"**{v}**" for v in VERDICTS) + ". The HTML page beside this file "
            "has the clickable arch x method heatmap.", ""]
    for (rel, backend), cells in secs.items():
        out += [f"## {backend} ({rel})", "", f"{len(cells)} cells: {_counts(cells)}; "
                f"{sum(not c['matches'] for c in cells)} not as expected", ""]
        if pngs.get((rel, backend)):
            out += [f"![{backend} heatmap]({os.path.basename(pngs[(rel, backend)])})", ""]
        rows: dict[str, Counter] = defaultdict(Counter)
        for c in cells:
            rows[c["method"]][verdict(c)] += 1
        cols = [v for v in VERDICTS if any(r[v] for r in rows.values())]
        out += ["| method | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]
        out += [f"| {m} | " + " | ".join(str(rows[m][v] or "") for v in cols) + " |" for m in sorted(rows)]
        out.append("")
    out += ["## Causes", "", "| cause | cells | outcomes | archs | methods | releases | link | case |",
            "|---|---:|---|---|---|---|---|---|"]
    for row in found:
        link = f"[{_short_link(row['link'])}]({row['link']})" if row["link"].startswith("http") else row["link"]
        cells = [row["short"], str(row["cells"]), row["outcomes"], names(row["archs"], 8), names(row["methods"], 8),
                 "; ".join(row["releases"]), link, row["case"]]
        out.append("| " + " | ".join(x.replace("|", "\\|") for x in cells) + " |")
    return "\n".join(out) + "\n"


def _png(cells: list[dict], key: tuple[str, str], out_dir: str) -> str:
    """The section's heatmap as a PNG (matplotlib; "" when it is not installed)."""
    try:
        import matplotlib
    except ImportError:
        return ""
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    archs, methods, squares = _grid(cells)
    grid = [[VERDICTS.index(worst(squares[(a, m)])) if (a, m) in squares else float("nan") for m in methods]
            for a in archs]
    fig, ax = plt.subplots(figsize=(5 + 0.22 * len(methods), 1.5 + 0.16 * len(archs)), dpi=72)
    ax.imshow(grid, cmap=ListedColormap([COLOURS[v] for v in VERDICTS]), vmin=-0.5, vmax=len(VERDICTS) - 0.5,
              aspect="auto", interpolation="nearest")
    ax.set_xticks(range(len(methods)), methods, rotation=90, fontsize=7)
    ax.set_yticks(range(len(archs)), archs, fontsize=7)
    for i, a in enumerate(archs):
        for j, m in enumerate(methods):
            if any(not c["matches"] for c in squares.get((a, m), ())):
                ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=1.2))
    ax.set_title(f"{key[1]} ({key[0]})", fontsize=9)
    ax.legend(handles=[Patch(color=COLOURS[v], label=v) for v in VERDICTS], fontsize=7, loc="upper left",
              bbox_to_anchor=(1.01, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # a one-column grid leaves tight_layout little room: it says so
        fig.tight_layout()
    path = os.path.join(out_dir, f"heatmap_{_slug(key[1] + '_' + key[0].split(',')[0])}.png")
    fig.savefig(path)
    plt.close(fig)
    return path


CSS = """
body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}
h2 small{font-weight:normal;color:#666}
.scroll{overflow:auto;max-height:80vh;border:1px solid #ddd}
table.heatmap{border-collapse:collapse;font-size:11px}
table.heatmap th.method{height:9em;white-space:nowrap;vertical-align:bottom}
table.heatmap th.method span{writing-mode:vertical-rl;transform:rotate(180deg)}
table.heatmap th.arch{text-align:right;padding-right:4px;white-space:nowrap;position:sticky;left:0;background:#fff}
table.heatmap td{width:22px;height:18px;text-align:center;border:1px solid #fff}
td.square{cursor:pointer} td.square:hover{outline:2px solid #000}
td.unexpected,.key.unexpected{box-shadow:inset 0 0 0 2px #d00}
.key{display:inline-block;padding:1px 6px;margin-right:3px;border-radius:3px}
#cells{position:fixed;bottom:0;left:0;right:0;max-height:45vh;overflow:auto;background:#fafafa;
 border-top:2px solid #444;padding:0.5em 1em}
#cells table,#causes,#overview{border-collapse:collapse;font-size:12px}
#overview td,#overview th,#cells td,#cells th,#causes td,#causes th{border:1px solid #ccc;padding:2px 5px;vertical-align:top;text-align:left}
#cells code{font-size:11px}
"""

JS = """
let data = null;   // square -> its cells, inflated from the gzipped blob; body[data-ready] once it is
(async () => {
  const bytes = Uint8Array.from(atob(document.getElementById('data').textContent), c => c.charCodeAt(0));
  const text = await new Response(new Blob([bytes]).stream().pipeThrough(new DecompressionStream('gzip'))).text();
  data = JSON.parse(text);
  document.body.dataset.ready = '1';
})();
const box = document.getElementById('cells'), body = document.getElementById('cells-body');
function cell(text, code) { const td = document.createElement('td');
  if (code) { const c = document.createElement('code'); c.textContent = text; td.appendChild(c); }
  else td.textContent = text; return td; }
document.querySelectorAll('td.square').forEach(sq => sq.addEventListener('click', () => {
  if (!data) return;
  const rows = data[`${sq.closest('table').dataset.section}|${sq.dataset.arch}|${sq.dataset.method}`];
  document.getElementById('cells-title').textContent =
    `${sq.dataset.arch} / ${sq.dataset.method}: ${rows.length} cells`;
  body.replaceChildren();
  for (const [id, verdict, outcome, expected, detail, cause, link] of rows) {
    const tr = document.createElement('tr'); tr.className = 'listed';
    tr.append(cell(id, true), cell(verdict), cell(outcome), cell(expected), cell(detail));
    const c = cell(cause);
    if (link.startsWith('http')) { const a = document.createElement('a'); a.href = link; a.textContent = ' link';
      c.appendChild(a); } else if (link) c.append(' ' + link);
    tr.append(c, cell(`python -m harness repro ${id} -o repro.py`, true));
    body.appendChild(tr);
  }
  box.hidden = false;
}));
document.getElementById('cells-close').addEventListener('click', () => { box.hidden = true; });
"""
