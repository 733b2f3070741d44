#!/usr/bin/env python3
"""Writes a BERT-style encoder at scale, the way the legacy PyTorch exporter writes one: decomposed
LayerNorm (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add), Erf GELU, MatMul + Add
linears, weights in one external-data file at unaligned offsets (onnx's own writer pads nothing).
Weights are random and streamed to the data file tensor by tensor, so a 13 GiB model needs little
memory to make.

    make_scale_model.py --size 1.27b --out build/scale          # -> bert_1.27b.onnx (+ .data)
    sizes: 108m (BERT-base), 334m (BERT-large), 1.27b, 7b-fp16 (h 4096, 32 layers, fp16)
"""
from __future__ import annotations

import argparse
import math
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from generate_models import IR_VERSION, OPSET, Builder  # noqa: E402

# name: (vocab, hidden, heads, layers, ffn, sequence, dtype)
SIZES = {
    "108m": (30522, 768, 12, 12, 3072, 128, np.float32),
    "334m": (30522, 1024, 16, 24, 4096, 128, np.float32),
    "1.27b": (30522, 2048, 16, 24, 8192, 128, np.float32),
    "7b-fp16": (32000, 4096, 32, 32, 16384, 128, np.float16),
}


class StreamingBuilder(Builder):
    """Builder whose tensors of 1 KiB or more go straight to the external-data file."""

    def __init__(self, name: str, seed: int, data_path: str, dtype):
        super().__init__(name, seed)
        self.data = open(data_path, "wb")
        self.location = os.path.basename(data_path)
        self.dtype = np.dtype(dtype)
        self.params = 0

    def normal(self, shape, std: float) -> np.ndarray:
        return self.rng.standard_normal(shape, dtype=np.float32) * np.float32(std)

    def uniform(self, shape, lo: float, hi: float) -> np.ndarray:
        return self.rng.random(shape, dtype=np.float32) * np.float32(hi - lo) + np.float32(lo)

    def init(self, base: str, array: np.ndarray) -> str:
        name = self.unique(base)
        if array.dtype == np.float32:
            array = array.astype(self.dtype, copy=False)
        array = np.ascontiguousarray(array)
        self.params += array.size
        if array.nbytes < 1024:
            self.inits.append(numpy_helper.from_array(array, name))
            return name
        t = TensorProto(name=name, data_type=helper.np_dtype_to_tensor_dtype(array.dtype), dims=array.shape)
        t.data_location = TensorProto.EXTERNAL
        offset = self.data.tell()
        self.data.write(array.tobytes())
        for k, v in (("location", self.location), ("offset", str(offset)), ("length", str(array.nbytes))):
            e = t.external_data.add()
            e.key, e.value = k, v
        self.inits.append(t)
        return name


def build(size: str, out_dir: str) -> str:
    vocab, hidden, heads, layers, ffn, seq, dtype = SIZES[size]
    head_dim = hidden // heads
    path = os.path.join(out_dir, f"bert_{size}.onnx")
    b = StreamingBuilder(f"bert_{size}", 7, path + ".data", dtype)
    tok = b.init("embeddings.word", b.normal((vocab, hidden), 1.0))
    pos = b.init("embeddings.position", b.normal((seq, hidden), 0.5))
    x = b.node("Gather", [tok, "input_ids"], "embeddings.gather", axis=0)
    x = b.node("Add", [x, pos], "embeddings.add_position")
    x = b.layernorm_decomposed(x, hidden, "embeddings.ln")
    to_heads = b.const("shape_to_heads", np.array([0, 0, heads, head_dim], np.int64))
    from_heads = b.const("shape_from_heads", np.array([0, 0, hidden], np.int64))
    sqrt_d = b.const("const_sqrt_head_dim", np.array(math.sqrt(head_dim), np.float32))
    for i in range(layers):
        p = f"encoder.{i}"
        q, k, v = (b.linear(x, hidden, hidden, f"{p}.attn.{n}") for n in "qkv")
        q = b.node("Transpose", [b.node("Reshape", [q, to_heads], f"{p}.attn.q_reshape")], f"{p}.attn.q_t", perm=[0, 2, 1, 3])
        k = b.node("Transpose", [b.node("Reshape", [k, to_heads], f"{p}.attn.k_reshape")], f"{p}.attn.k_t", perm=[0, 2, 3, 1])
        v = b.node("Transpose", [b.node("Reshape", [v, to_heads], f"{p}.attn.v_reshape")], f"{p}.attn.v_t", perm=[0, 2, 1, 3])
        s = b.node("Softmax", [b.node("Div", [b.node("MatMul", [q, k], f"{p}.attn.scores"), sqrt_d], f"{p}.attn.scale")],
                   f"{p}.attn.softmax", axis=-1)
        c = b.node("Transpose", [b.node("MatMul", [s, v], f"{p}.attn.context")], f"{p}.attn.context_t", perm=[0, 2, 1, 3])
        c = b.node("Reshape", [c, from_heads], f"{p}.attn.context_reshape")
        x = b.node("Add", [b.linear(c, hidden, hidden, f"{p}.attn.out"), x], f"{p}.attn.residual")
        x = b.layernorm_decomposed(x, hidden, f"{p}.attn.ln")
        f = b.linear(b.gelu_erf(b.linear(x, hidden, ffn, f"{p}.ffn.up"), f"{p}.ffn.gelu"), ffn, hidden, f"{p}.ffn.down")
        x = b.layernorm_decomposed(b.node("Add", [f, x], f"{p}.ffn.residual"), hidden, f"{p}.ffn.ln")
    x = b.name_output(x, "last_hidden_state")
    b.data.close()
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    graph = helper.make_graph(b.nodes, b.name, [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["N", seq])],
                              [helper.make_tensor_value_info(x, elem, ["N", seq, hidden])], initializer=b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION,
                              producer_name="fusec scripts/make_scale_model.py",
                              doc_string=f"BERT-style encoder {size}: {b.params} parameters")
    onnx.save(model, path)  # the graph only: every large tensor is already in the .data file
    print(f"{path}: {b.params / 1e6:.1f}M parameters, {os.path.getsize(path + '.data') / 2**30:.2f} GiB of weights")
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", required=True, choices=sorted(SIZES))
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    build(args.size, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
