// run-reference: runs a module's graph on the reference executor and writes
// its outputs as .npy files plus a one-line summary per tensor.

#include <gflags/gflags.h>

#include <string>
#include <vector>

#include "formats/ir.h"
#include "sim/inputs.h"
#include "sim/reference.h"
#include "tools/common/tool.h"

DEFINE_string(out_dir, "",
              "Directory for the .npy files (created if missing): "
              "<name>.npy as float32 and <name>.<dtype>.npy with the raw "
              "stored codes (f16, bf16, fp8e4m3, fp8e5m2; none for f32); "
              "graph inputs and outputs in the shape the model declares "
              "(docs/import-onnx.md). Empty: write no arrays, only the "
              "summary.");
DEFINE_bool(all, false,
            "Write and summarize every value, not only the graph outputs.");
DEFINE_string(sidecar_dir, "",
              "Directory that sidecar paths are relative to (default: the "
              "input file's directory, or . for stdin).");
DEFINE_string(inputs, "",
              "Directory with one .npy per graph input, named as "
              "--out_dir names them (<name>.npy), in the model's declared "
              "shape or tilec's rows, float32 or the input's "
              "own dtype (sim/inputs.h). Empty: inputs from their "
              "recorded seeds.");
DEFINE_bool(allow_nonfinite, false,
            "Exit 0 even when an output has NaN or infinite elements (for "
            "tests whose expected outputs are non-finite, e.g. ONNX casts of "
            "NaN); the summary counts them either way.");
DEFINE_int32(threads, 2,
             "Threads for GEMMs and weight generation (results do not "
             "depend on it).");

namespace tilec::tools {
namespace {

Status NonFiniteOutputs(const std::string& path,
                        const kernels::ReferenceResult& result);

Status Run(const std::vector<std::string>& args) {
  std::string path;
  TILEC_RETURN_IF_ERROR(SingleInput(args, &path));
  TILEC_RETURN_IF_ERROR(CheckThreads(FLAGS_threads));
  TILEC_RETURN_IF_ERROR(CheckDirectoryFlag("sidecar_dir", FLAGS_sidecar_dir));
  TILEC_RETURN_IF_ERROR(CheckDirectoryFlag("inputs", FLAGS_inputs));
  TILEC_RETURN_IF_ERROR(CheckOutputs({{"the input", path}}, {{"-o", FLAGS_o}}));
  fb::ModuleT module;
  TILEC_RETURN_IF_ERROR(ir::ReadModule(path, &module));

  kernels::ReferenceOptions options;
  options.sidecar_dir =
      FLAGS_sidecar_dir.empty() ? ir::DirectoryOf(path) : FLAGS_sidecar_dir;
  options.threads = FLAGS_threads;
  options.keep = FLAGS_all ? kernels::ReferenceOptions::Keep::kAll
                           : kernels::ReferenceOptions::Keep::kOutputs;
  if (!FLAGS_inputs.empty()) {
    TILEC_RETURN_IF_ERROR(
        kernels::LoadInputs(module, FLAGS_inputs, &options.provided));
  }
  kernels::ReferenceResult result;
  TILEC_RETURN_IF_ERROR(kernels::RunReference(module, options, &result)
                            .WithContext(ir::DisplayName(path)));

  std::vector<const kernels::ReferenceTensor*> tensors;
  if (FLAGS_all) {
    for (const kernels::ReferenceTensor& t : result.values()) {
      tensors.push_back(&t);
    }
  } else {
    tensors = result.Outputs();
  }
  if (!FLAGS_out_dir.empty()) {
    TILEC_RETURN_IF_ERROR(
        kernels::WriteTensorFiles(tensors, FLAGS_out_dir, nullptr));
  }
  std::string summary;
  for (const kernels::ReferenceTensor* t : tensors) {
    summary += kernels::SummaryLine(*t) + "\n";
  }
  TILEC_RETURN_IF_ERROR(ir::WriteFileAtomically(FLAGS_o, summary));
  if (FLAGS_allow_nonfinite) return Status::Ok();
  return NonFiniteOutputs(path, result);
}

// A graph whose outputs overflow or divide by zero is valid input that
// cannot be computed in its dtypes: exit 3, after the summary (which
// counts the non-finite elements of every tensor) is written.
Status NonFiniteOutputs(const std::string& path,
                        const kernels::ReferenceResult& result) {
  for (const kernels::ReferenceTensor* t : result.Outputs()) {
    const kernels::TensorStats stats = kernels::ComputeStats(t->data);
    if (stats.nonfinite > 0) {
      return Status::Infeasible(
          ir::DisplayName(path) + ": output %" + std::to_string(t->id) +
          " \"" + t->name + "\" has " + std::to_string(stats.nonfinite) +
          " non-finite elements of " + std::to_string(stats.count));
    }
  }
  return Status::Ok();
}

}  // namespace
}  // namespace tilec::tools

int main(int argc, char** argv) {
  auto args = tilec::tools::InitTool(
      argc, argv,
      "run-reference [FILE|-] [--out_dir=DIR] [--all] [-o SUMMARY]: run a "
      "module's graph on the reference executor and write its outputs as "
      ".npy.\nExit 0: done; 2: bad module or flags; 3: an output has "
      "non-finite elements (the summary, written first, counts them).");
  return tilec::tools::RunAndFinish(
      [&] { return tilec::tools::Run(args); });
}
