#pragma once
// Where an image lands in the model's input: what the job asks for (--resize, --center-crop,
// --letterbox, --resize-shortest, --pad-value) and, for one image, the plan that follows from it.
// The image inputs (image/) resize by it; `sluice export --original-size` and the detection boxes
// (export/) undo it from the run's record (export/geometry.h).  Here, on the floor below both, so
// that export needs nothing of the image inputs.  The resize filters themselves: image/image.h.
//
// The rules (torchvision.transforms.v2, and Hugging Face's image processors for the shortest edge):
//  - shorter-side resize S: the shorter side becomes S, the longer floor(S * long / short).
//  - center crop HxW: top = round((h - H) / 2), left = round((w - W) / 2) with Python's round
//    (halves to even), as torchvision computes them; a crop larger than the image is padded with
//    the pad (0 by default, as torchvision pads), (H - h) / 2 rows above (rounded down).
//  - letterbox HxW: scale by min(H / h, W / w), the other side floor(side * scale + 0.5), centre
//    ((H - h') / 2 above, (W - w') / 2 left, rounded down), padded.
//  - shortest edge N, max size M (DETR's and YOLOS's image processors, shortest_edge_size below):
//    the shorter side to N unless the longer would then pass M, the image placed top left and
//    padded bottom and right to the model's input, as those processors pad a batch to its largest
//    image (the model's input is Sluice's one batch shape; no pixel mask is fed).
//  Padding has one colour per channel (pad): --pad-value for all three, or with --pad-mean the
//  colour the job's normalization turns into 0, as Hugging Face's processors pad after normalizing.
#include <array>
#include <cstdint>
#include <string>

namespace sluice {

// What the job asks for (--resize, --center-crop, --letterbox, --resize-shortest); out_h x out_w is
// the model's input.
enum class Interpolation { Nearest, Bilinear, Bicubic };
const char* interpolation_name(Interpolation f);

using PadColour = std::array<uint8_t, 3>;

struct PreprocessSpec {
  enum class Resize { Exact, ShorterSide, Letterbox, None, ShortestEdge };
  Interpolation interpolation = Interpolation::Bilinear;
  Resize mode = Resize::Exact;   // Exact: to resize_h x resize_w (aspect not kept); None: as is
  int resize_short = 0;          // ShorterSide: S; ShortestEdge: N
  int max_size = 0;              // ShortestEdge: M, the longest edge (0: none)
  int size_multiple = 0;         // ShortestEdge: both sides rounded down to a multiple of it, YOLOS's rule (0: none)
  int resize_h = 0, resize_w = 0;  // Exact: the resized size (0: out_h x out_w)
  int crop_h = 0, crop_w = 0;    // Exact, ShorterSide, None: center crop (0: none; then the resized size must equal out)
  int out_h = 0, out_w = 0;
  PadColour pad{};               // padding of Letterbox, ShortestEdge and crops larger than the image, per channel
};

// The size DETR's (and YOLOS's) image processor gives an in_h x in_w image for {"shortest_edge": N,
// "longest_edge": M}, as transformers computes it (image_transforms.get_size_with_aspect_ratio, in
// double precision like Python's floats): if the longer side would pass M at a shorter side of N,
// the shorter side becomes round(M * short / long) (halves to even) and the longer
// floor(M * short / long * long / short); else the shorter is N and the longer floor(N * long /
// short); an image whose shorter side already is that size keeps its size.  size_multiple (YOLOS,
// 16): YOLOS's order of the same tests (the width first), then both sides rounded down to a
// multiple of it.  Each side at least 1.
void shortest_edge_size(int in_h, int in_w, const PreprocessSpec& spec, int* out_h, int* out_w);

// Why an in_h x in_w image cannot take the geometry (its ShortestEdge size does not fit the model's
// input: it would lose its bottom or right); "" when it can.  Both image inputs make such an image a
// bad sample.
std::string resize_misfit(int in_h, int in_w, const PreprocessSpec& spec);

// Where one image lands: it is resized to resized_h x resized_w, and output pixel (y, x) takes the
// resized pixel (y + offset_y, x + offset_x); pixels outside the resized image get pad.
// (offsets are negative when the output is larger than the resized image: letterbox, big crops.)
struct ResizePlan {
  int in_h = 0, in_w = 0;
  int resized_h = 0, resized_w = 0;
  int offset_y = 0, offset_x = 0;
  int out_h = 0, out_w = 0;
  PadColour pad{};
  Interpolation interpolation = Interpolation::Bilinear;
};
ResizePlan plan_resize(int in_h, int in_w, const PreprocessSpec& spec);

}  // namespace sluice
