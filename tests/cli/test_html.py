#!/usr/bin/env python3
"""The HTML reports (`fusec profile --html`, `fusec compare --html`) in a real browser.

    test_html.py --fusec build/fusec --models models [-k NAME]

Headless Chromium (Debian package `chromium`) renders each page to a PNG, which must exist and not
be blank, and dumps the DOM after the page's script ran: the script sets data-ready="1" on <body>
as its last statement, so an exception leaves it unset. The roofline must have one class="point"
element per node the report can place on it (a cost with FLOPs and bytes, and a time), the page
must fetch nothing, and names with < & " must come out as text. Without chromium the test prints a
SKIP line and exits 0 (CI installs it: scripts/setup.sh).

Exit status 0 when every test passes (or skips), 1 otherwise; the last line is a one-line summary.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import traceback
import zlib

import numpy as np

PROFILE = ["--batch", "1", "--iterations", "5", "--warmup", "1", "--device", "cpu"]


class Failure(Exception):
    pass


def check(cond: bool, what: str) -> None:
    if not cond:
        raise Failure(what)


def find_chromium() -> str | None:
    for name in (os.environ.get("FUSEC_CHROMIUM", ""), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


class Ctx:
    def __init__(self, fusec: str, models: str, chromium: str, tmp: str):
        self.fusec, self.models, self.chromium, self.tmp = fusec, models, chromium, tmp
        self._n = 0

    def fresh(self, name: str) -> str:
        self._n += 1
        d = os.path.join(self.tmp, f"{self._n:02d}_{name}")
        os.makedirs(d)
        return d

    def run(self, *args: str, expect: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess:
        p = subprocess.run([self.fusec, *args], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        if p.returncode not in expect:
            raise Failure(f"fusec {' '.join(args)} exited {p.returncode}:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
        return p

    def browser(self, *args: str) -> subprocess.CompletedProcess:
        profile_dir = tempfile.mkdtemp(dir=self.tmp, prefix="chromium_")
        cmd = [self.chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
               "--disable-extensions", "--disable-dev-shm-usage",
               f"--user-data-dir={profile_dir}", *args]
        # The sanitizer pass exports ASAN_OPTIONS for fusec; the browser is not instrumented.
        env = {k: v for k, v in os.environ.items() if not k.endswith("SAN_OPTIONS") and k != "LD_PRELOAD"}
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, env=env)
        if p.returncode != 0:
            raise Failure(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stderr[-2000:]}")
        return p

    def screenshot(self, html: str) -> None:
        png = html[:-5] + ".png"
        self.browser(f"--screenshot={png}", "--window-size=1400,3000", "file://" + os.path.abspath(html))
        check(os.path.isfile(png), f"chromium wrote no screenshot {png}")
        w, h, ink = png_residuals(png)
        check(w >= 1000 and h >= 1000, f"screenshot is {w}x{h}")
        check(ink >= 0.005, f"screenshot {png} is blank ({100 * ink:.3f}% of it differs from its neighbours)")

    def dom(self, html: str, fragment: str = "") -> str:
        p = self.browser("--dump-dom", "file://" + os.path.abspath(html) + fragment)
        check("<body" in p.stdout, "chromium dumped no DOM")
        check('data-ready="1"' in p.stdout, "the page's script did not finish (a JavaScript error?)")
        return p.stdout


def png_residuals(path: str) -> tuple[int, int, float]:
    """(width, height, share of non-zero filtered bytes) of an 8-bit RGB(A) PNG, as chromium writes.

    PNG stores each row as a residual against a predictor (the pixel to the left, above, ...), so a
    blank page is almost all zeros after inflating; a drawn page is not. No image library needed."""
    with open(path, "rb") as f:
        data = f.read()
    check(data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG")
    pos, idat, hdr = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            hdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    check(hdr is not None, f"{path} has no IHDR")
    w, h, depth, colour, _, _, interlace = hdr
    check(depth == 8 and colour in (2, 6) and interlace == 0, f"{path}: unexpected PNG format {hdr}")
    ch = 3 if colour == 2 else 4
    raw = np.frombuffer(zlib.decompress(idat), dtype=np.uint8)
    check(raw.size == h * (1 + w * ch), f"{path}: truncated image data")
    residuals = raw.reshape(h, 1 + w * ch)[:, 1 + ch:]  # without each row's filter byte and first pixel
    return w, h, float((residuals != 0).mean())


def expected_points(report: dict) -> int:
    """The page's rule (profiler/html_report.h, on_roofline), from the JSON report."""
    n = 0
    for node in report["nodes"]:
        flops = node.get("flops") or 0
        nbytes = (node.get("bytes_read") or 0) + (node.get("bytes_written") or 0)
        n += flops > 0 and nbytes > 0 and node["median_ms"] > 0
    return n


def count_points(dom: str) -> int:
    return len(re.findall(r'class="point\b', dom))


def self_contained(html: str) -> None:
    with open(html, encoding="utf-8") as f:
        text = f.read()
    for bad in (r"<script[^>]*\bsrc=", r"<link\b", r"<img\b", r"@import", r"url\(\s*['\"]?https?:", r"<iframe\b"):
        check(not re.search(bad, text, re.I), f"{html} fetches something: /{bad}/")


# ---- tests ----

def test_profile_html(ctx: Ctx) -> None:
    d = ctx.fresh("profile")
    report, html = os.path.join(d, "r.json"), os.path.join(d, "report.html")
    p = ctx.run("profile", os.path.join(ctx.models, "resnet50_small.onnx"), *PROFILE, "--report", report, "--html", html)
    check(html in p.stdout, "profile does not name the HTML file it wrote")
    self_contained(html)
    with open(report) as f:
        r = json.load(f)
    want = expected_points(r)
    check(want >= 50, f"resnet50_small should have >= 50 nodes with a cost, the report has {want}")
    dom = ctx.dom(html)
    check(count_points(dom) == want, f"{count_points(dom)} roofline points, the report has {want} nodes with a cost and time")
    check(f'data-points="{want}"' in dom, "the page's point count differs from the report's")
    for part in ('id="roofline"', 'id="timeline"', 'id="nodes"', 'id="kernels"', 'id="op-types"', "stem.conv"):
        check(part in dom, f"the page lacks {part}")
    check(dom.count('class="span"') == len(r["kernels"]), "the timeline should have one bar per kernel")
    check("as measured" in dom, "the timeline should show measured start offsets")
    check(len(re.findall(r"<tr>", dom)) >= len(r["nodes"]) + len(r["kernels"]), "tables miss rows")
    ctx.screenshot(html)

    # Sorting (the same function a header click calls): #sort=nodes:5:desc orders by median ms.
    dom = ctx.dom(html, "#sort=nodes:5:desc")
    table = dom[dom.index('id="nodes"'):]
    table = table[:table.index("</table>")]
    ms = [float(v) for v in re.findall(r'<tr><td class="n" data-v="[^"]*">[^<]*</td>(?:<td[^>]*>[^<]*</td>){4}'
                                       r'<td class="n" data-v="([^"]*)"', table)]
    check(len(ms) == len(r["nodes"]), f"sorted node table has {len(ms)} rows of {len(r['nodes'])}")
    check(ms == sorted(ms, reverse=True), "the node table is not sorted by median ms after #sort=nodes:5:desc")
    check('data-dir="desc"' in table, "the sorted column is not marked")


def make_awkward_model(path: str) -> str:
    """Two MatMul+Relu nodes whose names would break HTML if not escaped."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((16, 16)).astype(np.float32), "w")
    evil = '<img src=x onerror="document.body.dataset.pwned=1">&amp;"q\''
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name=evil),
             helper.make_node("Relu", ["h"], ["y"], name="</script><b>relu & co</b>")]
    g = helper.make_graph(nodes, "awkward <names>", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(m, path)
    return evil


def test_escaping(ctx: Ctx) -> None:
    d = ctx.fresh("escaping")
    model, html = os.path.join(d, "a<b&c.onnx"), os.path.join(d, "report.html")
    evil = make_awkward_model(model)
    ctx.run("profile", model, "--device", "cpu", "--iterations", "3", "--warmup", "1", "--as-given", "--html", html)
    self_contained(html)
    dom = ctx.dom(html)
    check("<img" not in dom and "<b>" not in dom and "pwned" not in dom.split("<body", 1)[1].split(">", 1)[0],
          "a node name became markup")
    check("&lt;img src=x" in dom and "&lt;/script&gt;&lt;b&gt;relu &amp; co" in dom, "the node names are not shown as text")
    check(count_points(dom) >= 1, "the MatMul should be on the roofline")


def test_compare_html(ctx: Ctx) -> None:
    d = ctx.fresh("compare")
    model = os.path.join(ctx.models, "resnet50_small.onnx")
    base, new = os.path.join(d, "base.json"), os.path.join(d, "new.json")
    ctx.run("profile", model, *PROFILE, "--report", base)
    ctx.run("profile", model, *PROFILE, "--report", new)
    html = os.path.join(d, "compare.html")
    p = ctx.run("compare", base, new, "--html", html, expect=(0, 3))
    self_contained(html)
    with open(base) as f:
        nb = expected_points(json.load(f))
    with open(new) as f:
        nn = expected_points(json.load(f))
    dom = ctx.dom(html)
    check(len(re.findall(r'class="point base"', dom)) == nb, "base points missing")
    check(len(re.findall(r'class="point new"', dom)) == nn, "new points missing")
    check('id="verdicts"' in dom and "latency" in dom, "no verdict table")
    check(f'data-regressions="{1 if p.returncode == 3 else 0}"' in dom or p.returncode == 3, "summary disagrees with the exit code")
    ctx.screenshot(html)

    # A planted regression (more launches per run: compared exactly, so no noise) shows as one.
    slow = os.path.join(d, "slow.json")
    with open(base) as f:
        r = json.load(f)
    for mode in r["modes"]:
        mode["launches"] += 10
    with open(slow, "w") as f:
        json.dump(r, f)
    html2 = os.path.join(d, "regressed.html")
    ctx.run("compare", base, slow, "--html", html2, expect=(3,))
    dom = ctx.dom(html2)
    check('class="worse">REGRESSION' in dom and 'data-regressions="0"' not in dom, "the regression is not shown")

    # Bench and optimize reports (the sample project's baselines): the verdict table alone.
    baselines = os.path.join(ctx.models, "..", "examples", "ci", "baselines", "cpu")
    for kind in ("bench", "optimize"):
        rep = os.path.join(baselines, f"mlp_small.{kind}.json")
        page = os.path.join(d, f"{kind}.html")
        ctx.run("compare", rep, rep, "--html", page)
        self_contained(page)
        dom = ctx.dom(page)
        check('id="verdicts"' in dom and count_points(dom) == 0 and 'data-regressions="0"' in dom,
              f"compare --html of two {kind} reports: no verdict table, or points, or a regression")

    # A bad input writes no page and fails as usual.
    bad = os.path.join(d, "bad.html")
    ctx.run("compare", base, os.path.join(d, "missing.json"), "--html", bad, expect=(2,))
    check(not os.path.exists(bad), "a failed compare wrote a page")


TESTS = [test_profile_html, test_escaping, test_compare_html]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fusec", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("-k", default="")
    args = ap.parse_args()
    chromium = find_chromium()
    if not chromium:
        print("SKIP: chromium is not installed (apt-get install chromium; scripts/setup.sh does): HTML reports untested")
        return 0
    failed = 0
    with tempfile.TemporaryDirectory(prefix="fusec_html_") as tmp:
        ctx = Ctx(os.path.abspath(args.fusec), os.path.abspath(args.models), chromium, tmp)
        ran = 0
        for t in TESTS:
            if args.k not in t.__name__:
                continue
            ran += 1
            t0 = time.time()
            try:
                t(ctx)
                print(f"PASS {t.__name__} ({time.time() - t0:.1f} s)")
            except Exception as e:  # noqa: BLE001 - report every failure, keep going
                failed += 1
                print(f"FAIL {t.__name__}: {e}")
                if not isinstance(e, Failure):
                    traceback.print_exc()
    print(f"{ran - failed}/{ran} HTML tests passed" + (f", {failed} failed" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
