"""One page per experiment: self-contained HTML (plots embedded as base64 PNG) or markdown.

Why f-strings and not Jinja2 templates (judged for issue 29): the page is a dozen elements built
in one function, every value goes through ``html.escape`` in the two places text enters
(``_cell``, and ``esc`` for headings, captions and the config), and the browser test
(tests/test_report_browser.py) checks what the page shows. Jinja2's autoescaping would guard the
same thing, and a template file would separate markup from data, but Jinja2 is not a dependency
of scalebench (only torch brings it) and a template would move the page's logic, the plots'
order and captions, into a second language. Kept by hand while the page stays this size.
"""

from __future__ import annotations

import base64
import html
from pathlib import Path

from experiments.store import ResultDir
from experiments.tables import efficiency_rows, efficiency_table, markdown_table, summary_rows

PLOT_CAPTIONS = {
    "speedup": "Speedup over one GPU (weak scaling): the dashed line is ideal, the dotted one 75 % efficiency.",
    "efficiency": "Scaling efficiency T1 / TN; the dotted line is the 75 % target (4 machines doing the work of 3).",
    "breakdown": "Where one iteration's time goes: compute and the communication that backward did not hide.",
    "timeline": "One iteration of one point: the compute stream and the gradient-bucket allreduces.",
    "throughput": "Samples/s over a multi-iteration run (solid) and after the staleness penalty (dashed).",
    "staleness": "Staleness of the asynchronous updates: mean and 95th percentile.",
}


def _cell(value) -> str:
    """A table cell: numbers right-aligned on one line, text left-aligned and wrapping."""
    text = html.escape(str(value))
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    if not numeric:
        try:
            float(str(value).replace(",", ""))
            numeric = True
        except ValueError:
            numeric = False
    return f"<td>{text}</td>" if numeric else f'<td class="text">{text}</td>'


EFFICIENCY_CAPTION = ("Scaling efficiency T1 / TN in %, weak scaling (the same batch per GPU), simulated: one row per "
                      "GPU count, one column per series.")


def _html_table(table_id: str, rows: list[dict], caption: str = "") -> str:
    """A table of ``rows`` (numbers right-aligned, text wrapping) in a box that scrolls sideways
    itself when wider than the page, never the page."""
    esc = html.escape
    head = "".join(f"<th>{esc(str(c))}</th>" for c in rows[0])
    cells = "".join("<tr>" + "".join(_cell(v) for v in r.values()) + "</tr>" for r in rows)
    title = f"<caption>{esc(caption)}</caption>" if caption else ""
    return (f'<div class="table"><table id="{table_id}">{title}<thead><tr>{head}</tr></thead>'
            f"<tbody>{cells}</tbody></table></div>")


def _plots(store: ResultDir) -> list[Path]:
    if not store.plots_dir.is_dir():
        return []
    order = ["speedup", "efficiency", "throughput", "breakdown"]
    order[2:2] = sorted(p.stem for p in store.plots_dir.glob("efficiency_by_*.png"))
    pngs = sorted(store.plots_dir.glob("*.png"), key=lambda p: (order.index(p.stem) if p.stem in order else 9, p.stem))
    return pngs


def _caption(stem: str) -> str:
    if stem.startswith("efficiency_by_"):
        return f"Scaling efficiency vs GPUs, one panel per value of {stem[len('efficiency_by_'):].replace('_', '.', 1)}."
    if stem.startswith("compare_"):
        return f"Scaling efficiency along the swept axis {stem[len('compare_'):].replace('_', '.', 1)}, at the largest GPU count."
    return PLOT_CAPTIONS.get(stem, stem)


def _provenance(df) -> str:
    versions = ", ".join(sorted({str(v) for v in df.get("scalebench_version", [])}))
    revisions = ", ".join(sorted({str(v) for v in df.get("git_revision", [])}))
    return f"{len(df)} rows; scalebench {versions}; git revision {revisions}"


def _summary_rows(df, meta) -> list[dict]:
    from experiments.tables import is_run_table, run_summary_rows

    return run_summary_rows(df, meta) if is_run_table(df) else summary_rows(df, meta)


def render_markdown(result_dir: str | Path) -> str:
    from experiments.tables import is_run_table

    store = ResultDir(result_dir)
    meta, df = store.meta(), store.read_csv()
    config = store.experiment_text()
    parts = [f"# {meta['name']}\n", f"{_provenance(df)}.\n", "## Config\n", f"```yaml\n{config}```\n"]
    if not is_run_table(df):
        rows = efficiency_rows(df, meta)
        parts += ["## Scaling efficiency\n", EFFICIENCY_CAPTION + "\n",
                  markdown_table(rows) if rows else f"```\n{efficiency_table(df, meta)}\n```\n"]
    for png in _plots(store):
        parts.append(f"![{_caption(png.stem)}](plots/{png.name})\n\n*{_caption(png.stem)}*\n")
    parts += ["## All points (mean over repetitions)\n", markdown_table(_summary_rows(df, meta))]
    if meta.get("skipped"):
        parts.append("\n## Invalid combinations left out\n")
        parts += [f"- {s['axes']}: {s['reason']}\n" for s in meta["skipped"]]
    if meta.get("failed"):
        parts.append("\n## Points that failed (not in the tables; the next run tries them again)\n")
        parts += [f"- {s['axes']}: {s['reason']}\n" for s in meta["failed"]]
    return "\n".join(parts)


def render_html(result_dir: str | Path) -> str:
    store = ResultDir(result_dir)
    meta, df = store.meta(), store.read_csv()
    config = store.experiment_text()
    esc = html.escape
    from experiments.tables import is_run_table

    body = [f"<h1>{esc(meta['name'])}</h1>", f"<p>{esc(_provenance(df))}.</p>"]
    if not is_run_table(df):
        rows = efficiency_rows(df, meta)
        body += ["<h2>Scaling efficiency</h2>",
                 _html_table("efficiency", rows, EFFICIENCY_CAPTION) if rows else f"<pre>{esc(efficiency_table(df, meta))}</pre>"]
    for png in _plots(store):
        data = base64.b64encode(png.read_bytes()).decode("ascii")
        body.append(f'<figure><img alt="{esc(_caption(png.stem))}" src="data:image/png;base64,{data}">'
                    f"<figcaption>{esc(_caption(png.stem))}</figcaption></figure>")
    rows = _summary_rows(df, meta)
    if rows:
        body += ["<h2>All points (mean over repetitions)</h2>", _html_table("points", rows)]
    if meta.get("skipped"):
        body.append("<h2>Invalid combinations left out</h2><ul>")
        body += [f"<li>{esc(str(s['axes']))}: {esc(s['reason'])}</li>" for s in meta["skipped"]]
        body.append("</ul>")
    if meta.get("failed"):
        body.append("<h2>Points that failed (not in the tables; the next run tries them again)</h2><ul>")
        body += [f"<li>{esc(str(s['axes']))}: {esc(s['reason'])}</li>" for s in meta["failed"]]
        body.append("</ul>")
    body += ["<h2>Config</h2>", f"<pre>{esc(config)}</pre>"]
    # Tables fit the page: the table takes the page's width, headers and text cells wrap, numbers
    # stay on one line; a table wider than that still scrolls inside its box, never the page.
    style = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}"
             "img{max-width:100%;height:auto}figure{margin:1.5em 0}figcaption{color:#555;font-size:90%}"
             "div.table{max-width:100%;overflow-x:auto}"
             "table{border-collapse:collapse;font-size:80%;width:100%}"
             "td,th{border:1px solid #ccc;padding:2px 5px;text-align:right;vertical-align:top}"
             "th{white-space:normal;background:#f3f3f3}td{white-space:nowrap}"
             "td.text{text-align:left;white-space:normal;overflow-wrap:anywhere}"
             "caption{caption-side:top;text-align:left;color:#555;font-size:90%;padding:.3em 0}"
             "table#efficiency{width:auto}"
             "pre{background:#f6f6f6;padding:.6em;overflow-x:auto}")
    return (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>scalebench: {esc(meta['name'])}</title>"
            f"<style>{style}</style></head><body>{''.join(body)}</body></html>\n")
