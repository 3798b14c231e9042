"""W4 in plain PyTorch, the reference data_tools/bench_w4.py times Sluice against: JPEG photos ->
DeepLabV3-ResNet50 (eager, bf16) -> argmax -> one PNG mask per photo, named after it.
    python3 data_tools/w4_torch.py PHOTOS OUT WEIGHTS.pt [BATCH]"""
import os, sys
from concurrent.futures import ThreadPoolExecutor
import torch, torchvision
from torch.nn.functional import interpolate as resize
from torchvision.io import ImageReadMode, decode_jpeg, read_file, write_png
src, dst, weights, batch = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 64
names = sorted(os.path.relpath(os.path.join(d, f), src) for d, _, fs in os.walk(src) for f in fs if f.endswith(".jpg"))
net = torchvision.models.segmentation.deeplabv3_resnet50(weights=None, weights_backbone=None, num_classes=21, aux_loss=False)
net.load_state_dict(torch.load(weights, map_location="cpu"))
net = net.eval().cuda().to(torch.bfloat16, memory_format=torch.channels_last)
mean = torch.tensor([0.485, 0.456, 0.406], device="cuda").view(1, 3, 1, 1) * 255
std = torch.tensor([0.229, 0.224, 0.225], device="cuda").view(1, 3, 1, 1) * 255
pool = ThreadPoolExecutor(16)
def save(name, mask):
    path = os.path.join(dst, os.path.splitext(name)[0] + ".png")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_png(mask, path)
with torch.inference_mode():
    for i in range(0, len(names), batch):
        part = names[i:i + batch]
        data = list(pool.map(lambda n: read_file(os.path.join(src, n)), part))
        images = decode_jpeg(data, mode=ImageReadMode.RGB, device="cuda")
        x = torch.cat([resize(m[None].float(), size=(512, 512), mode="bilinear", antialias=True) for m in images])
        x = ((x - mean) / std).to(torch.bfloat16).contiguous(memory_format=torch.channels_last)
        for n, m in zip(part, net(x)["out"].argmax(1).to(torch.uint8).cpu()):
            pool.submit(save, n, m[None])
pool.shutdown(wait=True)
