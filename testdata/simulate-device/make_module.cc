// make_module JSON TARGET OUT [--unverified]: turns a readable module JSON
// (which may omit its target) into a binary module, with the target preset
// or JSON file TARGET filled in, so that test programs stay small and
// reviewable. A device program without code sizes gets them, with every
// exchange schedule and repeat update it lacks, as emit-device would write
// them (kernels::CompleteProgram). --unverified writes it without the
// verifier, for the bad inputs of the verifier's own tests.

#include <iostream>
#include <string>

#include "formats/ir.h"
#include "kernels/exchange_schedule.h"

int main(int argc, char** argv) {
  using tilec::Status;
  const bool unverified = argc == 5 && std::string(argv[4]) == "--unverified";
  if (argc != 4 && !unverified) {
    std::cerr << "usage: make_module JSON TARGET OUT [--unverified]\n";
    return 2;
  }
  const std::string path = argv[1];
  std::string json, bytes;
  Status s = tilec::ir::ReadFile(path, &json);
  if (s.ok()) s = tilec::ir::ModuleFromJson(json, path, &bytes);
  tilec::fb::ModuleT module;
  if (s.ok()) {
    tilec::fb::GetModule(bytes.data())->UnPackTo(&module);
    if (!module.target) {
      module.target = std::make_unique<tilec::fb::TargetT>();
      s = tilec::ir::LoadTarget(argv[2], module.target.get());
    }
  }
  if (s.ok() && module.program && module.program->code.empty()) {
    s = tilec::kernels::CompleteProgram(*module.target, module.program.get());
  }
  if (s.ok() && unverified) {
    flatbuffers::FlatBufferBuilder builder;
    builder.Finish(tilec::fb::Module::Pack(builder, &module),
                   tilec::ir::kFileIdentifier);
    s = tilec::ir::WriteFileAtomically(
        argv[3], std::string(reinterpret_cast<const char*>(
                                 builder.GetBufferPointer()),
                             builder.GetSize()));
  } else if (s.ok()) {
    s = tilec::ir::WriteModule(module, module.producer, argv[3]);
  }
  if (!s.ok()) {
    std::cerr << "make_module: " << s.message() << "\n";
    return s.exit_code();
  }
  return 0;
}
