"""A/B of what two fusec binaries' `optimize` writes: per export, the node count and every op type
whose count differs, counted per number of inputs ("Attention/1" is a packed-QKV attention,
"Attention/4" one with Q, K, V and a mask), so a fusion that changes form shows too. The new binary's run also verifies (`--check 1`), so a rewrite that changes
the numbers fails there. Exit status 0; the last line counts the exports that differ.

    python3 scripts/lab/optimize_ab.py BASE_FUSEC NEW_FUSEC OUT_DIR EXPORT_DIR [EXPORT_DIR ...]

EXPORT_DIR: folders of .onnx files, such as scripts/export_zoo.py writes (--batch 2 is assumed).
"""
import collections, glob, os, subprocess, sys, onnx
base, new, out = sys.argv[1], sys.argv[2], sys.argv[3]
dirs = sys.argv[4:]
os.makedirs(out, exist_ok=True)
def opt(binary, f, tag):
    o = os.path.join(out, os.path.basename(f).replace(".onnx", f".{tag}.onnx"))
    r = subprocess.run([binary, "optimize", f, "--batch", "2", "-o", o] + (["--check", "1"] if tag == "new" else []),
                       capture_output=True, text=True, timeout=900)
    if r.returncode:
        return None, r.stderr.strip().splitlines()[-1][:200] if r.stderr.strip() else "rc %d" % r.returncode
    m = onnx.load(o, load_external_data=False)
    return collections.Counter(f"{n.op_type}/{sum(1 for i in n.input if i)}" for n in m.graph.node), ""
diff = 0
for d in dirs:
    for f in sorted(glob.glob(d + "/*.onnx")):
        if ".opt." in f or ".base." in f or ".new." in f: continue
        a, ea = opt(base, f, "base"); b, eb = opt(new, f, "new")
        name = os.path.basename(f)
        if a is None or b is None:
            print(f"{name:40s} base: {ea or 'ok'} | new: {eb or 'ok'}", flush=True); diff += (ea != eb); continue
        na, nb = sum(a.values()), sum(b.values())
        changes = {k: (a.get(k, 0), b.get(k, 0)) for k in set(a) | set(b) if a.get(k, 0) != b.get(k, 0)}
        if changes:
            diff += 1
            print(f"{name:40s} {na:5d} -> {nb:5d}  " + ", ".join(f"{k} {x}->{y}" for k, (x, y) in sorted(changes.items())), flush=True)
        else:
            print(f"{name:40s} {na:5d} same", flush=True)
print("exports that differ:", diff)
