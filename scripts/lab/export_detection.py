"""Exports one of torchvision's detection models with one exporter and prints its op counts (or why the
export failed): the probe behind docs/benchmarks.md's note on detection models.

    python3 scripts/lab/export_detection.py ssdlite320_mobilenet_v3_large legacy   (or dynamo)

Writes /tmp/det/<model>.<form>.onnx (one 320 x 320 image; outputs boxes, scores, labels).
"""
import os, sys, torch, torchvision, warnings, collections, onnx, time
warnings.simplefilter("ignore")
name, form = sys.argv[1], sys.argv[2]
ctor = getattr(torchvision.models.detection, name)
m = ctor(weights=None, weights_backbone=None).eval()
class W(torch.nn.Module):
    def __init__(s, m): super().__init__(); s.m = m
    def forward(s, x):
        r = s.m(x)[0]
        return r["boxes"], r["scores"], r["labels"]
x = torch.rand(1, 3, 320, 320)
os.makedirs("/tmp/det", exist_ok=True)
path = f"/tmp/det/{name}.{form}.onnx"
t = time.time()
try:
    if form == "legacy":
        torch.onnx.export(W(m), (x,), path, dynamo=False, opset_version=17)
    else:
        torch.onnx.export(W(m), (x,), path, dynamo=True, external_data=False, verbose=False)
    g = onnx.load(path).graph
    c = collections.Counter(n.op_type for n in g.node)
    print(name, form, "exported", round(time.time()-t,1), "s", len(g.node), "nodes", dict(c.most_common()))
except Exception as e:
    print(name, form, "EXPORT FAIL", type(e).__name__, str(e).splitlines()[0][:200] if str(e) else "")
