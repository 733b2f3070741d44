#!/usr/bin/env python3
"""Deterministic generator for fusec's test models (ONNX opset 17, IR version 8).

    generate_models.py --out models --size small            # the committed small models
    generate_models.py --out models/full --size full        # real-size models (git-ignored)
    generate_models.py --out models --size small --only bert

Models (structure documented in models/README.md):
  resnet50     ResNet-50 v1.5: Conv (no bias) + BatchNormalization everywhere, Relu, residual Add,
               MaxPool stem, GlobalAveragePool, Flatten, Gemm.            input  "input" f32 [N,3,H,W]
  bert         BERT-style encoder: Gather embeddings, decomposed LayerNorm, multi-head attention
               with Reshape/Transpose, Softmax, erf-GELU written as Div/Erf/Add/Mul/Mul.
                                                                          input  "input_ids" i64 [N,S]
  mlp          24 x (Linear -> LayerNormalization -> erf-GELU -> Dropout), Linear, Relu, Linear.
                                                                          input  "x" f32 [N,hidden]
  mobilenetv2  MobileNetV2 inverted residuals: 1x1 expand Conv+BN+Clip(0,6), 3x3 depthwise
               Conv+BN+Clip, 1x1 project Conv+BN, residual Add; GlobalAveragePool, Flatten, Gemm.
                                                                          input  "input" f32 [N,3,H,W]

Weights come from numpy.random.default_rng(seed) with a fixed seed per model; initialisation is
He/Xavier-scaled and BatchNormalization statistics are near identity, so activations stay O(1).
The same arguments always produce byte-identical files.

Every generated model is checked with onnx.checker.check_model (full_check, i.e. with shape
inference) and run once in ONNX Runtime (CPU) at batch 2 on seeded random inputs; any failure, a
non-finite output, or an output whose magnitude is far from O(1) stops the generator with an error.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8  # the IR version that goes with opset 17
PRODUCER = "fusec scripts/generate_models.py"


class Builder:
    """Collects nodes and initializers; gives every node and value a readable unique name."""

    def __init__(self, name: str, seed: int):
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._names: set[str] = set()
        self._consts: dict[tuple, str] = {}

    def unique(self, base: str) -> str:
        name, k = base, 1
        while name in self._names:
            k += 1
            name = f"{base}_{k}"
        self._names.add(name)
        return name

    def init(self, base: str, array: np.ndarray) -> str:
        name = self.unique(base)
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def const(self, base: str, array: np.ndarray) -> str:
        """A shared constant initializer (scalars such as 0, 6, 2, eps): stored once per value."""
        array = np.asarray(array)
        key = (array.dtype.str, array.shape, array.tobytes())
        if key not in self._consts:
            self._consts[key] = self.init(base, array)
        return self._consts[key]

    def node(self, op: str, inputs: list[str], name: str, n_out: int = 1, **attrs) -> str | list[str]:
        node_name = self.unique(name)
        outs = [node_name if n_out == 1 else f"{node_name}_out{i}" for i in range(n_out)]
        for o in outs:
            if o != node_name:
                self._names.add(o)
        self.nodes.append(helper.make_node(op, inputs, outs, name=node_name, **attrs))
        return outs[0] if n_out == 1 else outs

    def name_output(self, value: str, name: str) -> str:
        """Gives a graph output a stable name (instead of an Identity node): renames `value`, which
        must be produced by a node and consumed by none."""
        assert not any(value in n.input for n in self.nodes), f"{value} is consumed"
        producer = next(n for n in self.nodes if value in n.output)
        producer.output[list(producer.output).index(value)] = name
        self._names.add(name)
        return name

    # ---- weights -------------------------------------------------------------------------------
    def normal(self, shape, std: float) -> np.ndarray:
        return (self.rng.standard_normal(shape) * std).astype(np.float32)

    def uniform(self, shape, lo: float, hi: float) -> np.ndarray:
        return self.rng.uniform(lo, hi, shape).astype(np.float32)

    # ---- layers --------------------------------------------------------------------------------
    def conv_bn(self, x: str, cin: int, cout: int, k: int, stride: int, name: str, group: int = 1,
                gamma: float = 1.0) -> str:
        """Conv (no bias) followed by BatchNormalization with near-identity statistics."""
        fan_in = (cin // group) * k * k
        w = self.init(f"{name}.weight", self.normal((cout, cin // group, k, k), math.sqrt(2.0 / fan_in)))
        pad = k // 2
        y = self.node("Conv", [x, w], f"{name}", kernel_shape=[k, k], strides=[stride, stride],
                      pads=[pad, pad, pad, pad], dilations=[1, 1], group=group)
        return self.bn(y, cout, f"{name}.bn", gamma)

    def bn(self, x: str, c: int, name: str, gamma: float = 1.0) -> str:
        scale = self.init(f"{name}.scale", gamma * self.uniform(c, 0.9, 1.1))
        bias = self.init(f"{name}.bias", self.uniform(c, -0.1, 0.1))
        mean = self.init(f"{name}.mean", self.uniform(c, -0.1, 0.1))
        var = self.init(f"{name}.var", self.uniform(c, 0.9, 1.1))
        return self.node("BatchNormalization", [x, scale, bias, mean, var], name, epsilon=1e-5, momentum=0.9)

    def linear(self, x: str, fin: int, fout: int, name: str, std: float | None = None) -> str:
        """Linear as MatMul + Add(bias); weight stored [in, out]."""
        std = math.sqrt(1.0 / fin) if std is None else std
        w = self.init(f"{name}.weight", self.normal((fin, fout), std))
        b = self.init(f"{name}.bias", self.uniform(fout, -0.1, 0.1))
        y = self.node("MatMul", [x, w], f"{name}.matmul")
        return self.node("Add", [y, b], f"{name}.add")

    def gemm(self, x: str, fin: int, fout: int, name: str) -> str:
        w = self.init(f"{name}.weight", self.normal((fout, fin), math.sqrt(1.0 / fin)))
        b = self.init(f"{name}.bias", self.uniform(fout, -0.1, 0.1))
        return self.node("Gemm", [x, w, b], name, alpha=1.0, beta=1.0, transB=1)

    def gelu_erf(self, x: str, name: str) -> str:
        """x * 0.5 * (1 + erf(x / sqrt(2))) as Div, Erf, Add, Mul, Mul (the form exporters write)."""
        d = self.node("Div", [x, self.const("const_sqrt2", np.array(1.4142135, np.float32))], f"{name}.div")
        e = self.node("Erf", [d], f"{name}.erf")
        a = self.node("Add", [e, self.const("const_one", np.array(1.0, np.float32))], f"{name}.add")
        m = self.node("Mul", [x, a], f"{name}.mul")
        return self.node("Mul", [m, self.const("const_half", np.array(0.5, np.float32))], f"{name}.mul_half")

    def layernorm_decomposed(self, x: str, hidden: int, name: str, eps: float = 1e-12) -> str:
        """ReduceMean, Sub, Pow(2), ReduceMean, Add(eps), Sqrt, Div, Mul(gamma), Add(beta)."""
        gamma = self.init(f"{name}.gamma", self.uniform(hidden, 0.9, 1.1))
        beta = self.init(f"{name}.beta", self.uniform(hidden, -0.1, 0.1))
        mean = self.node("ReduceMean", [x], f"{name}.mean", axes=[-1], keepdims=1)
        centered = self.node("Sub", [x, mean], f"{name}.sub")
        sq = self.node("Pow", [centered, self.const("const_two", np.array(2.0, np.float32))], f"{name}.pow")
        var = self.node("ReduceMean", [sq], f"{name}.var", axes=[-1], keepdims=1)
        var_eps = self.node("Add", [var, self.const(f"const_eps", np.array(eps, np.float32))], f"{name}.add_eps")
        std = self.node("Sqrt", [var_eps], f"{name}.sqrt")
        normed = self.node("Div", [centered, std], f"{name}.div")
        scaled = self.node("Mul", [normed, gamma], f"{name}.mul_gamma")
        return self.node("Add", [scaled, beta], f"{name}.add_beta")

    def finish(self, inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
               doc: str) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, self.name, inputs, outputs, initializer=self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name=PRODUCER, ir_version=IR_VERSION, doc_string=doc)
        return model


# ---- ResNet-50 --------------------------------------------------------------------------------

def resnet50(size: str) -> onnx.ModelProto:
    full = size == "full"
    base, hw, classes = (64, 224, 1000) if full else (4, 32, 100)
    b = Builder("resnet50" if full else "resnet50_small", seed=50)
    x = "input"
    y = b.conv_bn(x, 3, base, 7, 2, "stem.conv")
    y = b.node("Relu", [y], "stem.relu")
    y = b.node("MaxPool", [y], "stem.maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = base
    for stage, (blocks, mult, stride) in enumerate(zip([3, 4, 6, 3], [1, 2, 4, 8], [1, 2, 2, 2]), start=1):
        planes = base * mult
        for blk in range(blocks):
            s = stride if blk == 0 else 1
            p = f"layer{stage}.{blk}"
            h = b.node("Relu", [b.conv_bn(y, cin, planes, 1, 1, f"{p}.conv1")], f"{p}.relu1")
            h = b.node("Relu", [b.conv_bn(h, planes, planes, 3, s, f"{p}.conv2")], f"{p}.relu2")
            # A damped last BN keeps the residual sum O(1) through 16 blocks (cf. zero-init-residual).
            h = b.conv_bn(h, planes, planes * 4, 1, 1, f"{p}.conv3", gamma=0.3)
            shortcut = y
            if s != 1 or cin != planes * 4:
                shortcut = b.conv_bn(y, cin, planes * 4, 1, s, f"{p}.downsample")
            y = b.node("Relu", [b.node("Add", [h, shortcut], f"{p}.add")], f"{p}.relu3")
            cin = planes * 4
    y = b.node("GlobalAveragePool", [y], "avgpool")
    y = b.node("Flatten", [y], "flatten", axis=1)
    y = b.gemm(y, cin, classes, "fc")
    y = b.name_output(y, "output")
    return b.finish(
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, hw, hw])],
        [helper.make_tensor_value_info(y, TensorProto.FLOAT, ["N", classes])],
        f"ResNet-50 v1.5 ({size}): base width {base}, {hw}x{hw} input, {classes} classes")


# ---- BERT encoder -----------------------------------------------------------------------------

def bert(size: str) -> onnx.ModelProto:
    full = size == "full"
    vocab, hidden, heads, layers, seq = (30522, 768, 12, 12, 128) if full else (100, 64, 4, 2, 16)
    ffn, head_dim = 4 * hidden, hidden // heads
    b = Builder("bert" if full else "bert_small", seed=7)
    tok = b.init("embeddings.word", b.normal((vocab, hidden), 1.0))
    pos = b.init("embeddings.position", b.normal((seq, hidden), 0.5))
    x = b.node("Gather", [tok, "input_ids"], "embeddings.gather", axis=0)  # [N,S,H]
    x = b.node("Add", [x, pos], "embeddings.add_position")
    x = b.layernorm_decomposed(x, hidden, "embeddings.ln")
    to_heads = b.const("shape_to_heads", np.array([0, 0, heads, head_dim], np.int64))
    from_heads = b.const("shape_from_heads", np.array([0, 0, hidden], np.int64))
    sqrt_d = b.const("const_sqrt_head_dim", np.array(math.sqrt(head_dim), np.float32))
    for i in range(layers):
        p = f"encoder.{i}"
        q = b.linear(x, hidden, hidden, f"{p}.attn.q")
        k = b.linear(x, hidden, hidden, f"{p}.attn.k")
        v = b.linear(x, hidden, hidden, f"{p}.attn.v")
        q = b.node("Reshape", [q, to_heads], f"{p}.attn.q_reshape", allowzero=0)  # [N,S,h,d]
        k = b.node("Reshape", [k, to_heads], f"{p}.attn.k_reshape", allowzero=0)
        v = b.node("Reshape", [v, to_heads], f"{p}.attn.v_reshape", allowzero=0)
        q = b.node("Transpose", [q], f"{p}.attn.q_transpose", perm=[0, 2, 1, 3])  # [N,h,S,d]
        k = b.node("Transpose", [k], f"{p}.attn.k_transpose", perm=[0, 2, 3, 1])  # [N,h,d,S]
        v = b.node("Transpose", [v], f"{p}.attn.v_transpose", perm=[0, 2, 1, 3])  # [N,h,S,d]
        s = b.node("MatMul", [q, k], f"{p}.attn.scores")  # [N,h,S,S]
        s = b.node("Div", [s, sqrt_d], f"{p}.attn.scale")
        s = b.node("Softmax", [s], f"{p}.attn.softmax", axis=-1)
        c = b.node("MatMul", [s, v], f"{p}.attn.context")  # [N,h,S,d]
        c = b.node("Transpose", [c], f"{p}.attn.context_transpose", perm=[0, 2, 1, 3])  # [N,S,h,d]
        c = b.node("Reshape", [c, from_heads], f"{p}.attn.context_reshape", allowzero=0)  # [N,S,H]
        o = b.linear(c, hidden, hidden, f"{p}.attn.out")
        x = b.node("Add", [o, x], f"{p}.attn.residual")
        x = b.layernorm_decomposed(x, hidden, f"{p}.attn.ln")
        f = b.linear(x, hidden, ffn, f"{p}.ffn.up")
        f = b.gelu_erf(f, f"{p}.ffn.gelu")
        f = b.linear(f, ffn, hidden, f"{p}.ffn.down")
        x = b.node("Add", [f, x], f"{p}.ffn.residual")
        x = b.layernorm_decomposed(x, hidden, f"{p}.ffn.ln")
    x = b.name_output(x, "last_hidden_state")
    return b.finish(
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["N", seq])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["N", seq, hidden])],
        f"BERT-style encoder ({size}): {layers} layers, hidden {hidden}, {heads} heads, "
        f"sequence {seq}, vocab {vocab}")


# ---- MLP --------------------------------------------------------------------------------------

def mlp(size: str) -> onnx.ModelProto:
    full = size == "full"
    hidden, mid, classes, depth = (1024, 512, 1000, 24) if full else (64, 32, 10, 24)
    b = Builder("mlp" if full else "mlp_small", seed=24)
    x = "x"
    for i in range(depth):
        p = f"block{i}"
        x = b.linear(x, hidden, hidden, f"{p}.linear")
        gamma = b.init(f"{p}.ln.gamma", b.uniform(hidden, 0.9, 1.1))
        beta = b.init(f"{p}.ln.beta", b.uniform(hidden, -0.1, 0.1))
        x = b.node("LayerNormalization", [x, gamma, beta], f"{p}.ln", axis=-1, epsilon=1e-5)
        x = b.gelu_erf(x, f"{p}.gelu")
        x = b.node("Dropout", [x], f"{p}.dropout")  # inference: identity
    x = b.linear(x, hidden, mid, "head.linear1", std=math.sqrt(2.0 / hidden))
    x = b.node("Relu", [x], "head.relu")
    x = b.linear(x, mid, classes, "head.linear2")
    x = b.name_output(x, "y")
    return b.finish(
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", hidden])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["N", classes])],
        f"MLP ({size}): {depth} x (Linear {hidden} -> LayerNormalization -> GELU -> Dropout), "
        f"Linear {mid}, Relu, Linear {classes}")


# ---- MobileNetV2 ------------------------------------------------------------------------------

def make_divisible(v: float, divisor: int = 8) -> int:
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


def mobilenetv2(size: str) -> onnx.ModelProto:
    full = size == "full"
    # t (expansion), c (channels), n (repeats), s (stride of the first)
    settings = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 3, 2], [6, 64, 4, 2], [6, 96, 3, 1], [6, 160, 3, 2],
                [6, 320, 1, 1]]
    if full:
        width, hw, classes, last = 1.0, 224, 1000, 1280
    else:
        width, hw, classes, last = 0.25, 32, 100, 320
        for row, n in zip(settings, [1, 2, 2, 2, 1, 2, 1]):  # fewer blocks; keeps a residual in most stages
            row[2] = n
    b = Builder("mobilenetv2" if full else "mobilenetv2_small", seed=2)
    zero = b.const("const_clip_min", np.array(0.0, np.float32))
    six = b.const("const_clip_max", np.array(6.0, np.float32))

    def relu6(x: str, name: str) -> str:
        return b.node("Clip", [x, zero, six], name)

    cin = make_divisible(32 * width)
    y = relu6(b.conv_bn("input", 3, cin, 3, 2, "features.0.conv"), "features.0.clip")
    idx = 1
    for t, c, n, s in settings:
        cout = make_divisible(c * width)
        for i in range(n):
            stride = s if i == 0 else 1
            p = f"features.{idx}"
            hidden = cin * t
            h = y
            if t != 1:
                h = relu6(b.conv_bn(h, cin, hidden, 1, 1, f"{p}.expand"), f"{p}.expand.clip")
            h = relu6(b.conv_bn(h, hidden, hidden, 3, stride, f"{p}.depthwise", group=hidden), f"{p}.depthwise.clip")
            residual = stride == 1 and cin == cout
            # Linear bottleneck: the project conv has no activation. He-scaling assumes a Relu in
            # front of the next layer, so damp it (and more so on residual branches) to stay O(1).
            h = b.conv_bn(h, hidden, cout, 1, 1, f"{p}.project", gamma=0.5 if residual else 0.7)
            y = b.node("Add", [y, h], f"{p}.add") if residual else h
            cin = cout
            idx += 1
    y = relu6(b.conv_bn(y, cin, last, 1, 1, f"features.{idx}.conv"), f"features.{idx}.clip")
    y = b.node("GlobalAveragePool", [y], "avgpool")
    y = b.node("Flatten", [y], "flatten", axis=1)
    y = b.gemm(y, last, classes, "classifier")
    y = b.name_output(y, "output")
    return b.finish(
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, hw, hw])],
        [helper.make_tensor_value_info(y, TensorProto.FLOAT, ["N", classes])],
        f"MobileNetV2 ({size}): width x{width}, {hw}x{hw} input, {classes} classes")


MODELS = {"resnet50": resnet50, "bert": bert, "mlp": mlp, "mobilenetv2": mobilenetv2}


# ---- checks -----------------------------------------------------------------------------------

def random_inputs(model: onnx.ModelProto, batch: int, seed: int = 0) -> dict[str, np.ndarray]:
    """The same convention as tests/models/check_models.py: floats U[-1,1), int64 ids in [0,64)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    inits = {t.name for t in model.graph.initializer}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else batch for d in tt.shape.dim]
        if tt.elem_type == TensorProto.INT64:
            feeds[vi.name] = rng.integers(0, 64, shape, dtype=np.int64)
        else:
            feeds[vi.name] = rng.uniform(-1.0, 1.0, shape).astype(np.float32)
    return feeds


def check(model: onnx.ModelProto, path: str) -> str:
    """checker + ONNX Runtime; returns a one-line summary or raises."""
    import onnxruntime as ort

    onnx.checker.check_model(path, full_check=True)
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    outs = sess.run(None, random_inputs(model, batch=2))
    parts = []
    for meta, out in zip(sess.get_outputs(), outs):
        if not np.all(np.isfinite(out)):
            raise RuntimeError(f"{path}: output '{meta.name}' has non-finite values")
        amax, std = float(np.abs(out).max()), float(out.std())
        if not (1e-2 <= amax <= 1e3):
            raise RuntimeError(f"{path}: output '{meta.name}' max |y| = {amax:.3g}: activations are not O(1)")
        parts.append(f"{meta.name}{list(out.shape)} max|y|={amax:.3g} std={std:.3g}")
    return "; ".join(parts)


def save(model: onnx.ModelProto, path: str) -> None:
    data = model.SerializeToString()
    if len(data) >= 2**31:
        raise RuntimeError(f"{path}: {len(data)} bytes is over protobuf's 2 GiB limit")
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output folder (models/ for small, models/full/ for full)")
    ap.add_argument("--size", choices=["small", "full"], default="small")
    ap.add_argument("--only", choices=sorted(MODELS), help="generate just this model")
    ap.add_argument("--no-check", action="store_true", help="skip the checker and ONNX Runtime (not advised)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    names = [args.only] if args.only else list(MODELS)
    failed = 0
    for name in names:
        model = MODELS[name](args.size)
        fname = f"{name}_small.onnx" if args.size == "small" else f"{name}.onnx"
        path = os.path.join(args.out, fname)
        save(model, path)
        params = sum(int(np.prod(t.dims)) for t in model.graph.initializer)
        line = f"{path}: {len(model.graph.node)} nodes, {params:,} parameters, {os.path.getsize(path):,} bytes"
        if args.size == "small" and os.path.getsize(path) >= 1 << 20:
            print(f"error: {line}: a small model must stay under 1 MiB", file=sys.stderr)
            failed += 1
            continue
        if not args.no_check:
            try:
                line += "; ORT batch 2: " + check(model, path)
            except Exception as e:  # fail loudly, but report every model
                print(f"error: {path}: {type(e).__name__}: {e}", file=sys.stderr)
                failed += 1
                continue
        print(line)
    print(f"generate_models: {len(names) - failed}/{len(names)} models written and checked"
          + ("" if not failed else f", {failed} FAILED"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
