#!/usr/bin/env python3
"""Writes the tiny YOLO-style detectors the detection tests run (random weights, fixed seed).

  yolo_v8.onnx  [B, 3, 64, 64] -> output0 [B, 4+C, N]: cx, cy, w, h in input pixels, then C class
                scores (the ultralytics v8+ export layout), C = 3, N = 16 x 16 = 256
  yolo_v5.onnx  [B, 3, 64, 64] -> output0 [B, N, 5+C]: boxes, objectness, class scores (v5-style)
  yolo_v10.onnx [B, 3, 64, 64] -> output0 [B, N, 6]: final rows x1, y1, x2, y2, score, class (the
                layout of YOLOv10's end-to-end export; here every candidate, unsorted: the best
                class score and its index as a float)

A stride-4 convolution, ReLU and a 1x1 convolution give each 4x4 patch a candidate; sigmoids scale
the box fields to pixels (centres over the whole input, sizes up to 24 px) so the boxes vary with
the image and overlap enough for NMS to matter.

  python3 data_tools/make_detect_models.py [OUT_DIR]   (default tests/data/detect)
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SIZE, CLASSES, STRIDE = 64, 3, 4


def model(objectness: bool, seed: int) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    fields = 4 + int(objectness) + CLASSES
    cells = (SIZE // STRIDE) ** 2
    w1 = rng.normal(0, 0.08, (16, 3, STRIDE, STRIDE)).astype(np.float32)
    b1 = rng.normal(0, 0.1, 16).astype(np.float32)
    w2 = rng.normal(0, 0.6, (fields, 16, 1, 1)).astype(np.float32)
    b2 = rng.normal(0, 0.3, fields).astype(np.float32)
    scale = np.ones((1, fields, 1), np.float32)
    scale[0, :4, 0] = [SIZE, SIZE, 24, 24]
    inits = [numpy_helper.from_array(a, n) for a, n in
             [(w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"), (scale, "scale"),
              (np.array([0, fields, cells], np.int64), "flat")]]
    nodes = [
        helper.make_node("Conv", ["images", "w1", "b1"], ["c1"], strides=[STRIDE, STRIDE], kernel_shape=[STRIDE, STRIDE]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], kernel_shape=[1, 1]),
        helper.make_node("Reshape", ["c2", "flat"], ["z"]),
        helper.make_node("Sigmoid", ["z"], ["p"]),
    ]
    if objectness:
        nodes += [helper.make_node("Mul", ["p", "scale"], ["pf"]),
                  helper.make_node("Transpose", ["pf"], ["output0"], perm=[0, 2, 1])]
        out_shape = ["batch", cells, fields]
    else:
        nodes += [helper.make_node("Mul", ["p", "scale"], ["output0"])]
        out_shape = ["batch", fields, cells]
    graph = helper.make_graph(
        nodes, "yolo_v5" if objectness else "yolo_v8",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, SIZE, SIZE])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, out_shape)], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="sluice make_detect_models")
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def final_rows(seed: int) -> onnx.ModelProto:
    """The v8 prediction turned into final rows: corners, the best class score, its index."""
    m = model(False, seed)
    g = m.graph
    fields = 4 + CLASSES
    g.output[0].name = "pred"
    for n in g.node:
        n.output[:] = ["pred" if o == "output0" else o for o in n.output]
    g.initializer.extend([numpy_helper.from_array(np.array(v, np.int64), n) for v, n in
                          [([0], "i0"), ([2], "i2"), ([4], "i4"), ([fields], "iend"), ([2], "axis2")]] +
                         [numpy_helper.from_array(np.array([0.5], np.float32), "half")])
    g.node.extend([
        helper.make_node("Transpose", ["pred"], ["rows"], perm=[0, 2, 1]),
        helper.make_node("Slice", ["rows", "i0", "i2", "axis2"], ["cxcy"]),
        helper.make_node("Slice", ["rows", "i2", "i4", "axis2"], ["wh"]),
        helper.make_node("Slice", ["rows", "i4", "iend", "axis2"], ["cls"]),
        helper.make_node("Mul", ["wh", "half"], ["halfwh"]),
        helper.make_node("Sub", ["cxcy", "halfwh"], ["x1y1"]),
        helper.make_node("Add", ["cxcy", "halfwh"], ["x2y2"]),
        helper.make_node("ReduceMax", ["cls"], ["score"], axes=[2], keepdims=1),
        helper.make_node("ArgMax", ["cls"], ["label"], axis=2, keepdims=1),
        helper.make_node("Cast", ["label"], ["labelf"], to=TensorProto.FLOAT),
        helper.make_node("Concat", ["x1y1", "x2y2", "score", "labelf"], ["output0"], axis=2),
    ])
    del g.output[:]
    g.output.extend([helper.make_tensor_value_info("output0", TensorProto.FLOAT, ["batch", (SIZE // STRIDE) ** 2, 6])])
    g.name = "yolo_v10"
    onnx.checker.check_model(m)
    return m


def main() -> None:
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "data", "detect")
    os.makedirs(out, exist_ok=True)
    onnx.save(model(False, 8), os.path.join(out, "yolo_v8.onnx"))
    onnx.save(model(True, 5), os.path.join(out, "yolo_v5.onnx"))
    onnx.save(final_rows(10), os.path.join(out, "yolo_v10.onnx"))


if __name__ == "__main__":
    main()
