#!/usr/bin/env python3
"""Where a model's fp16 error comes from, without a GPU: each float value a node writes is rounded
to fp16 (a Cast to float16 and back inserted after it) and the model runs on fusec's CPU backend;
the output is compared with a reference (torch fp32's, from export_zoo.py). Values to leave in
float32 are named by node (--keep, a file of node names, as `build/lab/island_probe` lists the
float32 island: `awk '$1=="island"{print $3}'`) or by op type (--keep-ops). Storage rounding only:
the convs and GEMMs still compute in fp32, so this bounds what storage alone costs.

    python3 scripts/lab/fp16_emulate.py MODEL.onnx --inputs NAME=FILE.npy ... --ref OUT.npy
        [--keep nodes.txt] [--keep-ops Add,Sub] [--fusec build/fusec]

prints `rounded N values: max rel E` (max |out - ref| / max |ref|).
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, shape_inference


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--inputs", nargs="+", required=True, help="NAME=FILE.npy, one per graph input")
    ap.add_argument("--ref", required=True, help="the reference output (.npy)")
    ap.add_argument("--keep", help="file of node names whose outputs stay float32")
    ap.add_argument("--keep-ops", default="", help="comma-separated op types whose outputs stay float32")
    ap.add_argument("--fusec", default="build/fusec")
    a = ap.parse_args()

    m = shape_inference.infer_shapes(onnx.load(a.model))
    g = m.graph
    types = {v.name: v.type.tensor_type.elem_type for v in list(g.value_info) + list(g.output) + list(g.input)}
    keep = set(open(a.keep).read().split()) if a.keep else set()
    keep_ops = set(filter(None, a.keep_ops.split(",")))
    outputs = {o.name for o in g.output}
    nodes, renamed, rounded = [], {}, 0
    for n in g.node:
        for i, x in enumerate(n.input):
            if x in renamed:
                n.input[i] = renamed[x]
        nodes.append(n)
        if n.name in keep or n.op_type in keep_ops:
            continue
        for o in n.output:
            if types.get(o) != TensorProto.FLOAT or o in outputs:
                continue
            nodes.append(helper.make_node("Cast", [o], [o + "__f16"], to=TensorProto.FLOAT16, name=o + "__to_f16"))
            nodes.append(helper.make_node("Cast", [o + "__f16"], [o + "__r"], to=TensorProto.FLOAT, name=o + "__to_f32"))
            renamed[o] = o + "__r"
            rounded += 1
    del g.node[:]
    g.node.extend(nodes)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "rounded.onnx")
        onnx.save(m, path)
        cmd = [a.fusec, "run", path, "--device", "cpu", "--output-dir", d, "--format", "npy"]
        for s in a.inputs:
            cmd += ["--input", s]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            sys.stderr.write(r.stderr)
            return 1
        out = np.load(sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".npy"))[0])
    ref = np.load(a.ref)
    print(f"rounded {rounded} values: max rel {np.abs(out - ref).max() / np.abs(ref).max():.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
