#!/usr/bin/env python3
"""On the lent GPU: the CUDA kernels PyTorch eager fp16 launches for one zoo or family model, with
their total device time and count over N calls, so a fusec profile can be read against the peer's.

    python3 scripts/lab/torch_kernels.py lstm_tagger [--calls 20] [--top 25]

The model is built as bench_zoo.py builds its peer: export_zoo.build's seeded weights, .half() on the
GPU, channels_last for the torchvision CNNs (channels_last_3d for the video models).
"""
import argparse
import collections
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import export_zoo as ez  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()

    import torch
    from torch.profiler import ProfilerActivity, profile

    ns = argparse.Namespace(seed=0, batch=args.batch, seq=args.seq, attn="default", no_mask=False,
                            library_init=False)
    model, inputs, _ = ez.build(args.model, ns)
    dev = torch.device("cuda")
    m = model.half().to(dev)
    xs = []
    for v in inputs.values():
        x = torch.from_numpy(v).to(dev)
        xs.append(x.half() if x.is_floating_point() else x)
    if ez.is_conv_model(args.model):
        m, xs = ez.place(m, xs, channels_last=True)
    with torch.no_grad():
        for _ in range(5):
            m(*xs)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(args.calls):
                m(*xs)
            torch.cuda.synchronize()
    per = collections.defaultdict(lambda: [0.0, 0])
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            per[e.name][0] += e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
            per[e.name][1] += 1
    total = sum(v[0] for v in per.values()) / args.calls
    print(f"=== torch eager fp16 {args.model}: {total / 1000:.4f} ms of kernels per call, "
          f"{sum(v[1] for v in per.values()) / args.calls:.0f} launches per call")
    for name, (us, n) in sorted(per.items(), key=lambda kv: -kv[1][0])[:args.top]:
        print(f"  {us / args.calls / 1000:.4f} ms {n / args.calls:5.1f}x  {name[:150]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
