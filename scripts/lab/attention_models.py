#!/usr/bin/env python3
"""Writes single-node ONNX models of the zoo's attention shapes (opset-23 Attention, 4-D fp32 Q, K,
V of [B, H, S, D]), so the attention tuner's race can be timed alone, apart from a model:
    python3 scripts/lab/attention_models.py OUT_DIR
    FUSEC_ATTN_TRACE=1 fusec bench OUT_DIR/vit.onnx --batch 16 --precision fp16 --iterations 5
prints "attention tune ...: cuDNN SDPA X ms, tensor-core kernel Y ms <- chosen" (on a cold tuning
cache: rm -rf ~/.cache/fusec). bert: [16, 12, 128, 64] with a [16, 1, 1, 128] additive mask;
vit: [16, 12, 197, 64], no mask; llama: Q [16, 32, 128, 64], K and V [16, 8, 128, 64] (GQA) with a
full [16, 1, 128, 128] additive mask (bench feeds it random values, so no key tile is masked);
llama_causal: the same with is_causal=1 (the causal half of Llama's mask taken out of it);
llama_row_causal: Llama's shapes with a [16, 1, 1, 128] row mask and is_causal=1 (the mask split into
its causal and padding halves); gpt2: [16, 12, 128, 64] with a full mask; gpt2_row_causal: the
same split as llama_row_causal. The packed forms with rotary tables (fuse_rotary_attention's: ai.fusec
Attention(QKV, "", "", "", cos, sin), causal, GQA 32/8, [1, S, 1, D] tables), to time the tensor-core
kernel rotating as it loads against the rotary kernel then cuDNN's SDPA: llama_rope (batch 16,
seq 128, D 64: the zoo's Llama's shapes), llama_rope_mask (the same with Llama's full [16, 1, 128,
128] mask instead of is_causal: the zoo's Llama's attention as it runs), llama_rope_2k (batch 2, seq 2048, D 64) and llama_rope_2k_d128
(batch 2, seq 2048, D 128)."""
import math
import os
import sys

import onnx
from onnx import TensorProto, helper


def make(path: str, b: int, h: int, s: int, d: int, mask: bool, kv_heads: int = 0, full_mask: bool = False,
         causal: bool = False) -> None:
    kv = kv_heads or h
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [b, h if n == "Q" else kv, s, d]) for n in "QKV"]
    names = ["Q", "K", "V"]
    if mask:
        ins.append(helper.make_tensor_value_info("M", TensorProto.FLOAT, [b, 1, s if full_mask else 1, s]))
        names.append("M")
    out = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [b, h, s, d])
    node = helper.make_node("Attention", names, ["Y"], is_causal=int(causal))
    graph = helper.make_graph([node], os.path.basename(path), ins, [out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    model.ir_version = 10
    onnx.save(model, path)


def make_packed_rotary(path: str, b: int, s: int, hq: int, hkv: int, d: int, full_mask: bool = False) -> None:
    w = (hq + 2 * hkv) * d
    qkv = helper.make_tensor_value_info("QKV", TensorProto.FLOAT, [b, s, w])
    ins = [qkv]
    if full_mask:
        ins.append(helper.make_tensor_value_info("M", TensorProto.FLOAT, [b, 1, s, s]))
    out = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [b, s, hq * d])
    # Llama's tables: cos/sin of position x inverse frequency, the half repeated.
    inv = [10000.0 ** (-2.0 * i / d) for i in range(d // 2)]
    angles = [p * f for p in range(s) for f in inv + inv]
    cos = helper.make_tensor("cos", TensorProto.FLOAT, [1, s, 1, d], [math.cos(a) for a in angles])
    sin = helper.make_tensor("sin", TensorProto.FLOAT, [1, s, 1, d], [math.sin(a) for a in angles])
    node = helper.make_node("Attention", ["QKV", "", "", "M" if full_mask else "", "cos", "sin"], ["Y"],
                            domain="ai.fusec", is_causal=int(not full_mask), q_num_heads=hq, kv_num_heads=hkv)
    graph = helper.make_graph([node], os.path.basename(path), ins, [out], initializer=[cos, sin])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.fusec", 1)])
    model.ir_version = 10
    onnx.save(model, path)


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    os.makedirs(sys.argv[1], exist_ok=True)
    make(os.path.join(sys.argv[1], "bert.onnx"), 16, 12, 128, 64, mask=True)
    make(os.path.join(sys.argv[1], "vit.onnx"), 16, 12, 197, 64, mask=False)
    make(os.path.join(sys.argv[1], "llama.onnx"), 16, 32, 128, 64, mask=True, kv_heads=8, full_mask=True)
    make(os.path.join(sys.argv[1], "llama_causal.onnx"), 16, 32, 128, 64, mask=True, kv_heads=8, full_mask=True,
         causal=True)
    make(os.path.join(sys.argv[1], "llama_row_causal.onnx"), 16, 32, 128, 64, mask=True, kv_heads=8, causal=True)
    make(os.path.join(sys.argv[1], "gpt2.onnx"), 16, 12, 128, 64, mask=True, full_mask=True)
    make(os.path.join(sys.argv[1], "gpt2_row_causal.onnx"), 16, 12, 128, 64, mask=True, causal=True)
    make_packed_rotary(os.path.join(sys.argv[1], "llama_rope.onnx"), 16, 128, 32, 8, 64)
    make_packed_rotary(os.path.join(sys.argv[1], "llama_rope_mask.onnx"), 16, 128, 32, 8, 64, full_mask=True)
    make_packed_rotary(os.path.join(sys.argv[1], "llama_rope_2k.onnx"), 2, 2048, 32, 8, 64)
    make_packed_rotary(os.path.join(sys.argv[1], "llama_rope_2k_d128.onnx"), 2, 2048, 32, 8, 128)
    return 0


if __name__ == "__main__":
    sys.exit(main())
