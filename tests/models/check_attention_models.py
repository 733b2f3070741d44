#!/usr/bin/env python3
"""The attention fusion on whole models: BERT, ViT, GPT-2 and Llama-style models (with Qwen3's,
Phi-3's, GPT-J's and Phi's variants) and nn.MultiheadAttention returning its weights, in the op
sequences of both PyTorch exporters (scripts/make_attention_models.py, generated here at test time).

For each model, at batch 2:
  1. `fusec optimize MODEL --batch 2 -o OPT` must verify (exit 0);
  2. every layer's attention is one Attention node (ai.fusec below opset 23, ONNX's own from 23),
     and no Softmax is left; where the Q, K and V projections read one tensor (BERT, ViT) or come
     from one Split (GPT-2 without the cache outputs), merge_qkv packs them: that Attention is the
     ai.fusec one with K and V omitted, at any opset;
     A classifier of the [CLS] token (bert_cls_*, vit_cls_*) must have its Gather moved above the
     last layer's MLP and LayerNorms by select_rows_early;
  3. on seeded inputs (token ids, a padding mask with zeros, pixels), `fusec run OPT` and `fusec run
     MODEL` must both match ONNX Runtime on the original MODEL (the outside oracle) within 1e-4 of
     each output's magnitude, and every output must be finite (ONNX Runtime's too). The *_sdpa_*
     models (transformers' sdpa attention with torch's safe-softmax guard) get a mask with fully
     masked query rows: the first sequence left-padded (GPT-2's and Llama's first causal rows see
     no key), the second all padding (every row of it). There the legacy form (-inf fill) gives 0
     and the dynamo form (-FLT_MAX fill) the mean of V, and the fused model must give the same;
  4. at opset 23, `--portable` must keep the standard Attention, and both ONNX Runtime and
     onnx.reference (ONNX's own Attention implementation) must run that model to the same numbers.
Exit 0 when every check passes, 1 otherwise; the last line is a summary.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx.reference import ReferenceEvaluator

HERE = os.path.dirname(os.path.abspath(__file__))
GENERATOR = os.path.join(HERE, "..", "..", "scripts", "make_attention_models.py")
TOL = 1e-4
BATCH, SEQ, VOCAB, LAYERS = 2, 8, 64, 2
# Models whose every layer gets packed QKV (merge_qkv); the others keep Q, K and V apart (GPT-2
# legacy's K and V are also the present outputs). Llama's and Phi-3's RoPE becomes one ai.fusec
# Rotary per layer (fuse_rotary), over the packed rows, and then the attention's cos and sin
# (fuse_rotary_attention).
PACKED = ("bert_dynamo", "bert_legacy", "bert_opset23", "bert_cls_dynamo", "bert_cls_legacy",
          "bert_sdpa_legacy", "bert_sdpa_dynamo",
          "vit_dynamo", "vit_legacy", "vit_cls_dynamo", "vit_cls_legacy",
          "gpt2_dynamo", "gpt2_sdpa_legacy", "gpt2_sdpa_dynamo",
          "llama_dynamo", "llama_legacy", "llama_sdpa_dynamo", "llama_sdpa_legacy",
          "phi3_legacy", "phi3_dynamo", "gptj_legacy", "gptj_dynamo", "phi_legacy", "phi_dynamo",
          "neox_legacy", "neox_dynamo", "mha_legacy", "mha_dynamo", "qwen3_legacy", "qwen3_dynamo")
# Rotary nodes per layer: one over the packed rows. Qwen3's per-head norms of Q and K go into its
# rotation (fuse_qk_norm), so it is one too, and stays out of the attention, which cannot normalize.
# A partial or interleaved rotation (GPT-J, Phi) stays one Rotary over the packed rows: the attention
# kernels rotate whole heads in the half-split form only. GPT-NeoX's one query_key_value, cut per
# head into Q, K and V, is unpacked into three projections (unpack_projection) and packed back.
ROTARY = {"qwen3_legacy": 1, "qwen3_dynamo": 1, "gptj_legacy": 1, "gptj_dynamo": 1, "phi_legacy": 1, "phi_dynamo": 1,
          "neox_legacy": 1, "neox_dynamo": 1}
# Models whose packed attentions rotate Q and K themselves (inputs 4 and 5, no Rotary node left).
ROTATED_INSIDE = ("llama_dynamo", "llama_legacy", "llama_sdpa_dynamo", "llama_sdpa_legacy", "phi3_legacy",
                  "phi3_dynamo")
# Classifiers of one token: select_rows_early must move its Gather above the last layer's MLP,
# LayerNorms and (BERT's, a MatMul on [B, S, E]) attention output projection: the user's node
# names, as rewrites record them, for the last layer's index.
VIT_TAIL = ("layernorm_after", "intermediate.matmul", "intermediate.add", "output.matmul", "output.add", "residual2")
BERT_TAIL = ("ln", "residual", "output.matmul", "output.add", "intermediate.matmul", "intermediate.add",
             "attention.ln", "attention.residual", "attention.output.matmul", "attention.output.add")
CLASSIFIERS = {
    **{f"vit_cls_{form}": lambda last: {f"encoder.{last}.{n}" for n in VIT_TAIL} | {"layernorm"}
       for form in ("legacy", "dynamo")},
    **{f"bert_cls_{form}": lambda last: {f"encoder.{last}.{n}" for n in BERT_TAIL} for form in ("legacy", "dynamo")},
}
THREE_D_ONLY = ("qwen3_legacy", "qwen3_dynamo")  # no Transpose may be left
PAD = 3  # padded positions in the attention masks below


def is_packed(n: onnx.NodeProto) -> bool:
    return n.domain == "ai.fusec" and len(n.input) >= 3 and n.input[1] == "" and n.input[2] == ""


def feeds_for(model: onnx.ModelProto, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    empty_rows = "_sdpa_" in model.graph.name
    feeds = {}
    for vi in model.graph.input:
        if vi.name == "input_ids":
            feeds[vi.name] = rng.integers(0, VOCAB, (BATCH, SEQ), dtype=np.int64)
        elif vi.name == "attention_mask" and empty_rows:  # left padding, then a padding-only sequence
            feeds[vi.name] = np.array([[0] * PAD + [1] * (SEQ - PAD), [0] * SEQ], np.int64)
        elif vi.name == "attention_mask":  # the second sequence is padded: its last 3 keys masked
            feeds[vi.name] = np.array([[1] * SEQ, [1] * (SEQ - PAD) + [0] * PAD], np.int64)
        elif vi.name == "pixel_values":
            feeds[vi.name] = rng.standard_normal((BATCH, 3, 16, 16)).astype(np.float32)
        else:
            raise ValueError(f"no input generator for '{vi.name}'")
    return feeds


def fusec_run(fusec: str, path: str, feeds: dict[str, np.ndarray], work: str, tag: str, n_out: int) -> list[np.ndarray]:
    out = os.path.join(work, tag)
    cmd = [fusec, "run", path, "--device", "cpu", "--allow-newer-opset", "--output-dir", out, "--format", "npy"]
    for name, arr in feeds.items():
        f = os.path.join(work, f"{tag}.{name}.npy")
        np.save(f, arr)
        cmd += ["--input", f"{name}={f}"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"fusec run {os.path.basename(path)} exited {p.returncode}: {p.stderr.strip()}")
    return [np.load(os.path.join(out, f"output_{k}.npy")) for k in range(n_out)]


def compare(got: list[np.ndarray], ref: list[np.ndarray]) -> float:
    """Worst max|got − ref| / max|ref| over the outputs; inf where a shape differs or either side has
    a NaN or infinity (which max|got − ref| would not count)."""
    worst = 0.0
    for g, r in zip(got, ref, strict=True):
        if g.shape != r.shape or not np.all(np.isfinite(g)) or not np.all(np.isfinite(r)):
            return float("inf")
        worst = max(worst, float(np.abs(g.astype(np.float64) - r).max()) / max(float(np.abs(r).max()), 1e-6))
    return worst


def ort_session(path: str) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])


def check(fusec: str, path: str, work: str) -> list[str]:
    """Problems with one model ([] when it passes)."""
    name = os.path.splitext(os.path.basename(path))[0]
    model = onnx.load(path)
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    domain = "" if opset >= 23 else "ai.fusec"
    opt = os.path.join(work, f"{name}.opt.onnx")
    report = os.path.join(work, f"{name}.optimize.json")
    p = subprocess.run([fusec, "optimize", path, "--batch", str(BATCH), "--allow-newer-opset", "-o", opt,
                        "--report", report], capture_output=True, text=True)
    if p.returncode != 0:
        return [f"optimize exited {p.returncode}: {p.stderr.strip()}"]
    fused = onnx.load(opt)
    problems = []
    if name in CLASSIFIERS:
        with open(report) as f:
            moved = {n for r in json.load(f)["rewrites"] if r["pass"] == "select_rows_early" for n in r["replaced"]}
        want = CLASSIFIERS[name](LAYERS - 1)
        if not want <= moved:
            problems.append(f"the [CLS] Gather did not move above {sorted(want - moved)}")
    attns = [n for n in fused.graph.node if n.op_type == "Attention"]
    n_packed = sum(is_packed(n) for n in attns)
    n_attn = sum(n.domain == domain or is_packed(n) for n in attns)
    if n_attn != LAYERS:
        problems.append(f"{n_attn} {domain or 'ai.onnx'} (or packed ai.fusec) Attention nodes for {LAYERS} layers")
    if n_packed != (LAYERS if name in PACKED else 0):
        problems.append(f"{n_packed} of {len(attns)} Attention nodes read packed QKV")
    if any(n.op_type == "Softmax" for n in fused.graph.node):
        problems.append("a Softmax is left")
    n_rotary = sum(n.op_type == "Rotary" and n.domain == "ai.fusec" for n in fused.graph.node)
    if n_rotary != LAYERS * ROTARY.get(name, 0):
        problems.append(f"{n_rotary} ai.fusec Rotary nodes for {LAYERS} layers")
    if name in THREE_D_ONLY and any(n.op_type == "Transpose" for n in fused.graph.node):
        problems.append("a Transpose is left (the 3-D attention reads the per-head tensors through views)")
    n_inside = sum(len(n.input) == 6 and n.input[4] != "" and n.input[5] != "" for n in attns)
    if n_inside != (LAYERS if name in ROTATED_INSIDE else 0):
        problems.append(f"{n_inside} of {len(attns)} Attention nodes rotate Q and K themselves")
    if (name in ROTARY or name in ROTATED_INSIDE) and any(n.op_type in ("Neg", "Concat", "Slice")
                                                          for n in fused.graph.node):
        problems.append("a piece of the rotary embedding (Neg, Concat, Slice) is left")

    feeds = feeds_for(model, seed=5)
    ref = [np.asarray(r, np.float64) for r in ort_session(path).run(None, feeds)]
    for tag, m in (("original", path), ("optimized", opt)):
        err = compare(fusec_run(fusec, m, feeds, work, f"{name}.{tag}", len(ref)), ref)
        if err > TOL:
            problems.append(f"fusec on the {tag} model differs from onnxruntime: rel err {err:.3e}")
    if opset >= 23:
        port = os.path.join(work, f"{name}.portable.onnx")
        p = subprocess.run([fusec, "optimize", path, "--batch", str(BATCH), "--allow-newer-opset", "--portable",
                            "-o", port], capture_output=True, text=True)
        if p.returncode != 0:
            problems.append(f"optimize --portable exited {p.returncode}: {p.stderr.strip()}")
        else:
            pm = onnx.load(port)
            if sum(n.op_type == "Attention" for n in pm.graph.node) != LAYERS:
                problems.append("--portable did not keep the standard Attention")
            err = compare(ort_session(port).run(None, feeds), ref)
            if err > TOL:
                problems.append(f"onnxruntime on the --portable model differs: rel err {err:.3e}")
            err = compare([np.asarray(x) for x in ReferenceEvaluator(pm).run(None, feeds)], ref)
            if err > TOL:
                problems.append(f"onnx.reference on the --portable model differs: rel err {err:.3e}")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fusec", required=True)
    args = ap.parse_args()
    failed = 0
    with tempfile.TemporaryDirectory() as work:
        subprocess.run([sys.executable, GENERATOR, "--out", work], check=True, capture_output=True)
        models = sorted(f for f in os.listdir(work) if f.endswith(".onnx"))
        for f in models:
            problems = check(args.fusec, os.path.join(work, f), work)
            print(f"{f[:-5]:<16} {'ok' if not problems else 'FAIL: ' + '; '.join(problems)}")
            failed += bool(problems)
    print(f"check_attention_models: {len(models) - failed}/{len(models)} models fused and equal")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
