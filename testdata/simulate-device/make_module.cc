// make_module JSON TARGET OUT: turns a readable module JSON (which may omit
// its target) into a binary module, with the target preset or JSON file
// TARGET filled in, so that test programs stay small and reviewable.

#include <iostream>

#include "formats/ir.h"

int main(int argc, char** argv) {
  using tilec::Status;
  if (argc != 4) {
    std::cerr << "usage: make_module JSON TARGET OUT\n";
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
  if (s.ok()) s = tilec::ir::WriteModule(module, module.producer, argv[3]);
  if (!s.ok()) {
    std::cerr << "make_module: " << s.message() << "\n";
    return s.exit_code();
  }
  return 0;
}
