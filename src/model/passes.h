#pragma once
// The graph passes that prepare_graph (model/prepare.h) runs, in its order, from a loaded graph to
// the one an engine runs (model/ internal; tests call them one by one).  Loading has already
// rewritten every op into one spelling (canonicalize_graph, model/canonicalize.h); a static-batch
// model is taken to the job's batch by adapt_batch (model/batch_adapt.h) before the last inference.
#include "model/graph.h"

namespace sluice {

// Constants and shapes, alternating until a round changes nothing (model/fold_constants.cpp):
// folding a Shape node needs its input's static shape, and folded values let inference reach further.
void fold_constants(Graph& g);
// Fills g.values with every tensor whose type and static shape can be known now, and skips the rest.
void infer_known_shapes(Graph& g);
// Fills g.values for every tensor; throws InputError on an unknown or inconsistent shape.
void infer_shapes(Graph& g);

// Simplification and fusion (model/fuse.cpp, model/fuse_norm.cpp).
void remove_identities(Graph& g);
void fold_batchnorm(Graph& g);
void fuse_convolutions(Graph& g);
// Patch embeddings (a convolution whose kernel equals its stride, on a few channels) as a permutation
// and one MatMul (model/fuse_patches.cpp); returns how many.  SLUICE_PATCH_GEMM=0 turns it off.
int fuse_patch_convolutions(Graph& g);
// Transpose chains composed into one permutation or a view, and LayerScale Muls folded into the
// matrix product before them (model/fuse_layouts.cpp); each returns how many.
// SLUICE_CANCEL_TRANSPOSES=0 and SLUICE_FOLD_SCALE=0 turn them off.
int cancel_transposes(Graph& g);
// [N, L, C] <-> [N, C, H, W] changes (Transpose (0, 2, 1) and a Reshape) respelled as a Reshape and
// a 4-D Transpose, which the CUDA engine's channels-last tensors take as views
// (model/fuse_layouts.cpp); returns how many.  SLUICE_SEQUENCE_VIEWS=0 turns it off.
int sequence_image_views(Graph& g);
// A Gelu behind a convolution's output (through single-use Transposes and Reshapes) fused into it
// as FusedConv's activation (model/fuse_layouts.cpp); returns how many.  Only with SLUICE_FUSE_CONV_GELU=1.
int fuse_conv_gelu(Graph& g);
int fold_layer_scales(Graph& g);
// Pads of nothing removed (model/fuse_layouts.cpp); returns how many.  SLUICE_DROP_EMPTY_PADS=0 keeps them.
int drop_empty_pads(Graph& g);
void fuse_transformer_patterns(Graph& g);  // LayerNormalization and Gelu from their element-wise spellings
// Scaled dot-product attention chains into sluice.Attention (model/fuse_attention.cpp); returns how
// many were fused.  SLUICE_FUSE_ATTENTION=0 turns it off.
int fuse_attention(Graph& g);
// Transposes that keep the last axis moved through row-wise ops (MatMul by a constant, bias, LayerNorm,
// element-wise; a Gemm between Reshapes) to cancel against their inverse or to join the views that
// attention_layout reads (torchvision's sequence-first attention; model/push_transposes.cpp);
// returns how many moved.  SLUICE_PUSH_TRANSPOSES=0 turns it off.
int push_transposes(Graph& g);
// sluice.Attention reading q, k, v and writing y through strided views of the tensors around the
// exporters' Reshape/Transpose/Split chains (layout "strided", model/attention_layout.cpp); returns
// how many.  SLUICE_ATTENTION_LAYOUT=0 turns it off.
int attention_layout(Graph& g);
void eliminate_dead_nodes(Graph& g);
// torch.export's as_strided (Reshape to 1-D, then Gather at constant offsets) respelled as a Reshape,
// or a Reshape to rows and a Gather within each row, when its offsets are those forms
// (model/batch_adapt.cpp); returns how many.  A fixed-batch model's batch trace follows them.
int respell_flat_gathers(Graph& g);

}  // namespace sluice
