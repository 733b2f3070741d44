#!/usr/bin/env python3
"""Small transformer models whose attention is written in the op sequences the PyTorch exporters
write, for the attention fusion's model-level test (tests/models/check_attention_models.py).

    make_attention_models.py --out DIR [--only NAME]
    make_attention_models.py --out DIR --only bert_legacy --layers 12 --hidden 768 --heads 12 \
                             --seq 128 --vocab 30522       (BERT-base sized, for CPU benchmarks)

Each model has 2 layers, hidden 32, 4 query heads of 8, sequence 8 (ViT: 16 patches + CLS), numpy
weights from a fixed seed, so the same call writes the same bytes. The size options change those
numbers (the FFN is 4 x hidden; Llama keeps half as many kv heads as query heads); without them the
output is what the tests expect. Per family two forms:

  *_legacy   torch.onnx.export(..., dynamo=False), opset 17: the TorchScript exporter. Views become
             Reshape with targets computed from Shape -> Gather -> Unsqueeze -> Concat (dynamic batch),
             consecutive transposes are merged by its peephole pass (BERT's Kᵀ is one
             Transpose(0,2,3,1)), inference Dropout disappears, eager attention is spelled out.
  *_dynamo   torch.onnx.export(..., dynamo=True), opset 18: static shapes (Reshape targets are
             constants), and torch's scaled_dot_product_attention decomposed as onnxscript's torchlib
             writes it: Mul(Q, √scale), Transpose(K, 0,1,3,2), Mul(Kᵀ, √scale), MatMul, Add(mask),
             Softmax, MatMul; is_causal as Trilu -> Where(== 0, -inf, 0) -> Add.

  bert_*     transformers' BertSelfAttention: MatMul+Add projections, head split, /√D, + extended
             mask from attention_mask (legacy: (1 − m)·−10000 [B,1,1,S], as transformers < 4.30;
             dynamo (BertSdpaSelfAttention): an expanded [B,1,S,S] mask into SDPA).
  vit_*      transformers' ViTSelfAttention (no mask) after a Conv patch embedding and CLS token.
  bert_cls_*, vit_cls_*  with the classification head in place of the last_hidden_state output: a
             Gather(axis 1, index 0) of the last LayerNorm's [CLS] row, then BERT's pooler (Gemm,
             Tanh) and classifier Gemm (BertForSequenceClassification) or ViT's classifier Gemm
             (ViTForImageClassification).
  gpt2_*     transformers' GPT2Attention: Conv1D (Reshape -> Gemm -> Reshape), Split into q/k/v.
             legacy (eager _attn): k.transpose(-1,-2), Div by √D, Where(bias[:, :, Sk−Sq:Sk, :Sk],
             scores, finfo.min) from the sliced causal buffer, + (1 − m)·−10000, Softmax, a no-op
             Cast, MatMul; present key/value are graph outputs (use_cache). dynamo: SDPA is_causal.
  qwen3_*, phi3_*  llama_* with Qwen3's per-head RMSNorm of Q and K before their transposes, and
             with Phi-3's one qkv_proj sliced into Q, K and V.
  gptj_*, phi_*  llama_* rotating only each head's first half (partial rotary, the rest
             concatenated after it): GPT-J's rotate_every_two (pairs (2i, 2i + 1): strided Slices,
             Unsqueeze, Concat, Reshape; tables repeat each frequency in place), and Phi's and
             StableLM's rotate_half.
  llama_*    transformers' LlamaAttention: RMSNorm, bias-free projections, 4 query / 2 kv heads,
             RoPE (rotate_half via Slice/Neg/Concat; cos/sin from position ids), repeat_kv as
             Unsqueeze(2) -> Expand -> Reshape. legacy (eager): MatMul(q, kᵀ)·scaling + a constant
             causal mask (triu of finfo.min), Softmax(dtype float32) + no-op Cast. dynamo (sdpa
             forward): repeat_kv, then SDPA with the causal + padding mask computed from attention_mask.
  mha_*      nn.MultiheadAttention returning its weights (need_weights=True, the default):
             F.multi_head_attention_forward's bmm form over heads folded into the batch
             ([B·H, S, D]); legacy with the key padding mask from attention_mask.
  bert_opset23  bert_dynamo at opset 23 (IR 11): the fusion writes ONNX's own Attention.
  *_sdpa_legacy, *_sdpa_dynamo (bert, gpt2, llama)
             transformers' default sdpa attention with an attention_mask input, as torch 2.11 exports
             it (Model.sdpa_masked): a bool mask [B, 1, S, S] (padding And causal triangle, BERT:
             padding And an all-true column), added as Where(keep, 0, FILL) with FILL = -inf
             (legacy) or -FLT_MAX (dynamo), and torch's safe-softmax guard Where(IsNaN(P), 0, P)
             between Softmax and P·V. Kᵀ as in the forms above (Transpose(0,2,3,1) of the head split
             in legacy BERT/GPT-2; Transpose(0,1,3,2) otherwise): the dynamo exporter's Kᵀ through a
             3-D Reshape/Transpose/Reshape is left to the canonicalization that removes it.

These mimic the exporters' op sequences without needing torch; a model of each family exported
from torch itself is the GPU machine's job (issue 9).
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
from generate_models import Builder  # noqa: E402

LAYERS, HIDDEN, HEADS, HEAD_DIM, SEQ, VOCAB = 2, 32, 4, 8, 8, 64
KV_HEADS = 2  # Llama's grouped-query attention
BATCH = 2     # the dynamo forms' static batch
CLASSES = 5   # vit_cls_*'s classifier
FMIN = float(np.finfo(np.float32).min)
PRODUCER = "fusec scripts/make_attention_models.py"


class Model(Builder):
    """generate_models.Builder plus the shape plumbing each exporter writes."""

    def __init__(self, name: str, seed: int, legacy: bool, opset: int):
        super().__init__(name, seed)
        self.legacy, self.opset = legacy, opset

    def init(self, base: str, array: np.ndarray) -> str:
        """As Builder.init, but a 0-d array stays a scalar (np.ascontiguousarray would make it [1]):
        the exporters' scalars (Gather indices, the √D divisor) are rank 0."""
        array = np.asarray(array)
        name = self.unique(base)
        self.inits.append(numpy_helper.from_array(array if array.ndim == 0 else np.ascontiguousarray(array), name))
        return name

    def i64(self, base: str, values) -> str:
        return self.const(base, np.array(values, np.int64))

    def f32(self, base: str, value) -> str:
        return self.const(base, np.array(value, np.float32))

    def dim(self, x: str, axis: int, name: str) -> str:
        """Shape(x)[axis] as a 1-element int64 tensor (Shape -> Gather -> Unsqueeze), legacy style."""
        s = self.node("Shape", [x], f"{name}.shape")
        g = self.node("Gather", [s, self.i64(f"idx{axis}", axis)], f"{name}.gather", axis=0)
        return self.node("Unsqueeze", [g, self.i64("axes0", [0])], f"{name}.unsqueeze")

    def view(self, x: str, lead_from: str, n_lead: int, tail: list[int], static: list[int], name: str) -> str:
        """x.view(lead..., *tail): legacy computes the leading dims from Shape(lead_from); dynamo
        writes the static target."""
        if self.legacy:
            dims = [self.dim(lead_from, a, f"{name}.dim{a}") for a in range(n_lead)]
            target = self.node("Concat", dims + [self.i64(f"{name}.tail", tail)], f"{name}.target", axis=0)
        else:
            target = self.i64(f"{name}.target", static)
        return self.node("Reshape", [x, target], name)

    def transpose(self, x: str, perm: list[int], name: str) -> str:
        return self.node("Transpose", [x], name, perm=perm)

    def proj(self, x: str, fin: int, fout: int, name: str, bias: bool = True) -> str:
        """nn.Linear: MatMul by the [in, out] weight (+ Add bias); dynamo transposes a stored [out, in]."""
        if self.legacy:
            w = self.init(f"{name}.weight", self.normal((fin, fout), math.sqrt(1.0 / fin)))
        else:
            wt = self.init(f"{name}.weight", self.normal((fout, fin), math.sqrt(1.0 / fin)))
            w = self.transpose(wt, [1, 0], f"{name}.weight_t")
        y = self.node("MatMul", [x, w], f"{name}.matmul")
        if not bias:
            return y
        return self.node("Add", [y, self.init(f"{name}.bias", self.uniform(fout, -0.1, 0.1))], f"{name}.add")

    def layernorm(self, x: str, name: str) -> str:
        g = self.init(f"{name}.weight", self.uniform(HIDDEN, 0.9, 1.1))
        b = self.init(f"{name}.bias", self.uniform(HIDDEN, -0.1, 0.1))
        return self.node("LayerNormalization", [x, g, b], name, axis=-1, epsilon=1e-5)

    def split_heads(self, x: str, lead_from: str, heads: int, seq: int, name: str, transpose: bool = True) -> str:
        """[B, S, H·D] -> view [B, S, H, D] [-> transpose(1, 2) = Transpose(0,2,1,3)]."""
        r = self.view(x, lead_from, 2, [heads, HEAD_DIM], [BATCH, seq, heads, HEAD_DIM], f"{name}.view")
        return self.transpose(r, [0, 2, 1, 3], f"{name}.transpose") if transpose else r

    def merge_heads(self, c: str, lead_from: str, seq: int, name: str) -> str:
        c = self.transpose(c, [0, 2, 1, 3], f"{name}.transpose")
        return self.view(c, lead_from, 2, [HIDDEN], [BATCH, seq, HIDDEN], f"{name}.view")

    def sdpa(self, q: str, k: str, v: str, mask: str | None, causal_seq: int, name: str) -> str:
        """torchlib's aten::scaled_dot_product_attention: √scale on Q and on Kᵀ."""
        sf = self.f32("sdpa_sqrt_scale", math.sqrt(1.0 / math.sqrt(HEAD_DIM)))
        qs = self.node("Mul", [q, sf], f"{name}.q_scaled")
        kt = self.transpose(k, [0, 1, 3, 2], f"{name}.k_transposed")
        ks = self.node("Mul", [kt, sf], f"{name}.k_scaled")
        s = self.node("MatMul", [qs, ks], f"{name}.scores")
        if causal_seq:
            ones = self.node("ConstantOfShape", [self.i64("causal_shape", [causal_seq, causal_seq])], f"{name}.ones",
                             value=helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0]))
            tri = self.node("Trilu", [ones], f"{name}.tril", upper=0)
            zero = self.node("Equal", [tri, self.f32("zero", 0.0)], f"{name}.is_zero")
            mask = self.node("Where", [zero, self.f32("neg_inf", -np.inf), self.f32("zero", 0.0)], f"{name}.causal_mask")
        if mask:
            s = self.node("Add", [s, mask], f"{name}.add_mask")
        p = self.node("Softmax", [s], f"{name}.softmax", axis=-1)
        return self.node("MatMul", [p, v], f"{name}.context")

    def sdpa_masked(self, q: str, kt: str, v: str, keep: str, name: str) -> str:
        """torch's scaled_dot_product_attention with a bool mask, as both exporters write it for
        transformers' sdpa attention with an attention_mask: √scale on Q and on Kᵀ, the mask added as
        Where(keep, 0, FILL), Softmax, then torch's _safe_softmax guard Where(IsNaN(P), 0, P) (a row
        with every key masked gives 0, not NaN), P'·V. FILL is -inf in legacy exports and -FLT_MAX
        (finfo.min) in dynamo ones: there a fully masked row stays finite, its Softmax is uniform,
        and the guard does nothing, so the row averages V."""
        sf = self.f32("sdpa_sqrt_scale", math.sqrt(1.0 / math.sqrt(HEAD_DIM)))
        s = self.node("MatMul", [self.node("Mul", [q, sf], f"{name}.q_scaled"), self.node("Mul", [kt, sf], f"{name}.k_scaled")],
                      f"{name}.scores")
        zero = self.f32("zero", 0.0)
        fill = self.f32("neg_inf", -np.inf) if self.legacy else self.f32("fmin", FMIN)
        mask = self.node("Where", [keep, zero, fill], f"{name}.mask")
        p = self.node("Softmax", [self.node("Add", [s, mask], f"{name}.add_mask")], f"{name}.softmax", axis=-1)
        p = self.node("Where", [self.node("IsNaN", [p], f"{name}.isnan"), zero, p], f"{name}.safe_softmax")
        return self.node("MatMul", [p, v], f"{name}.context")

    def sdpa_keep(self, causal: bool) -> str:
        """The bool mask [B, 1, S, S] transformers builds for sdpa from attention_mask (true: attend):
        the padding mask [B, 1, 1, S] And-ed with the causal triangle, or (BERT) with an all-true query
        column, as both exporters leave it once --batch folds the index plumbing."""
        pad = self.node("Cast", [self.node("Unsqueeze", ["attention_mask", self.i64("axes12", [1, 2])], "mask.unsqueeze")],
                        "mask.to_bool", to=TensorProto.BOOL)
        rows = np.tril(np.ones((SEQ, SEQ), bool)) if causal else np.ones((SEQ, 1), bool)
        return self.node("And", [self.init("mask.rows", rows[None, None]), pad], "mask.keep")

    def finish_model(self, inputs, outputs, doc: str) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, self.name, inputs, outputs, initializer=self.inits)
        ir = 11 if self.opset >= 23 else 8
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)],
                                 producer_name=PRODUCER, ir_version=ir, doc_string=doc)


def batch_dim(m: Model):
    return "batch" if m.legacy else BATCH


# ---- BERT -------------------------------------------------------------------------------------

def bert(form: str, classify: bool = False) -> onnx.ModelProto:
    legacy = form in ("legacy", "sdpa_legacy")
    masked_sdpa = form.startswith("sdpa")
    opset = {"legacy": 17, "dynamo": 18, "opset23": 23, "sdpa_legacy": 17, "sdpa_dynamo": 18}[form]
    m = Model(f"bert_{'cls_' if classify else ''}{form}", seed=11, legacy=legacy, opset=opset)
    tok = m.init("embeddings.word", m.normal((VOCAB, HIDDEN), 1.0))
    pos = m.init("embeddings.position", m.normal((SEQ, HIDDEN), 0.5))
    x = m.node("Gather", [tok, "input_ids"], "embeddings.gather", axis=0)
    x = m.layernorm(m.node("Add", [x, pos], "embeddings.add_position"), "embeddings.ln")
    if masked_sdpa:  # BertSdpaSelfAttention with transformers' bool sdpa mask (see sdpa_masked)
        keep = m.sdpa_keep(causal=False)
    else:  # get_extended_attention_mask: mask[:, None, None, :]
        am = m.node("Unsqueeze", ["attention_mask", m.i64("axes12", [1, 2])], "ext.unsqueeze")
        am = m.node("Cast", [am], "ext.cast", to=TensorProto.FLOAT)
    if masked_sdpa:
        pass
    elif legacy:  # (1.0 - m) * -10000.0  -> [B, 1, 1, S]
        ext = m.node("Mul", [m.node("Sub", [m.f32("one", 1.0), am], "ext.sub"), m.f32("minus_1e4", -10000.0)], "ext.mul")
    else:  # _prepare_4d_attention_mask_for_sdpa: expand to [B, 1, S, S], masked_fill(min)
        am = m.node("Expand", [am, m.i64("ext.shape", [BATCH, 1, SEQ, SEQ])], "ext.expand")
        inv = m.node("Sub", [m.f32("one", 1.0), am], "ext.invert")
        ext = m.node("Where", [m.node("Cast", [inv], "ext.to_bool", to=TensorProto.BOOL), m.f32("fmin", FMIN), inv],
                     "ext.masked_fill")
    for i in range(LAYERS):
        p = f"encoder.{i}.attention"
        q = m.split_heads(m.proj(x, HIDDEN, HIDDEN, f"{p}.query"), x, HEADS, SEQ, f"{p}.q")
        v = m.split_heads(m.proj(x, HIDDEN, HIDDEN, f"{p}.value"), x, HEADS, SEQ, f"{p}.v")
        k_in = m.proj(x, HIDDEN, HIDDEN, f"{p}.key")
        if masked_sdpa:  # Kᵀ: legacy merges the two transposes; dynamo's k.transpose(-2, -1)
            if legacy:
                kt = m.transpose(m.split_heads(k_in, x, HEADS, SEQ, f"{p}.k", transpose=False), [0, 2, 3, 1], f"{p}.k.transpose")
            else:
                kt = m.transpose(m.split_heads(k_in, x, HEADS, SEQ, f"{p}.k"), [0, 1, 3, 2], f"{p}.k_transposed")
            c = m.sdpa_masked(q, kt, v, keep, p)
        elif legacy:  # k.permute(0,2,1,3) then .transpose(-1,-2): the peephole pass merges them
            kt = m.transpose(m.split_heads(k_in, x, HEADS, SEQ, f"{p}.k", transpose=False), [0, 2, 3, 1], f"{p}.k.transpose")
            s = m.node("MatMul", [q, kt], f"{p}.scores")
            s = m.node("Div", [s, m.f32("sqrt_head_dim", math.sqrt(HEAD_DIM))], f"{p}.scale")
            s = m.node("Add", [s, ext], f"{p}.add_mask")
            c = m.node("MatMul", [m.node("Softmax", [s], f"{p}.softmax", axis=-1), v], f"{p}.context")
        else:
            k = m.split_heads(k_in, x, HEADS, SEQ, f"{p}.k")
            c = m.sdpa(q, k, v, ext, 0, p)
        c = m.merge_heads(c, x, SEQ, f"{p}.merge")
        x = m.layernorm(m.node("Add", [m.proj(c, HIDDEN, HIDDEN, f"{p}.output"), x], f"{p}.residual"), f"{p}.ln")
        f = m.gelu_erf(m.proj(x, HIDDEN, 4 * HIDDEN, f"encoder.{i}.intermediate"), f"encoder.{i}.gelu")
        f = m.proj(f, 4 * HIDDEN, HIDDEN, f"encoder.{i}.output")
        x = m.layernorm(m.node("Add", [f, x], f"encoder.{i}.residual"), f"encoder.{i}.ln")
    b = batch_dim(m)
    if classify:  # BertForSequenceClassification: classifier(tanh(pooler.dense(hidden[:, 0])))
        cls = m.node("Gather", [x, m.init("cls_index", np.array(0, np.int64))], "pooler.first_token", axis=1)
        w = m.init("pooler.dense.weight", m.normal((HIDDEN, HIDDEN), math.sqrt(1.0 / HIDDEN)))
        pooled = m.node("Tanh", [m.node("Gemm", [cls, w, m.init("pooler.dense.bias", m.uniform(HIDDEN, -0.1, 0.1))],
                                        "pooler.dense", transB=1)], "pooler.activation")
        w = m.init("classifier.weight", m.normal((CLASSES, HIDDEN), math.sqrt(1.0 / HIDDEN)))
        y = m.name_output(m.node("Gemm", [pooled, w, m.init("classifier.bias", m.uniform(CLASSES, -0.1, 0.1))],
                                 "classifier", transB=1), "logits")
        out = helper.make_tensor_value_info(y, TensorProto.FLOAT, [b, CLASSES])
    else:
        x = m.name_output(x, "last_hidden_state")
        out = helper.make_tensor_value_info(x, TensorProto.FLOAT, [b, SEQ, HIDDEN])
    return m.finish_model(
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [b, SEQ]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [b, SEQ])], [out],
        f"BERT-style {'classifier' if classify else 'encoder'}, attention as torch.onnx {form} writes HF "
        f"BertSelfAttention")


# ---- ViT --------------------------------------------------------------------------------------

def vit(form: str, classify: bool = False) -> onnx.ModelProto:
    legacy = form == "legacy"
    m = Model(f"vit_{'cls_' if classify else ''}{form}", seed=12, legacy=legacy, opset=17 if legacy else 18)
    patches, seq = 16, 17
    w = m.init("patch.weight", m.normal((HIDDEN, 3, 4, 4), math.sqrt(1.0 / 48)))
    e = m.node("Conv", ["pixel_values", w, m.init("patch.bias", m.uniform(HIDDEN, -0.1, 0.1))], "patch.conv",
               kernel_shape=[4, 4], strides=[4, 4])
    e = m.view(e, e, 2, [patches], [BATCH, HIDDEN, patches], "patch.flatten")  # flatten(2)
    e = m.transpose(e, [0, 2, 1], "patch.transpose")
    if legacy:
        cls_shape = m.node("Concat", [m.dim("pixel_values", 0, "cls.dim0"), m.i64("cls.tail", [1, HIDDEN])],
                           "cls.target", axis=0)
    else:
        cls_shape = m.i64("cls.target", [BATCH, 1, HIDDEN])
    cls = m.node("Expand", [m.init("cls_token", m.normal((1, 1, HIDDEN), 0.5)), cls_shape], "cls.expand")
    x = m.node("Concat", [cls, e], "embeddings.concat", axis=1)
    x = m.node("Add", [x, m.init("position_embeddings", m.normal((1, seq, HIDDEN), 0.5))], "embeddings.add_position")
    for i in range(LAYERS):
        p = f"encoder.{i}"
        h = m.layernorm(x, f"{p}.layernorm_before")
        q = m.split_heads(m.proj(h, HIDDEN, HIDDEN, f"{p}.query"), h, HEADS, seq, f"{p}.q")
        v = m.split_heads(m.proj(h, HIDDEN, HIDDEN, f"{p}.value"), h, HEADS, seq, f"{p}.v")
        k_in = m.proj(h, HIDDEN, HIDDEN, f"{p}.key")
        if legacy:
            kt = m.transpose(m.split_heads(k_in, h, HEADS, seq, f"{p}.k", transpose=False), [0, 2, 3, 1], f"{p}.k.transpose")
            s = m.node("Div", [m.node("MatMul", [q, kt], f"{p}.scores"), m.f32("sqrt_head_dim", math.sqrt(HEAD_DIM))],
                       f"{p}.scale")
            c = m.node("MatMul", [m.node("Softmax", [s], f"{p}.softmax", axis=-1), v], f"{p}.context")
        else:
            c = m.sdpa(q, m.split_heads(k_in, h, HEADS, seq, f"{p}.k"), v, None, 0, p)
        c = m.merge_heads(c, h, seq, f"{p}.merge")
        x = m.node("Add", [m.proj(c, HIDDEN, HIDDEN, f"{p}.attn_out"), x], f"{p}.residual1")
        f = m.layernorm(x, f"{p}.layernorm_after")
        f = m.gelu_erf(m.proj(f, HIDDEN, 2 * HIDDEN, f"{p}.intermediate"), f"{p}.gelu")
        x = m.node("Add", [m.proj(f, 2 * HIDDEN, HIDDEN, f"{p}.output"), x], f"{p}.residual2")
    b = batch_dim(m)
    if classify:  # ViTForImageClassification: classifier(sequence_output[:, 0, :]), a Gather of index 0
        cls = m.node("Gather", [m.layernorm(x, "layernorm"), m.init("cls_index", np.array(0, np.int64))], "cls_token",
                     axis=1)
        w = m.init("classifier.weight", m.normal((CLASSES, HIDDEN), math.sqrt(1.0 / HIDDEN)))
        y = m.name_output(m.node("Gemm", [cls, w, m.init("classifier.bias", m.uniform(CLASSES, -0.1, 0.1))],
                                 "classifier", transB=1), "logits")
        out = helper.make_tensor_value_info(y, TensorProto.FLOAT, [b, CLASSES])
    else:
        x = m.name_output(m.layernorm(x, "layernorm"), "last_hidden_state")
        out = helper.make_tensor_value_info(x, TensorProto.FLOAT, [b, seq, HIDDEN])
    return m.finish_model(
        [helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT, [b, 3, 16, 16])], [out],
        f"ViT-style {'classifier' if classify else 'encoder'}, attention as torch.onnx {form} writes HF "
        f"ViTSelfAttention")


# ---- GPT-2 ------------------------------------------------------------------------------------

def gpt2(form: str) -> onnx.ModelProto:
    legacy = form == "legacy"  # eager attention with the cache outputs
    masked_sdpa = form.startswith("sdpa")
    m = Model(f"gpt2_{form}", seed=13, legacy=form in ("legacy", "sdpa_legacy"), opset=17 if form in ("legacy", "sdpa_legacy") else 18)
    max_pos = max(16, SEQ)  # the causal buffer must cover the sequence

    def conv1d(x: str, fin: int, fout: int, name: str) -> str:
        """transformers' Conv1D: x.view(-1, fin) -> addmm (Gemm) -> view(B, S, fout)."""
        flat = m.node("Reshape", [x, m.i64("flat2d", [-1, fin])], f"{name}.flatten")
        w = m.init(f"{name}.weight", m.normal((fin, fout), math.sqrt(1.0 / fin)))
        y = m.node("Gemm", [flat, w, m.init(f"{name}.bias", m.uniform(fout, -0.1, 0.1))], f"{name}.addmm")
        return m.view(y, x, 2, [fout], [BATCH, SEQ, fout], f"{name}.view")

    tok = m.init("wte", m.normal((VOCAB, HIDDEN), 1.0))
    x = m.node("Add", [m.node("Gather", [tok, "input_ids"], "wte.gather", axis=0),
                       m.init("wpe", m.normal((SEQ, HIDDEN), 0.5))], "embeddings")
    outputs = []
    if masked_sdpa:
        keep = m.sdpa_keep(causal=True)
    if legacy:
        am = m.node("Cast", [m.node("Unsqueeze", ["attention_mask", m.i64("axes12", [1, 2])], "ext.unsqueeze")],
                    "ext.cast", to=TensorProto.FLOAT)
        ext = m.node("Mul", [m.node("Sub", [m.f32("one", 1.0), am], "ext.sub"), m.f32("minus_1e4", -10000.0)], "ext.mul")
        bias = m.init("causal_bias", np.tril(np.ones((max_pos, max_pos), bool))[None, None])
    for i in range(LAYERS):
        p = f"h.{i}.attn"
        h = m.layernorm(x, f"h.{i}.ln_1")
        q, k, v = m.node("Split", [conv1d(h, HIDDEN, 3 * HIDDEN, f"{p}.c_attn"), m.i64("split3", [HIDDEN] * 3)],
                         f"{p}.split", n_out=3, axis=2)
        q = m.split_heads(q, h, HEADS, SEQ, f"{p}.q")
        if masked_sdpa and m.legacy:  # Kᵀ: the peephole pass merges permute and transpose(-1, -2)
            kt = m.transpose(m.split_heads(k, h, HEADS, SEQ, f"{p}.k", transpose=False), [0, 2, 3, 1], f"{p}.k.transpose")
        else:
            k = m.split_heads(k, h, HEADS, SEQ, f"{p}.k")
        v = m.split_heads(v, h, HEADS, SEQ, f"{p}.v")
        if masked_sdpa:
            if not m.legacy:
                kt = m.transpose(k, [0, 1, 3, 2], f"{p}.k_transposed")
            c = m.sdpa_masked(q, kt, v, keep, p)
        elif legacy:
            s = m.node("MatMul", [q, m.transpose(k, [0, 1, 3, 2], f"{p}.k_t")], f"{p}.scores")
            s = m.node("Div", [s, m.f32("sqrt_head_dim", math.sqrt(HEAD_DIM))], f"{p}.scale")
            # causal_mask = self.bias[:, :, key_length - query_length : key_length, :key_length]
            q_len = m.dim(q, 2, f"{p}.q_len")
            k_len = m.dim(k, 2, f"{p}.k_len")
            start = m.node("Concat", [m.node("Sub", [k_len, q_len], f"{p}.offset"), m.i64("zero1", [0])],
                           f"{p}.starts", axis=0)
            ends = m.node("Concat", [k_len, k_len], f"{p}.ends", axis=0)
            causal = m.node("Slice", [bias, start, ends, m.i64("axes23", [2, 3])], f"{p}.causal_slice")
            s = m.node("Where", [causal, s, m.f32("mask_value", FMIN)], f"{p}.causal_where")
            s = m.node("Add", [s, ext], f"{p}.add_mask")
            pr = m.node("Cast", [m.node("Softmax", [s], f"{p}.softmax", axis=-1)], f"{p}.type_as_v",
                        to=TensorProto.FLOAT)
            c = m.node("MatMul", [pr, v], f"{p}.context")
            outputs += [m.name_output(m.node("Identity", [k], f"{p}.present_key"), f"present.{i}.key"),
                        m.name_output(m.node("Identity", [v], f"{p}.present_value"), f"present.{i}.value")]
        else:
            c = m.sdpa(q, k, v, None, SEQ, p)
        c = m.merge_heads(c, h, SEQ, f"{p}.merge")
        x = m.node("Add", [conv1d(c, HIDDEN, HIDDEN, f"{p}.c_proj"), x], f"h.{i}.residual1")
        f = m.layernorm(x, f"h.{i}.ln_2")
        f = m.gelu_erf(conv1d(f, HIDDEN, 4 * HIDDEN, f"h.{i}.mlp.c_fc"), f"h.{i}.mlp.act")
        x = m.node("Add", [conv1d(f, 4 * HIDDEN, HIDDEN, f"h.{i}.mlp.c_proj"), x], f"h.{i}.residual2")
    x = m.name_output(m.layernorm(x, "ln_f"), "last_hidden_state")
    b = batch_dim(m)
    ins = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [b, SEQ])]
    if legacy or masked_sdpa:
        ins.append(helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [b, SEQ]))
    outs = [helper.make_tensor_value_info(x, TensorProto.FLOAT, [b, SEQ, HIDDEN])]
    outs += [helper.make_tensor_value_info(o, TensorProto.FLOAT, [b, HEADS, SEQ, HEAD_DIM]) for o in outputs]
    return m.finish_model(ins, outs, f"GPT-2-style decoder, attention as torch.onnx {form} writes HF GPT2Attention")


# ---- Llama ------------------------------------------------------------------------------------

def llama(form: str, variant: str = "llama") -> onnx.ModelProto:
    """variant "qwen3": an RMSNorm over each head of Q and K between the view and the transpose
    (Qwen3's q_norm/k_norm, also Gemma 3's); "phi3": one fused qkv_proj sliced into Q, K and V
    (Phi-3's); "neox": one query_key_value with a bias, viewed [B, S, H, 3·D], transposed and split
    into Q, K and V per head (GPT-NeoX's and Pythia's: every head its own keys, half of each head
    rotated)."""
    legacy = form in ("legacy", "sdpa_legacy")  # the exporter
    eager = form == "legacy"  # eager attention with the causal mask folded to a constant
    masked_sdpa = form.startswith("sdpa")
    m = Model(f"{variant}_{form}", seed=14, legacy=legacy, opset=17 if legacy else 18)
    kv_hidden, half = KV_HEADS * HEAD_DIM, HEAD_DIM // 2

    def rmsnorm(x: str, name: str, width: int = HIDDEN) -> str:
        sq = m.node("Pow", [x, m.f32("two", 2.0)], f"{name}.pow")
        if legacy:
            var = m.node("ReduceMean", [sq], f"{name}.mean", axes=[-1], keepdims=1)
        else:
            var = m.node("ReduceMean", [sq, m.i64("axes_last", [-1])], f"{name}.mean", keepdims=1)
        inv = m.node("Reciprocal", [m.node("Sqrt", [m.node("Add", [var, m.f32("rms_eps", 1e-6)], f"{name}.add_eps")],
                                           f"{name}.sqrt")], f"{name}.rsqrt")
        w = m.init(f"{name}.weight", m.uniform(width, 0.9, 1.1))
        return m.node("Mul", [w, m.node("Mul", [x, inv], f"{name}.normalize")], f"{name}.scale")

    def attention_inputs(h: str, p: str) -> tuple[str, str, str]:
        """Q, K, V as [B, H, S, D] (before RoPE) in the variant's form."""
        if variant == "neox":
            qkv = m.proj(h, HIDDEN, 3 * HIDDEN, f"{p}.query_key_value", bias=True)
            view = m.node("Reshape", [qkv, m.i64("neox_view", [0, SEQ, HEADS, 3 * HEAD_DIM])], f"{p}.view")
            t = m.transpose(view, [0, 2, 1, 3], f"{p}.qkv.transpose")
            parts = [m.node("Slice", [t, m.i64(f"neox_start{j}", [j * HEAD_DIM]), m.i64(f"neox_end{j}", [(j + 1) * HEAD_DIM]),
                                      m.i64("axis3", [3])], f"{p}.{n}_slice") for j, n in enumerate("qkv")]
            return parts[0], parts[1], parts[2]
        if variant == "phi3":
            qkv = m.proj(h, HIDDEN, HIDDEN + 2 * kv_hidden, f"{p}.qkv_proj", bias=False)
            bounds = [0, HIDDEN, HIDDEN + kv_hidden, HIDDEN + 2 * kv_hidden]
            parts = [m.node("Slice", [qkv, m.i64(f"qkv_start{j}", [bounds[j]]), m.i64(f"qkv_end{j}", [bounds[j + 1]]),
                                      m.i64("axis2", [2])], f"{p}.{n}_slice") for j, n in enumerate("qkv")]
            return (m.split_heads(parts[0], h, HEADS, SEQ, f"{p}.q"), m.split_heads(parts[1], h, KV_HEADS, SEQ, f"{p}.k"),
                    m.split_heads(parts[2], h, KV_HEADS, SEQ, f"{p}.v"))
        qp = m.proj(h, HIDDEN, HIDDEN, f"{p}.q_proj", bias=False)
        kp = m.proj(h, HIDDEN, kv_hidden, f"{p}.k_proj", bias=False)
        v = m.split_heads(m.proj(h, HIDDEN, kv_hidden, f"{p}.v_proj", bias=False), h, KV_HEADS, SEQ, f"{p}.v")
        if variant == "qwen3":
            q = rmsnorm(m.split_heads(qp, h, HEADS, SEQ, f"{p}.q", transpose=False), f"{p}.q_norm", HEAD_DIM)
            k = rmsnorm(m.split_heads(kp, h, KV_HEADS, SEQ, f"{p}.k", transpose=False), f"{p}.k_norm", HEAD_DIM)
            return (m.transpose(q, [0, 2, 1, 3], f"{p}.q.transpose"), m.transpose(k, [0, 2, 1, 3], f"{p}.k.transpose"), v)
        return m.split_heads(qp, h, HEADS, SEQ, f"{p}.q"), m.split_heads(kp, h, KV_HEADS, SEQ, f"{p}.k"), v

    # GPT-J and Phi rotate only each head's first half (rotary_dim); GPT-J pairs (2i, 2i + 1).
    rot_dim = HEAD_DIM // 2 if variant in ("gptj", "phi", "neox") else HEAD_DIM
    interleaved = variant == "gptj"

    def rotate_half(x: str, name: str) -> str:
        r = rot_dim // 2
        x1 = m.node("Slice", [x, m.i64("zero1", [0]), m.i64("rot_half", [r]), m.i64("axis3", [3])], f"{name}.x1")
        x2 = m.node("Slice", [x, m.i64("rot_half", [r]), m.i64("rot_full", [rot_dim]), m.i64("axis3", [3])], f"{name}.x2")
        return m.node("Concat", [m.node("Neg", [x2], f"{name}.neg"), x1], f"{name}.concat", axis=-1)

    def rotate_every_two(x: str, name: str) -> str:
        """stack((-x[..., 1::2], x[..., ::2]), -1).flatten(-2), as GPT-J writes it."""
        big, two, last = m.i64("big", [2**63 - 1]), m.i64("step2", [2]), m.i64("axes_last", [-1])
        x1 = m.node("Slice", [x, m.i64("zero1", [0]), big, m.i64("axis3", [3]), two], f"{name}.x1")
        x2 = m.node("Slice", [x, m.i64("one1", [1]), big, m.i64("axis3", [3]), two], f"{name}.x2")
        odd = m.node("Unsqueeze", [m.node("Neg", [x2], f"{name}.neg"), last], f"{name}.odd")
        even = m.node("Unsqueeze", [x1, last], f"{name}.even")
        stacked = m.node("Concat", [odd, even], f"{name}.stack", axis=-1)
        return m.node("Reshape", [stacked, m.i64("flatten_pairs", [0, 0, 0, -1])], f"{name}.flatten")

    def rope(x: str, cos: str, sin: str, name: str) -> str:
        xr = x
        if rot_dim < HEAD_DIM:
            xr = m.node("Slice", [x, m.i64("zero1", [0]), m.i64("rot_full", [rot_dim]), m.i64("axis3", [3])], f"{name}.rot")
        rotate = rotate_every_two if interleaved else rotate_half
        y = m.node("Add", [m.node("Mul", [xr, cos], f"{name}.mul_cos"),
                           m.node("Mul", [rotate(xr, f"{name}.rotate"), sin], f"{name}.mul_sin")], f"{name}.add")
        if rot_dim < HEAD_DIM:
            rest = m.node("Slice", [x, m.i64("rot_full", [rot_dim]), m.i64("full", [HEAD_DIM]), m.i64("axis3", [3])],
                          f"{name}.pass")
            y = m.node("Concat", [y, rest], f"{name}.concat_pass", axis=-1)
        return y

    def repeat_kv(x: str, name: str) -> str:
        """x[:, :, None].expand(B, Hkv, n_rep, S, D).reshape(B, Hkv·n_rep, S, D)."""
        u = m.node("Unsqueeze", [x, m.i64("axes2", [2])], f"{name}.unsqueeze")
        rep = HEADS // KV_HEADS
        if legacy:
            b = m.dim(x, 0, f"{name}.batch")
            e_shape = m.node("Concat", [b, m.i64("expand_tail", [KV_HEADS, rep, SEQ, HEAD_DIM])], f"{name}.expand_shape", axis=0)
            r_shape = m.node("Concat", [b, m.i64("repeat_tail", [HEADS, SEQ, HEAD_DIM])], f"{name}.reshape_shape", axis=0)
        else:
            e_shape = m.i64("expand_shape", [BATCH, KV_HEADS, rep, SEQ, HEAD_DIM])
            r_shape = m.i64("repeat_shape", [BATCH, HEADS, SEQ, HEAD_DIM])
        return m.node("Reshape", [m.node("Expand", [u, e_shape], f"{name}.expand"), r_shape], f"{name}.reshape")

    tok = m.init("embed_tokens", m.normal((VOCAB, HIDDEN), 1.0))
    x = m.node("Gather", [tok, "input_ids"], "embed.gather", axis=0)
    # LlamaRotaryEmbedding: freqs = position_ids ⊗ inv_freq; emb = cat(freqs, freqs); cos/sin [1, 1, S, D]
    inv_freq = m.f32("inv_freq", 1.0 / (10000 ** (np.arange(0, rot_dim, 2) / rot_dim)))
    pos = m.node("Cast", [m.node("Unsqueeze", [m.i64("position_ids", np.arange(SEQ)), m.i64("axes_last", [-1])],
                                 "rope.positions")], "rope.cast", to=TensorProto.FLOAT)
    freqs = m.node("Mul", [pos, inv_freq], "rope.freqs")
    if interleaved:  # repeat_interleave(freqs, 2, -1): each frequency twice in place
        f2 = m.node("Unsqueeze", [freqs, m.i64("axes_last", [-1])], "rope.freqs2")
        emb = m.node("Reshape", [m.node("Concat", [f2, f2], "rope.pairs", axis=-1), m.i64("emb_shape", [SEQ, rot_dim])],
                     "rope.emb")
    else:
        emb = m.node("Concat", [freqs, freqs], "rope.emb", axis=-1)
    cos = m.node("Unsqueeze", [m.node("Cos", [emb], "rope.cos"), m.i64("axes01", [0, 1])], "rope.cos4")
    sin = m.node("Unsqueeze", [m.node("Sin", [emb], "rope.sin"), m.i64("axes01", [0, 1])], "rope.sin4")
    triu = np.triu(np.full((SEQ, SEQ), FMIN, np.float32), 1)[None, None]
    if eager:  # _update_causal_mask folded to its constant (no padding input)
        mask = m.init("causal_mask", triu)
    elif masked_sdpa:
        keep = m.sdpa_keep(causal=True)
    else:  # causal + padding from attention_mask, as the sdpa path builds it
        pad = m.node("Unsqueeze", ["attention_mask", m.i64("axes12", [1, 2])], "mask.unsqueeze")
        pad = m.node("Where", [m.node("Equal", [pad, m.i64("zero_i", 0)], "mask.is_pad"), m.f32("fmin", FMIN),
                               m.f32("zero", 0.0)], "mask.padding")
        mask = m.node("Add", [m.init("causal_triu", triu), pad], "mask.combine")
    for i in range(LAYERS):
        p = f"layers.{i}.self_attn"
        h = rmsnorm(x, f"layers.{i}.input_layernorm")
        q, k, v = attention_inputs(h, p)
        q, k = rope(q, cos, sin, f"{p}.q_rope"), rope(k, cos, sin, f"{p}.k_rope")
        if variant != "neox":  # NeoX: every query head has its own key head
            k, v = repeat_kv(k, f"{p}.k_repeat"), repeat_kv(v, f"{p}.v_repeat")
        if masked_sdpa:
            c = m.sdpa_masked(q, m.transpose(k, [0, 1, 3, 2], f"{p}.k_transposed"), v, keep, p)
        elif eager:
            s = m.node("MatMul", [q, m.transpose(k, [0, 1, 3, 2], f"{p}.k_t")], f"{p}.scores")
            s = m.node("Mul", [s, m.f32("scaling", HEAD_DIM ** -0.5)], f"{p}.scale")
            s = m.node("Add", [s, mask], f"{p}.add_mask")
            pr = m.node("Cast", [m.node("Softmax", [s], f"{p}.softmax", axis=-1)], f"{p}.to_dtype", to=TensorProto.FLOAT)
            c = m.node("MatMul", [pr, v], f"{p}.context")
        else:
            c = m.sdpa(q, k, v, mask, 0, p)
        c = m.merge_heads(c, h, SEQ, f"{p}.merge")
        x = m.node("Add", [m.proj(c, HIDDEN, HIDDEN, f"{p}.o_proj", bias=False), x], f"layers.{i}.residual1")
        f = rmsnorm(x, f"layers.{i}.post_attention_layernorm")
        gate = m.proj(f, HIDDEN, 2 * HIDDEN, f"layers.{i}.mlp.gate_proj", bias=False)
        up = m.proj(f, HIDDEN, 2 * HIDDEN, f"layers.{i}.mlp.up_proj", bias=False)
        act = m.node("Mul", [gate, m.node("Sigmoid", [gate], f"layers.{i}.mlp.sigmoid")], f"layers.{i}.mlp.silu")
        f = m.proj(m.node("Mul", [act, up], f"layers.{i}.mlp.mul"), 2 * HIDDEN, HIDDEN, f"layers.{i}.mlp.down_proj", bias=False)
        x = m.node("Add", [f, x], f"layers.{i}.residual2")
    x = m.name_output(rmsnorm(x, "norm"), "last_hidden_state")
    b = batch_dim(m)
    ins = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [b, SEQ])]
    if not eager:
        ins.append(helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [b, SEQ]))
    return m.finish_model(ins, [helper.make_tensor_value_info(x, TensorProto.FLOAT, [b, SEQ, HIDDEN])],
                          f"{variant.capitalize()}-style decoder (GQA {HEADS}/{KV_HEADS}), attention as torch.onnx "
                          f"{form} writes LlamaAttention")


# ---- nn.MultiheadAttention returning its weights ------------------------------------------------

def mha(form: str) -> onnx.ModelProto:
    """torch's F.multi_head_attention_forward with need_weights=True (nn.MultiheadAttention's
    default, batch_first=True, self-attention), as both exporters write it: the packed in-projection
    unflattened to [S, B, 3, E] and picked apart by Unsqueeze, Transpose, Squeeze and Gathers; the
    heads folded into the batch ([S, B·H, D] -> [B·H, S, D]); Q scaled, Kᵀ one Transpose(1,2,0),
    bmm; legacy adds the key padding mask from attention_mask first ([B·H, 1, S], baddbmm);
    Softmax; bmm with V; back to [B, S, E] through the output projection (a Gemm on [S·B, E])."""
    legacy = form == "legacy"
    m = Model(f"mha_{form}", seed=15, legacy=legacy, opset=17 if legacy else 18)
    b = -1 if legacy else BATCH  # the legacy exporter computes B from Shape; -1 stands for it here
    tok = m.init("embed_tokens", m.normal((VOCAB, HIDDEN), 1.0))
    x = m.node("Gather", [tok, "input_ids"], "embed.gather", axis=0)
    if legacy:
        pad = m.node("Where", [m.node("Equal", ["attention_mask", m.i64("zero_i", 0)], "mask.is_pad"),
                               m.f32("neg_inf", -np.inf), m.f32("zero", 0.0)], "mask.key_padding")
        pad = m.node("Reshape", [pad, m.i64("pad4", [b, 1, 1, SEQ])], "mask.view")
        pad = m.node("Expand", [pad, m.i64("pad_heads", [1, HEADS, 1, 1])], "mask.expand")
        pad = m.node("Reshape", [pad, m.i64("pad_folded", [b, 1, SEQ])], "mask.folded")
    for i in range(LAYERS):
        p = f"layers.{i}.self_attn"
        xs = m.transpose(x, [1, 0, 2], f"{p}.seq_first")
        w_in = m.init(f"{p}.in_proj_weight", m.normal((HIDDEN, 3 * HIDDEN), math.sqrt(1.0 / HIDDEN)))
        qkv = m.node("Add", [m.node("MatMul", [xs, w_in], f"{p}.in_proj"),
                             m.init(f"{p}.in_proj_bias", m.uniform(3 * HIDDEN, -0.1, 0.1))], f"{p}.in_proj_bias_add")
        qkv = m.node("Reshape", [qkv, m.i64("unflatten", [SEQ, b, 3, HIDDEN])], f"{p}.unflatten")
        qkv = m.node("Unsqueeze", [qkv, m.i64("axes0", [0])], f"{p}.unsqueeze")
        qkv = m.node("Squeeze", [m.transpose(qkv, [3, 1, 2, 0, 4], f"{p}.transpose"), m.i64("axes3", [3])], f"{p}.squeeze")
        fold = m.i64("fold", [SEQ, b * HEADS if b > 0 else -1, HEAD_DIM])
        parts = [m.node("Reshape", [m.node("Gather", [qkv, m.i64(f"idx{j}", j)], f"{p}.{n}_select", axis=0), fold],
                        f"{p}.{n}_fold") for j, n in enumerate("qkv")]
        q = m.node("Mul", [m.transpose(parts[0], [1, 0, 2], f"{p}.q_t"), m.f32("mha_scale", HEAD_DIM ** -0.5)], f"{p}.q_scale")
        kt = m.transpose(parts[1], [1, 2, 0], f"{p}.k_t")
        v = m.transpose(parts[2], [1, 0, 2], f"{p}.v_t")
        s = m.node("MatMul", [q, kt], f"{p}.bmm")
        if legacy:
            s = m.node("Add", [pad, s], f"{p}.baddbmm")
        o = m.node("MatMul", [m.node("Softmax", [s], f"{p}.softmax", axis=-1), v], f"{p}.bmm_pv")
        o = m.node("Reshape", [m.transpose(o, [1, 0, 2], f"{p}.o_t"), m.i64("rows", [-1, HIDDEN])], f"{p}.o_rows")
        o = m.node("Gemm", [o, m.init(f"{p}.out_proj.weight", m.normal((HIDDEN, HIDDEN), math.sqrt(1.0 / HIDDEN))),
                            m.init(f"{p}.out_proj.bias", m.uniform(HIDDEN, -0.1, 0.1))], f"{p}.out_proj", transB=1)
        o = m.node("Reshape", [o, m.i64("unrows", [SEQ, b, HIDDEN])], f"{p}.o_unrows")
        x = m.layernorm(m.node("Add", [x, m.transpose(o, [1, 0, 2], f"{p}.batch_first")], f"layers.{i}.residual"),
                        f"layers.{i}.norm")
    x = m.name_output(x, "last_hidden_state")
    bd = batch_dim(m)
    ins = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [bd, SEQ])]
    if legacy:
        ins.append(helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [bd, SEQ]))
    return m.finish_model(ins, [helper.make_tensor_value_info(x, TensorProto.FLOAT, [bd, SEQ, HIDDEN])],
                          f"nn.MultiheadAttention (need_weights=True) encoder, as torch.onnx {form} writes it")


MODELS = {
    "bert_legacy": lambda: bert("legacy"), "bert_dynamo": lambda: bert("dynamo"), "bert_opset23": lambda: bert("opset23"),
    "bert_cls_legacy": lambda: bert("legacy", classify=True), "bert_cls_dynamo": lambda: bert("dynamo", classify=True),
    "vit_legacy": lambda: vit("legacy"), "vit_dynamo": lambda: vit("dynamo"),
    "vit_cls_legacy": lambda: vit("legacy", classify=True), "vit_cls_dynamo": lambda: vit("dynamo", classify=True),
    "gpt2_legacy": lambda: gpt2("legacy"), "gpt2_dynamo": lambda: gpt2("dynamo"),
    "llama_legacy": lambda: llama("legacy"), "llama_dynamo": lambda: llama("dynamo"),
    "bert_sdpa_legacy": lambda: bert("sdpa_legacy"), "bert_sdpa_dynamo": lambda: bert("sdpa_dynamo"),
    "gpt2_sdpa_legacy": lambda: gpt2("sdpa_legacy"), "gpt2_sdpa_dynamo": lambda: gpt2("sdpa_dynamo"),
    "llama_sdpa_legacy": lambda: llama("sdpa_legacy"), "llama_sdpa_dynamo": lambda: llama("sdpa_dynamo"),
    "qwen3_legacy": lambda: llama("legacy", "qwen3"), "qwen3_dynamo": lambda: llama("dynamo", "qwen3"),
    "phi3_legacy": lambda: llama("legacy", "phi3"), "phi3_dynamo": lambda: llama("dynamo", "phi3"),
    "gptj_legacy": lambda: llama("legacy", "gptj"), "gptj_dynamo": lambda: llama("dynamo", "gptj"),
    "phi_legacy": lambda: llama("legacy", "phi"), "phi_dynamo": lambda: llama("dynamo", "phi"),
    "mha_legacy": lambda: mha("legacy"), "mha_dynamo": lambda: mha("dynamo"),
    "neox_legacy": lambda: llama("legacy", "neox"), "neox_dynamo": lambda: llama("dynamo", "neox"),
}


def set_sizes(layers: int, hidden: int, heads: int, seq: int, vocab: int) -> None:
    """Rebinds the module's size constants (the builders read them at call time)."""
    global LAYERS, HIDDEN, HEADS, HEAD_DIM, SEQ, VOCAB, KV_HEADS
    if hidden % heads or heads % 2:
        raise SystemExit("--hidden must be a multiple of --heads, and --heads even (Llama's kv heads are half)")
    LAYERS, HIDDEN, HEADS, HEAD_DIM, SEQ, VOCAB = layers, hidden, heads, hidden // heads, seq, vocab
    KV_HEADS = heads // 2


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", choices=sorted(MODELS))
    ap.add_argument("--layers", type=int, default=LAYERS)
    ap.add_argument("--hidden", type=int, default=HIDDEN)
    ap.add_argument("--heads", type=int, default=HEADS)
    ap.add_argument("--seq", type=int, default=SEQ, help="sequence length (BERT, GPT-2, Llama)")
    ap.add_argument("--vocab", type=int, default=VOCAB)
    args = ap.parse_args()
    set_sizes(args.layers, args.hidden, args.heads, args.seq, args.vocab)
    os.makedirs(args.out, exist_ok=True)
    for name in [args.only] if args.only else MODELS:
        model = MODELS[name]()
        onnx.checker.check_model(model, full_check=True)
        path = os.path.join(args.out, f"{name}.onnx")
        with open(path, "wb") as f:
            f.write(model.SerializeToString())
        print(f"{path}: {len(model.graph.node)} nodes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
