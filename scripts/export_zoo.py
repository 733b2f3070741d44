#!/usr/bin/env python3
"""Export a zoo of real architectures both ways with torch.onnx.export (issue 24, export-form parity).

Each model is built with seeded random weights (nothing is downloaded: torchvision with weights=None,
transformers models from a config object, never from_pretrained) and written twice:

    DIR/<model>.legacy.onnx   torch.onnx.export(..., dynamo=False, opset_version=17)   (TorchScript, IR 8)
    DIR/<model>.dynamo.onnx   torch.onnx.export(..., dynamo=True)  default opset       (torch.export, IR 10;
                              torchlib writes opset 18, torch 2.11 then converts the model to its default, 20)

and, once per model:

    DIR/<model>.input.<name>.npy    the inputs (float32 NCHW images; int64 token ids and mask)
    DIR/<model>.output.<name>.npy   torch's fp32 outputs for those inputs (TF32 off)
    DIR/<model>.json                shapes, torch's own fp16 error against its fp32, per-export timing,
                                    node counts, IR version, opsets, and any error

Models (--models, comma-separated; default all):
    resnet50, vit_b_16, mobilenet_v3_large, efficientnet_b0, convnext_tiny   torchvision, 3x224x224
    any other torchvision classifier by its builder's name (densenet121, regnet_y_800mf, swin_t, ...):
             the same treatment, for checking the families beyond the zoo (issue 27 asks for that)
    the families of scripts/families.py (mistral, qwen3, deberta_v2, bloom, segformer, wav2vec2,
             fcn_resnet50, r3d_18, ...): small configs of other transformers families (text ones
             with a padded attention_mask), torchvision's segmentation and video models
    bert     transformers BertModel(BertConfig()), output last_hidden_state (no pooler)
    gpt2     transformers GPT2Model(GPT2Config()), output last_hidden_state
    llama    transformers LlamaModel with Llama-3.2-1B's block sizes (hidden 2048, intermediate 8192,
             32 heads, 8 KV heads (GQA), head dim 64, RoPE theta 5e5, RMSNorm) but 4 layers and a
             32000-token vocabulary (Llama-3.2's 128256 would take the file past protobuf's 2 GB
             limit; the embedding is a Gather either way), output last_hidden_state

Input form (the one users export, e.g. optimum's and most tutorials'):
  * text models take input_ids [batch, seq] int64 AND an all-ones attention_mask [batch, seq] int64
    (--no-mask exports input_ids only);
  * transformers' default attention implementation is kept (sdpa in transformers >= 4.36), which is
    what a user gets; --attn eager exports the explicit MatMul/Softmax/MatMul module instead;
  * use_cache=False (no KV-cache outputs);
  * the batch dim is symbolic ("batch") in both exports, so `fusec ... --batch N` binds it; the
    sequence length is fixed at --seq. --static exports every dim fixed. If a dynamic-batch export
    fails, the script retries it static and says so in the JSON.

Weights: torch.manual_seed(--seed) before each model is built; then every parameter (and BatchNorm
running statistic) that the library initialized to a constant (zero biases, identity norms, ViT's
zero class token) gets seeded random values: the exporters' optimizers drop x + 0 and x * 1, which a
trained model never allows (--library-init keeps the libraries' initialization).

The fp32 reference runs on CUDA when available (else CPU), with TF32 off. The fp16 reference
(copy.deepcopy(model).half(), channels_last for CNNs; torch.autocast float16 for a model that fails
under .half(), fp16_module() says when) runs only on CUDA; its max relative error is
max|fp16 - fp32| / max|fp32| per output, as `fusec optimize`'s verification reports it. On CPU the
JSON says "fp16": null with the reason. The exports themselves always trace the model on the CPU.

Run (repo root):
    python3 scripts/export_zoo.py --out /tmp/zoo                       # everything, batch 16, seq 128
    python3 scripts/export_zoo.py --batch 2 --out /work/zoo            # small, e.g. on a CPU-only box
    python3 scripts/export_zoo.py --models resnet50,bert --exports dynamo --out /tmp/zoo
Needs torch (2.9+ for the dynamo exporter as the default), torchvision, transformers, onnx and
onnxscript. Each model is tried on its own: a failure prints one line and the script goes on; the
exit status is 1 if anything failed, else 0.
"""
from __future__ import annotations

import argparse
import copy
import functools
import json
import os
import platform
import sys
import time
import traceback
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import families  # noqa: E402

CNN_MODELS = ("resnet50", "vit_b_16", "mobilenet_v3_large", "efficientnet_b0", "convnext_tiny")
TEXT_MODELS = ("bert", "gpt2", "llama")
ALL_MODELS = CNN_MODELS + TEXT_MODELS
EXPORTS = ("legacy", "dynamo")


@functools.lru_cache(maxsize=1)
def torchvision_classifiers() -> tuple[str, ...]:
    """Builder names of torchvision's image classifiers (empty without torchvision)."""
    try:
        import torchvision
    except ImportError:
        return ()
    return tuple(torchvision.models.list_models(module=torchvision.models))


def is_image_model(name: str) -> bool:
    return name in CNN_MODELS or (name not in TEXT_MODELS and name in torchvision_classifiers())


def is_conv_model(name: str) -> bool:
    """Whether torch peers run the model channels-last: 2-D CNNs (channels_last) and video models
    (channels_last_3d), as a user tuning them in torch would."""
    return is_image_model(name) or name in families.VIDEO


def is_text_model(name: str) -> bool:
    return name in TEXT_MODELS or name in families.SEQUENCE

T0 = time.perf_counter()


def log(msg: str = "") -> None:
    print(f"[{time.perf_counter() - T0:7.1f} s] {msg}", flush=True)


# ---- models --------------------------------------------------------------------------------------


class LastHidden:
    """Wraps a transformers base model so that forward returns one tensor, last_hidden_state."""

    @staticmethod
    def make(model, with_mask: bool):
        import torch

        class _Wrap(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            if with_mask:
                def forward(self, input_ids, attention_mask):
                    return self.m(input_ids=input_ids, attention_mask=attention_mask,
                                  use_cache=False).last_hidden_state
            else:
                def forward(self, input_ids):
                    return self.m(input_ids=input_ids, use_cache=False).last_hidden_state

        return _Wrap(model)


def text_config(name: str, attn: str):
    """The transformers config object of a text model (defaults, except Llama's sizes)."""
    import transformers as tf

    if name == "bert":
        cfg = tf.BertConfig()
    elif name == "gpt2":
        cfg = tf.GPT2Config()
    else:
        kw = dict(hidden_size=2048, intermediate_size=8192, num_attention_heads=32, num_key_value_heads=8,
                  head_dim=64, num_hidden_layers=4, vocab_size=32000, rms_norm_eps=1e-5,
                  max_position_embeddings=131072, hidden_act="silu", tie_word_embeddings=True)
        cfg = tf.LlamaConfig(**kw)
        # RoPE theta 5e5 as Llama 3 uses; transformers 5 keeps it in rope_parameters, 4.x in rope_theta.
        if isinstance(getattr(cfg, "rope_parameters", None), dict):
            cfg.rope_parameters = dict(cfg.rope_parameters, rope_theta=500000.0)
        else:
            cfg.rope_theta = 500000.0
    if attn != "default":
        cfg._attn_implementation = attn
    return cfg


def build(name: str, args):
    """Returns (model in eval mode on the CPU, {input name: numpy array}, [output names])."""
    import torch

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed + 1)
    b = args.batch
    if name in families.FAMILIES:
        model, inputs, outputs = families.build(name, b, args.seq, gen)
    elif is_image_model(name):
        import torchvision

        model = getattr(torchvision.models, name)(weights=None)
        inputs = {"input": torch.randn(b, 3, 224, 224, generator=gen).numpy()}
        outputs = ["logits"]
    else:
        import transformers as tf

        cfg = text_config(name, args.attn)
        if name == "bert":
            base = tf.BertModel(cfg, add_pooling_layer=False)  # last_hidden_state only
        elif name == "gpt2":
            base = tf.GPT2Model(cfg)
        else:
            base = tf.LlamaModel(cfg)
        # Some versions scan input_ids for pad tokens when no mask is given (a host read); it only warns.
        if hasattr(base, "warn_if_padding_and_no_attention_mask"):
            base.warn_if_padding_and_no_attention_mask = lambda *a, **k: None
        with_mask = not args.no_mask
        model = LastHidden.make(base, with_mask)
        ids = torch.randint(0, cfg.vocab_size, (b, args.seq), generator=gen, dtype=torch.int64)
        inputs = {"input_ids": ids.numpy()}
        if with_mask:
            inputs["attention_mask"] = np.ones((b, args.seq), dtype=np.int64)
        outputs = ["last_hidden_state"]
    if not args.library_init:
        randomize_constant_tensors(model, args.seed + 2)
    # eval() only, as a user exports: parameters keep requires_grad. That matters for the legacy
    # exporter: under no_grad with frozen weights nn.MultiheadAttention (ViT) takes its fast path,
    # aten::_native_multi_head_attention, which the TorchScript exporter cannot write.
    model.eval()
    return model, inputs, outputs


def randomize_constant_tensors(model, seed: int) -> None:
    """Seeded, trained-looking values for every parameter the libraries initialize to a constant.

    Freshly built models hold many constant tensors: zero biases (torchvision's conv and linear
    init, transformers' Linear/Conv1D init), identity norms (BatchNorm mean 0, var 1, gamma 1,
    beta 0; LayerNorm/RMSNorm weight 1, bias 0), ViT's zero class token. Exporters' optimizers
    simplify those away (x + 0 and x * 1 dropped, a Conv's zero bias removed), which a trained model
    never allows, and a BN fold with gamma 1 checks nothing. So every floating parameter, and every
    BatchNorm running mean/var, whose elements are all equal to c becomes c * U(0.5, 1.5) when c != 0
    and N(0, 0.02) when c = 0. Random (non-constant) initializations are left as they are.
    """
    import torch

    gen = torch.Generator().manual_seed(seed)
    tensors = [p for _, p in sorted(model.named_parameters())]
    for mod in model.modules():
        if isinstance(mod, torch.nn.modules.batchnorm._BatchNorm) and mod.running_mean is not None:
            tensors += [mod.running_mean, mod.running_var]
    with torch.no_grad():
        for t in tensors:
            if not t.is_floating_point() or t.numel() < 2:
                continue
            flat = t.reshape(-1)
            c = float(flat[0])
            if not bool(torch.all(flat == c)):
                continue
            if c != 0.0:
                t.copy_(c * (torch.rand(t.shape, generator=gen) + 0.5))
            else:
                t.copy_(torch.randn(t.shape, generator=gen) * 0.02)


def attn_impl(model) -> str | None:
    m = getattr(model, "m", None)
    cfg = getattr(m, "config", None)
    return getattr(cfg, "_attn_implementation", None) if cfg is not None else None


# ---- references ----------------------------------------------------------------------------------


def run_torch(model, inputs: dict, device: str):
    import torch

    ts = [torch.from_numpy(v).to(device) for v in inputs.values()]
    with torch.no_grad():
        out = model(*ts)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    if device == "cuda":
        torch.cuda.synchronize()
    return [o.float().cpu().numpy() for o in outs]


def place(model, inputs: list, channels_last: bool = False):
    """(model on the inputs' device, inputs), both channels-last when asked: channels_last for a
    model of 4-D inputs, channels_last_3d for one of 5-D clips (its 5-D inputs)."""
    import torch

    model = model.to(inputs[0].device if inputs else torch.device("cuda"))
    if channels_last:
        rank = 5 if any(x.dim() == 5 for x in inputs) else 4
        fmt = torch.channels_last_3d if rank == 5 else torch.channels_last
        model = model.to(memory_format=fmt)
        inputs = [x.contiguous(memory_format=fmt) if x.dim() == rank else x for x in inputs]
    return model, inputs


def fp16_module(model, inputs: list, channels_last: bool = False):
    """The model in fp16 as a peer runs it: (module, inputs, how, why).

    First copy.deepcopy(model).half() with half inputs (how "half"), tried once here. A model that
    builds float32 tensors of its own and mixes them with its inputs fails that way (RAFT builds its
    GridSample grid in float32, and grid_sample wants both in one type): it then runs as float32
    under torch.autocast(float16) (how "autocast", why: .half()'s error), which keeps such ops in
    float32 as its authors meant. The autocast cache stays off so the module can be captured in a
    CUDA graph. Inputs are tensors on the model's device; call under no_grad/inference_mode.
    The model itself is not moved."""
    import torch

    mh, xh = place(copy.deepcopy(model).half(), [x.half() if x.is_floating_point() else x for x in inputs],
                   channels_last)
    try:
        mh(*xh)
        return mh, xh, "half", None
    except (RuntimeError, TypeError) as e:
        why = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
    del mh, xh
    device_type = inputs[0].device.type if inputs else "cuda"

    class Autocast16(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, *xs):
            with torch.autocast(device_type, dtype=torch.float16, cache_enabled=False):
                return self.inner(*xs)

    m32, x32 = place(copy.deepcopy(model), [x.float() if x.is_floating_point() else x for x in inputs], channels_last)
    return Autocast16(m32), x32, "autocast", why


def rel_err(got: np.ndarray, ref: np.ndarray) -> dict:
    diff = np.abs(got.astype(np.float64) - ref.astype(np.float64))
    max_ref = float(np.max(np.abs(ref))) if ref.size else 0.0
    max_abs = float(np.max(diff)) if diff.size else 0.0
    return {"max_abs": max_abs, "max_ref": max_ref, "max_rel": max_abs / max_ref if max_ref > 0 else 0.0,
            "finite": bool(np.all(np.isfinite(got)))}


def references(name: str, model, inputs: dict, outputs: list, device: str, out_dir: str) -> dict:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    info: dict = {"device": device}
    t = time.perf_counter()
    m = model.to(device)
    ref = run_torch(m, inputs, device)
    info["fp32_s"] = round(time.perf_counter() - t, 2)
    for oname, arr in zip(outputs, ref):
        np.save(os.path.join(out_dir, f"{name}.output.{oname}.npy"), arr)
    if device != "cuda":
        info["fp16"] = None
        info["fp16_note"] = "no fp16 reference: CUDA is not available (fp16 reference runs only on CUDA)"
    else:
        try:
            cl = is_conv_model(name)
            xs = [torch.from_numpy(v).to(device) for v in inputs.values()]
            with torch.no_grad():
                mh, xh, how, why = fp16_module(m, xs, channels_last=cl)
                out = mh(*xh)
            outs = out if isinstance(out, (tuple, list)) else (out,)
            got = [o.float().cpu().numpy() for o in outs]
            info["fp16"] = {o: rel_err(g, r) for o, g, r in zip(outputs, got, ref)}
            info["fp16_mode"] = how
            info["fp16_note"] = (("torch fp16 (model.half()" if how == "half" else
                                  f"torch fp16 (torch.autocast float16, as model.half() failed: {why}")
                                 + (", channels_last" if cl else "")
                                 + ") against torch fp32 on the same GPU; max_rel = max_abs / max|fp32|")
            del mh, xh, xs
        except Exception as e:  # noqa: BLE001
            info["fp16"] = None
            info["fp16_note"] = f"fp16 reference failed: {type(e).__name__}: {e}"
    model.to("cpu")
    if device == "cuda":
        torch.cuda.empty_cache()
    return info


# ---- export --------------------------------------------------------------------------------------


def onnx_summary(path: str) -> dict:
    import onnx

    m = onnx.load(path, load_external_data=False)
    hist: dict = {}
    for n in m.graph.node:
        k = (n.domain + "." if n.domain and n.domain != "ai.onnx" else "") + n.op_type
        hist[k] = hist.get(k, 0) + 1
    init = {t.name for t in m.graph.initializer}
    ins = []
    for v in m.graph.input:
        if v.name in init:
            continue
        dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                for d in v.type.tensor_type.shape.dim]
        ins.append({"name": v.name, "dims": dims})
    return {"ir_version": m.ir_version, "opsets": {o.domain or "ai.onnx": o.version for o in m.opset_import},
            "nodes": len(m.graph.node), "initializers": len(m.graph.initializer),
            "functions": len(m.functions), "inputs": ins, "outputs": [o.name for o in m.graph.output],
            "op_histogram": dict(sorted(hist.items()))}


def export_one(model, inputs: dict, outputs: list, path: str, form: str, static: bool, opset: int | None = None) -> dict:
    import torch

    args = tuple(torch.from_numpy(v) for v in inputs.values())
    names = list(inputs)
    kw: dict = dict(input_names=names, output_names=outputs)
    if form == "legacy":
        kw.update(dynamo=False, opset_version=17, do_constant_folding=True)
        if not static:
            kw["dynamic_axes"] = {n: {0: "batch"} for n in names + outputs}
    else:
        # Default opset (torch 2.11: 20; its torchlib functions are opset 18) and default optimize=True, as a user calls it. One
        # self-contained file unless the weights pass 2 GB (then torch writes external data itself).
        kw.update(dynamo=True, external_data=False, verbose=False)
        if opset:  # --opset: a newer opset's standard ops (23: RMSNormalization, Attention; 21: GroupNormalization)
            kw["opset_version"] = opset
        if not static:
            batch = torch.export.Dim("batch", min=1, max=4096)
            kw["dynamic_shapes"] = tuple({0: batch} for _ in names)
    t = time.perf_counter()
    # Grad mode stays on, as in a plain user call (see build()); the exporters' warnings (deprecation,
    # tracer) are dropped.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, args, path, **kw)
    info = {"path": path, "export_s": round(time.perf_counter() - t, 2), "bytes": os.path.getsize(path),
            "dynamic_batch": not static}
    info.update(onnx_summary(path))
    return info


def export_model(name: str, model, inputs: dict, outputs: list, form: str, args) -> dict:
    path = os.path.join(args.out, f"{name}.{form}.onnx")
    try:
        info = export_one(model, inputs, outputs, path, form, args.static, args.opset)
    except Exception as e:  # noqa: BLE001
        if args.static:
            raise
        first = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        log(f"  {name}.{form}: dynamic-batch export failed ({first[:200]}); retrying with static shapes")
        info = export_one(model, inputs, outputs, path, form, True, args.opset)
        info["dynamic_batch_error"] = first
    log(f"  {name}.{form}.onnx: {info['export_s']:.1f} s, {info['nodes']} nodes, IR {info['ir_version']}, "
        f"opsets {info['opsets']}, {info['bytes'] / 2**20:.1f} MiB")
    return info


# ---- one model -----------------------------------------------------------------------------------


def versions(device: str) -> dict:
    """The library versions (and the GPU) that each model's JSON records as "env"."""
    import onnx
    import torch
    import transformers

    try:
        import onnxscript
        osv = onnxscript.__version__
    except ImportError:
        osv = None
    return {"torch": torch.__version__, "transformers": transformers.__version__, "onnx": onnx.__version__,
            "onnxscript": osv, "python": platform.python_version(),
            "gpu": torch.cuda.get_device_name() if device == "cuda" else None}


def export_one_model(name: str, forms: list, args, device: str, env: dict) -> tuple[dict, list, object]:
    """Builds one model and writes, into args.out: its inputs, its torch references (unless
    args.skip_reference), <name>.<form>.onnx for each form, and <name>.json.

    Returns (the dict written as <name>.json, the failures as "<name> (stage)" / "<name>.<form>"
    strings, the fp32 model on the CPU, or None when the build failed). Nothing raises: each stage's
    failure is logged and recorded in the JSON.
    """
    res: dict = {"model": name, "batch": args.batch, "seq": args.seq if is_text_model(name) else None,
                 "seed": args.seed, "env": env, "exports": {}}
    json_path = os.path.join(args.out, f"{name}.json")
    failures = []
    try:
        t = time.perf_counter()
        model, inputs, outputs = build(name, args)
        res["build_s"] = round(time.perf_counter() - t, 2)
        res["params"] = int(sum(p.numel() for p in model.parameters()))
        res["attn_implementation"] = attn_impl(model)
        res["inputs"] = {k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in inputs.items()}
        res["outputs"] = outputs
        for k, v in inputs.items():
            np.save(os.path.join(args.out, f"{name}.input.{k}.npy"), v)
        log(f"{name}: built in {res['build_s']} s, {res['params'] / 1e6:.1f} M params"
            + (f", attention {res['attn_implementation']}" if res["attn_implementation"] else ""))
    except Exception as e:  # noqa: BLE001
        log(f"{name}: FAILED to build: {type(e).__name__}: {e}")
        res["error"] = traceback.format_exc()
        with open(json_path, "w") as f:
            json.dump(res, f, indent=1)
        return res, [f"{name} (build)"], None

    if not args.skip_reference:
        try:
            res["reference"] = references(name, model, inputs, outputs, device, args.out)
            fp16 = res["reference"].get("fp16")
            log(f"  {name}: fp32 reference on {device} in {res['reference']['fp32_s']} s"
                + ("; fp16 max rel " + ", ".join(f"{k} {v['max_rel']:.3e}" for k, v in fp16.items())
                   if fp16 else f"; {res['reference']['fp16_note']}"))
        except Exception as e:  # noqa: BLE001
            log(f"  {name}: FAILED reference: {type(e).__name__}: {e}")
            res["reference"] = {"error": traceback.format_exc()}
            failures.append(f"{name} (reference)")
            model.to("cpu")

    for form in forms:
        try:
            res["exports"][form] = export_model(name, model, inputs, outputs, form, args)
        except Exception as e:  # noqa: BLE001
            msg = str(e).splitlines()[0] if str(e) else ""
            log(f"  {name}.{form}: FAILED to export: {type(e).__name__}: {msg[:300]}")
            res["exports"][form] = {"error": traceback.format_exc()}
            failures.append(f"{name}.{form}")
    with open(json_path, "w") as f:
        json.dump(res, f, indent=1)
    return res, failures, model


# ---- main ----------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(ALL_MODELS), help="comma-separated: " + ", ".join(ALL_MODELS))
    ap.add_argument("--exports", default="legacy,dynamo", help="comma-separated: legacy, dynamo")
    ap.add_argument("--batch", type=int, default=16, help="batch of the saved inputs and of the trace (default 16)")
    ap.add_argument("--seq", type=int, default=128, help="sequence length of the text models (default 128)")
    ap.add_argument("--out", required=True, help="output folder (created)")
    ap.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                    help="where the torch references run (default: cuda when available)")
    ap.add_argument("--attn", choices=("default", "eager", "sdpa"), default="default",
                    help="transformers attention implementation (default: transformers' own default, sdpa)")
    ap.add_argument("--no-mask", action="store_true", help="text models take input_ids only (no attention_mask)")
    ap.add_argument("--static", action="store_true", help="every dim fixed (default: symbolic batch dim)")
    ap.add_argument("--opset", type=int, default=None,
                    help="the dynamo export's opset (default: torch's); e.g. 23, whose exporter writes "
                         "RMSNormalization and Attention, or 21, GroupNormalization")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--library-init", action="store_true",
                    help="keep the libraries' constant initializations (default: seeded random values for "
                         "every constant-initialized parameter, see randomize_constant_tensors)")
    ap.add_argument("--skip-reference", action="store_true", help="export only: no torch outputs, no fp16")
    args = ap.parse_args()

    models = [m.strip() for m in args.models.split(",") if m.strip()]
    forms = [f.strip() for f in args.exports.split(",") if f.strip()]
    bad = [m for m in models if m not in ALL_MODELS and m not in families.FAMILIES and not is_image_model(m)] + \
        [f for f in forms if f not in EXPORTS]
    if bad:
        ap.error(f"unknown model or export {bad}; models: {', '.join(ALL_MODELS)}, any torchvision classifier, "
                 f"or a family of scripts/families.py ({', '.join(families.FAMILIES)}); "
                 f"exports: {', '.join(EXPORTS)}")
    if args.batch < 2 and not args.static:
        log("note: a dynamic batch dim needs an example batch >= 2 (torch.export specializes 0 and 1); "
            "exporting static")
        args.static = True

    import torch

    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    os.makedirs(args.out, exist_ok=True)
    env = versions(device)
    log(f"export_zoo: models {models}, exports {forms}, batch {args.batch}, seq {args.seq}, device {device}; "
        + ", ".join(f"{k} {v}" for k, v in env.items() if v))

    failures = []
    for name in models:
        _, failed, model = export_one_model(name, forms, args, device, env)
        failures += failed
        del model
        import gc
        gc.collect()

    log("done" + (f"; FAILED: {', '.join(failures)}" if failures else "; every export written") + f" -> {args.out}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
