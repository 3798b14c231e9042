#!/usr/bin/env python3
"""One full-size model under several switch settings in one GPU call, on the GPU host: exported once
(attention_bench.py's TorchScript exporter, static batch), `sluice run` per variant (synthetic uint8,
bf16, `--sink null`; BATCHES 0 runs none), then `sluice profile` for the variants named in PROFILE_TAGS,
written to OUT/profile-MODEL-TAG.{txt,json}:

    PYTHONUNBUFFERED=1 python3 data_tools/variant_bench.py "$RT/run $RT/bin/sluice" OUT convnext_tiny 16 before,after \
        before:SLUICE_CUDA_LAYOUT_VIEWS=0 after:SLUICE_CUDA_LAYOUT_VIEWS=1

VARIANT is attention_bench.py's --variant (NAME:VAR=V,...); PROFILE_TAGS is comma-separated, or '-'."""
import os, shlex, subprocess, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attention_bench as ab  # noqa: E402

sluice, out, name, batches, prof = sys.argv[1:6]
variants = [ab.variant_env(v) for v in sys.argv[6:]]
os.makedirs(out, exist_ok=True)
path = f"/tmp/{name}.onnx"
t0 = time.time()
size = ab.export(name, path)
print(f"{name}: exported in {time.time() - t0:.0f} s", flush=True)
batch = ab.BATCH[name]
for tag, env in (variants if int(batches) > 0 else []):
    res, err = ab.run(sluice, path, size, batch, int(batches), f"/tmp/out-{name}", env)
    if res is None:
        print(f"{name} {tag}: failed: {err}", flush=True)
        continue
    print(f"{name} b{batch} {tag:10} images/s {res[0]:8.0f} steady {res[1]:8.0f} wall {res[2]:5.1f} s  {env}", flush=True)
for tag, env in variants:
    if tag not in prof.split(","):
        continue
    e = dict(os.environ); e.update(env)
    cmd = shlex.split(sluice) + ["profile", "--model", path, "--input-dtype", "uint8", "--sample-shape", f"3,{size},{size}",
                                 "--batch-size", str(batch), "--device", "cuda", "--precision", "bf16", "--top", "30",
                                 "--json", os.path.join(out, f"profile-{name}-{tag}.json")]
    r = subprocess.run(cmd, capture_output=True, text=True, env=e, timeout=240)
    with open(os.path.join(out, f"profile-{name}-{tag}.txt"), "w") as fh:
        fh.write(r.stdout + r.stderr)
    print(f"{name} profile {tag}: exit {r.returncode}", flush=True)
    lines = (r.stdout + r.stderr).splitlines()
    at = next((i for i, l in enumerate(lines) if "by kind" in l), len(lines))
    print("\n".join(lines[:4] + lines[at:at + 30]), flush=True)
