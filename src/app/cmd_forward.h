#pragma once
// `sluice forward`: one forward pass of a model on a .npy batch, each graph output written to its own
// .npy file.  A debugging tool: the CPU engine's outputs here are what the op tests compare with
// ONNX Runtime, and the cuda engine's with the CPU engine's.
#include <string>

namespace CLI {
class App;
}

namespace sluice {

struct ForwardOptions {
  std::string model;              // .onnx file
  std::string input;              // .npy batch [B, ...], float32 or uint8
  std::string outdir;             // one <output>.npy per graph output
  std::string device = "cpu";     // cpu | cuda
  std::string precision = "fp32"; // fp32 | tf32 | fp16 | bf16
  std::string static_batch = "auto";  // a static-batch model: auto | respecialize | sub-batch
  bool no_fuse = false;           // skip BatchNorm folding and Conv fusion
  int threads = 0;                // cpu engine threads (0: all cores)
};

void add_forward_command(CLI::App& app);

// Runs the command; prints one line per output (name, dtype, shape) to stdout.  Throws
// sluice::Error (InputError for a bad model or input file).
void forward_command(const ForwardOptions& o);

// The file name an output is written to: characters outside [A-Za-z0-9_.-] become '_'.
std::string output_file_name(const std::string& output_name);

}  // namespace sluice
