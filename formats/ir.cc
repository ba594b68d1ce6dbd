#include "formats/ir.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <new>
#include <optional>
#include <sstream>
#include <vector>

#include "flatbuffers/idl.h"
#include "flatbuffers/reflection.h"
#include "formats/allocator.h"
#include "formats/embedded.h"
#include "formats/target.h"
#include "glog/logging.h"

namespace tilec::ir {
namespace {

const EmbeddedFile* FindEmbedded(const std::string& name) {
  for (int i = 0; i < kEmbeddedFileCount; ++i) {
    if (name == kEmbeddedFiles[i].name) return &kEmbeddedFiles[i];
  }
  return nullptr;
}

Status ParseWithSchema(const std::string& root, const std::string& json,
                       const std::string& name, flatbuffers::Parser* parser) {
  parser->opts.strict_json = false;
  if (!parser->Parse(SchemaText())) {
    return Status::Internal("built-in schema does not parse: " +
                            parser->error_);
  }
  if (!parser->SetRootType(root.c_str())) {
    return Status::Internal("schema has no table " + root);
  }
  if (!parser->Parse(json.c_str())) {
    std::string error = parser->error_;
    // flatc's messages span lines; keep the one-line convention.
    for (char& c : error) {
      if (c == '\n') c = ' ';
    }
    return Status::BadInput(name + ": not a valid " + root + " JSON: " + error);
  }
  return Status::Ok();
}

// The schema as FlatBuffers reflection data, parsed once from the embedded
// text.
const reflection::Schema& ReflectionSchema() {
  static const std::string* const bfbs = [] {
    flatbuffers::Parser parser;
    CHECK(parser.Parse(SchemaText())) << parser.error_;
    parser.Serialize();
    return new std::string(
        reinterpret_cast<const char*>(parser.builder_.GetBufferPointer()),
        parser.builder_.GetSize());
  }();
  return *reflection::GetSchema(bfbs->data());
}

// "tilec.fb.Value" -> "Value", as the schema file spells it.
std::string UnqualifiedName(const flatbuffers::String& name) {
  const std::string full = name.str();
  return full.substr(full.rfind('.') + 1);
}

bool HasEightByteElements(reflection::BaseType type) {
  return type == reflection::Long || type == reflection::ULong ||
         type == reflection::Double;
}

// Per object of the schema: whether a table of it can reach a vector of
// 8-byte elements through its fields. A table that cannot (a Transfer, a
// Destination) or a struct is not walked: a whole model's program has
// millions of them.
const std::vector<bool>& ReachesEightByteVectors() {
  static const std::vector<bool>* const reaches = [] {
    const reflection::Schema& schema = ReflectionSchema();
    const auto& objects = *schema.objects();
    auto* r = new std::vector<bool>(objects.size(), false);
    // The least fixpoint: true once a field reaches such a vector.
    for (bool changed = true; changed;) {
      changed = false;
      for (flatbuffers::uoffset_t o = 0; o < objects.size(); ++o) {
        if ((*r)[o]) continue;
        for (const reflection::Field* field : *objects.Get(o)->fields()) {
          const reflection::Type& type = *field->type();
          const bool eight = type.base_type() == reflection::Vector &&
                             HasEightByteElements(type.element());
          const bool through = (type.base_type() == reflection::Obj ||
                                (type.base_type() == reflection::Vector &&
                                 type.element() == reflection::Obj)) &&
                               (*r)[static_cast<size_t>(type.index())];
          if (eight || through) {
            (*r)[o] = true;
            changed = true;
            break;
          }
        }
      }
    }
    return r;
  }();
  return *reaches;
}

// FlatBuffers 2.0.8's verifier checks only the 4-byte length prefix of a
// vector, so a [long] vector may start 4 bytes off its alignment and every
// read of it is a misaligned load (the ir fuzzer's UBSan finding). The
// schema says which vectors hold 8-byte elements: walk every table that can
// reach one and check them, before anything reads the buffer.
Status CheckVectorAlignment(const reflection::Schema& schema, size_t object,
                            const flatbuffers::Table& table,
                            const uint8_t* buffer, const std::string& name) {
  const std::vector<bool>& reaches = ReachesEightByteVectors();
  const reflection::Object& type_of_table =
      *schema.objects()->Get(static_cast<flatbuffers::uoffset_t>(object));
  for (const reflection::Field* field : *type_of_table.fields()) {
    const reflection::Type& type = *field->type();
    const size_t index = static_cast<size_t>(type.index());
    if (type.base_type() == reflection::Obj && reaches[index]) {
      const flatbuffers::Table* sub = flatbuffers::GetFieldT(table, *field);
      if (sub == nullptr) continue;
      TILEC_RETURN_IF_ERROR(
          CheckVectorAlignment(schema, index, *sub, buffer, name));
    }
    if (type.base_type() != reflection::Vector) continue;
    const flatbuffers::VectorOfAny* vector =
        flatbuffers::GetFieldAnyV(table, *field);
    if (vector == nullptr) continue;
    if (HasEightByteElements(type.element()) &&
        (vector->Data() - buffer) % 8 != 0) {
      return Status::BadInput(
          name + ": corrupt IR: " + UnqualifiedName(*type_of_table.name()) +
          "." + field->name()->str() + " holds 8-byte elements at byte " +
          std::to_string(vector->Data() - buffer) + ", not 8-byte aligned");
    }
    if (type.element() != reflection::Obj || !reaches[index]) continue;
    for (flatbuffers::uoffset_t i = 0; i < vector->size(); ++i) {
      TILEC_RETURN_IF_ERROR(CheckVectorAlignment(
          schema, index,
          *flatbuffers::GetAnyVectorElemPointer<const flatbuffers::Table>(
              vector, i),
          buffer, name));
    }
  }
  return Status::Ok();
}

// The index of the schema's root table among its objects.
size_t RootObject(const reflection::Schema& schema) {
  const auto& objects = *schema.objects();
  for (flatbuffers::uoffset_t o = 0; o < objects.size(); ++o) {
    if (objects.Get(o) == schema.root_table()) return o;
  }
  LOG(FATAL) << "the embedded schema's root table is not among its objects";
}

}  // namespace

std::string DisplayName(const std::string& path) {
  return path == "-" ? "<stdin>" : path;
}

std::string DirectoryOf(const std::string& path) {
  if (path == "-") return ".";
  std::string target = path;
  if (char* real = realpath(path.c_str(), nullptr)) {
    target = real;
    free(real);
  }
  const size_t slash = target.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : target.substr(0, slash);
}

std::string EscapeForMessage(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  return out;
}

const char* SchemaText() { return FindEmbedded("tilec.fbs")->text; }

Status ParseModule(std::string_view bytes, const std::string& name,
                   fb::ModuleT* module) {
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  if (reinterpret_cast<uintptr_t>(data) % 8 != 0) {
    // Alignment inside a buffer is relative to its start: read a copy whose
    // start is aligned as the heap aligns it.
    const std::string copy(bytes);
    return ParseModule(std::string_view(copy), name, module);
  }
  if (bytes.empty()) return Status::BadInput(name + ": empty file, not tilec IR");
  if (bytes.size() < 8) {
    return Status::BadInput(name + ": truncated: " +
                            std::to_string(bytes.size()) +
                            " bytes is too short for tilec IR");
  }
  if (!flatbuffers::BufferHasIdentifier(data, kFileIdentifier)) {
    return Status::BadInput(
        name + ": not tilec IR: file identifier \"" +
        EscapeForMessage(std::string_view(bytes.data() + 4, 4)) +
        "\", expected \"" + kFileIdentifier + "\"");
  }
  // Large device programs hold many tables; depth stays small.
  flatbuffers::Verifier verifier(data, bytes.size(), /*max_depth=*/64,
                                 /*max_tables=*/1u << 30);
  if (!fb::VerifyModuleBuffer(verifier)) {
    return Status::BadInput(
        name + ": corrupt IR: FlatBuffers verification failed (" +
        std::to_string(bytes.size()) + " bytes; truncated or damaged)");
  }
  const reflection::Schema& schema = ReflectionSchema();
  TILEC_RETURN_IF_ERROR(CheckVectorAlignment(
      schema, RootObject(schema), *flatbuffers::GetAnyRoot(data), data, name));
  const fb::Module* root = fb::GetModule(data);
  uint32_t version = root->schema_version();
  if (version == 0) {
    return Status::BadInput(name + ": corrupt IR: no schema version");
  }
  if (version > kSchemaVersion) {
    return Status::BadInput(
        name + ": written by a newer tilec: schema version " +
        std::to_string(version) + " (producer \"" +
        (root->producer() ? root->producer()->str() : std::string()) +
        "\"); this build reads versions " +
        std::to_string(kOldestReadableVersion) + " to " +
        std::to_string(kSchemaVersion));
  }
  if (version < kOldestReadableVersion) {
    return Status::BadInput(name + ": schema version " +
                            std::to_string(version) +
                            " is too old to migrate; oldest readable is " +
                            std::to_string(kOldestReadableVersion));
  }
  VLOG(1) << name << ": " << bytes.size() << " bytes, schema version "
          << version << ", producer \""
          << (root->producer() ? root->producer()->str() : std::string())
          << "\"";
  fb::ModuleT unpacked;
  root->UnPackTo(&unpacked);
  TILEC_RETURN_IF_ERROR(MigrateModule(version, &unpacked).WithContext(name));
  TILEC_RETURN_IF_ERROR(VerifyModule(unpacked).WithContext(name));
  *module = std::move(unpacked);
  return Status::Ok();
}

Status ReadModule(const std::string& path, fb::ModuleT* module) {
  if (std::optional<MappedFile> mapped = MappedFile::Open(path)) {
    return ParseModule(mapped->bytes(), DisplayName(path), module);
  }
  std::string bytes;
  TILEC_RETURN_IF_ERROR(ReadFile(path, &bytes));
  return ParseModule(bytes, DisplayName(path), module);
}

std::unique_ptr<fb::ModuleT> CloneModule(const fb::ModuleT& module) {
  flatbuffers::FlatBufferBuilder builder;
  builder.Finish(fb::Module::Pack(builder, &module));
  return std::unique_ptr<fb::ModuleT>(
      fb::GetModule(builder.GetBufferPointer())->UnPack());
}

namespace {

// FlatBuffers builds downward, from the end of its buffer, and by default
// grows into a second buffer it copies into: a device program's bytes
// (hundreds of MB) would be held twice at the last growth. Here each buffer
// ends at the end of its own mapping, so growing moves the old pages to
// the top of a larger mapping (mremap, no copy); only the scratch part at
// the buffer's start is copied.
class MappedAllocator : public flatbuffers::Allocator {
 public:
  uint8_t* allocate(size_t size) override {
    void* map = mmap(nullptr, Mapped(size), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) throw std::bad_alloc();
    return static_cast<uint8_t*>(map) + (Mapped(size) - size);
  }

  void deallocate(uint8_t* p, size_t size) override {
    munmap(p - (Mapped(size) - size), Mapped(size));
  }

  uint8_t* reallocate_downward(uint8_t* old_p, size_t old_size,
                               size_t new_size, size_t in_use_back,
                               size_t in_use_front) override {
    (void)in_use_back;  // at the end of the mapping, where it stays
    uint8_t* new_p = allocate(new_size);
    uint8_t* old_end = old_p + old_size;
    uint8_t* new_end = new_p + new_size;
    void* moved = mremap(old_end - Mapped(old_size), Mapped(old_size),
                         Mapped(old_size), MREMAP_MAYMOVE | MREMAP_FIXED,
                         new_end - Mapped(old_size));
    if (moved == MAP_FAILED) throw std::bad_alloc();
    std::memmove(new_p, new_end - old_size, in_use_front);
    return new_p;
  }

 private:
  static size_t Mapped(size_t size) {
    static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    return (size + page - 1) / page * page;
  }
};

// The fields of Module and DeviceProgram that PackProgramFirst writes out.
constexpr size_t kModuleFields = 10;
constexpr size_t kDeviceProgramFields = 6;

// A vector of `items`' tables as the generated Pack makes it (none when
// empty).
template <typename T>
flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<typename T::TableType>>>
PackEach(flatbuffers::FlatBufferBuilder& fbb,
         const std::vector<std::unique_ptr<T>>& items) {
  if (items.empty()) return 0;
  std::vector<flatbuffers::Offset<typename T::TableType>> offsets(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    offsets[i] = T::TableType::Pack(fbb, items[i].get());
  }
  return fbb.CreateVector(offsets);
}

// CreateDeviceProgram(fbb, program) of tilec_generated.h, call for call;
// with `give_up`, each superstep freed once packed and, every kTrimSteps of
// them, the freed memory given back to the system.
flatbuffers::Offset<fb::DeviceProgram> PackProgram(
    flatbuffers::FlatBufferBuilder& fbb, fb::DeviceProgramT* o, bool give_up) {
  constexpr size_t kTrimSteps = 4;
  auto buffers = PackEach(fbb, o->buffers);
  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<fb::Superstep>>>
      supersteps = 0;
  if (!o->supersteps.empty()) {
    std::vector<flatbuffers::Offset<fb::Superstep>> offsets(
        o->supersteps.size());
    for (size_t i = 0; i < o->supersteps.size(); ++i) {
      offsets[i] = fb::Superstep::Pack(fbb, o->supersteps[i].get());
      if (!give_up) continue;
      o->supersteps[i].reset();
      if (i % kTrimSteps == kTrimSteps - 1) ReleaseFreedMemory();
    }
    supersteps = fbb.CreateVector(offsets);
  }
  auto inputs = PackEach(fbb, o->inputs);
  auto outputs = PackEach(fbb, o->outputs);
  auto repeats = PackEach(fbb, o->repeats);
  auto code = o->code.empty() ? 0 : fbb.CreateVectorOfStructs(o->code);
  return fb::CreateDeviceProgram(fbb, buffers, supersteps, inputs, outputs,
                                 repeats, code);
}

// fb::Module::Pack(fbb, module)'s tables, with the device program packed
// first. FlatBuffers looks each table's vtable up among every distinct one
// written before it, oldest first: the program's millions of tables then
// find theirs among its own few, not behind every layout of the values',
// ops' and decisions' tables (a whole so400m program packed in 0.85 s
// instead of 1.2 s). With `give_up`, the program is freed as it is packed
// (PackProgram), so that a whole model's program (~10^7 control
// instructions) is not held twice, as objects and as bytes, at the peak.
// While the schema's Module and DeviceProgram have just the fields written
// out here (else nullopt: the caller packs as generated).
std::optional<flatbuffers::Offset<fb::Module>> PackProgramFirst(
    flatbuffers::FlatBufferBuilder& fbb, fb::ModuleT* o, bool give_up) {
  if (fb::ModuleTypeTable()->num_elems != kModuleFields ||
      fb::DeviceProgramTypeTable()->num_elems != kDeviceProgramFields) {
    return std::nullopt;
  }
  auto program = o->program ? PackProgram(fbb, o->program.get(), give_up) : 0;
  auto producer = o->producer.empty() ? 0 : fbb.CreateString(o->producer);
  auto model = o->model ? fb::Model::Pack(fbb, o->model.get()) : 0;
  auto target = o->target ? fb::Target::Pack(fbb, o->target.get()) : 0;
  auto values = PackEach(fbb, o->values);
  auto ops = PackEach(fbb, o->ops);
  auto log = PackEach(fbb, o->log);
  auto checkpoint =
      o->checkpoint ? fb::SearchCheckpoint::Pack(fbb, o->checkpoint.get()) : 0;
  auto repeats = PackEach(fbb, o->repeats);
  return fb::CreateModule(fbb, o->schema_version, producer, model, target,
                          values, ops, log, checkpoint, program, repeats);
}

// SerializeModule's work, into `builder`; with `give_up`, the module is
// left empty (its program freed as it is packed: PackProgramFirst).
Status PackModule(const std::string& producer, fb::ModuleT* module,
                  flatbuffers::FlatBufferBuilder* builder,
                  bool give_up = false) {
  module->schema_version = kSchemaVersion;
  module->producer = producer;
  Status verified = VerifyModule(*module);
  if (verified.code() == StatusCode::kInfeasible) return verified;
  if (!verified.ok()) {
    // A tool built something invalid: that is our bug, not the user's.
    return Status::Internal("refusing to write invalid IR: " +
                            verified.message());
  }
  std::optional<flatbuffers::Offset<fb::Module>> packed =
      PackProgramFirst(*builder, module, give_up);
  if (!packed) packed = fb::Module::Pack(*builder, module);
  builder->Finish(*packed, kFileIdentifier);
  if (give_up) *module = fb::ModuleT();
  return Status::Ok();
}

}  // namespace

Status SerializeModule(fb::ModuleT module, const std::string& producer,
                       std::string* bytes) {
  flatbuffers::FlatBufferBuilder builder(1 << 16);
  TILEC_RETURN_IF_ERROR(PackModule(producer, &module, &builder));
  bytes->assign(reinterpret_cast<const char*>(builder.GetBufferPointer()),
                builder.GetSize());
  return Status::Ok();
}

Status WriteModule(fb::ModuleT module, const std::string& producer,
                   const std::string& path) {
  MappedAllocator allocator;
  flatbuffers::FlatBufferBuilder builder(1 << 16, &allocator);
  // The builder holds the module now.
  TILEC_RETURN_IF_ERROR(
      PackModule(producer, &module, &builder, /*give_up=*/true));
  return WriteFileAtomically(
      path, std::string_view(
                reinterpret_cast<const char*>(builder.GetBufferPointer()),
                builder.GetSize()));
}

Status ModuleToJson(const std::string& bytes, std::string* json) {
  flatbuffers::Parser parser;
  parser.opts.strict_json = true;
  parser.opts.indent_step = 2;
  if (!parser.Parse(SchemaText())) {
    return Status::Internal("built-in schema does not parse");
  }
  if (!flatbuffers::GenerateText(parser, bytes.data(), json)) {
    return Status::Internal("cannot render IR as JSON");
  }
  return Status::Ok();
}

Status ModuleFromJson(const std::string& json, const std::string& name,
                      std::string* bytes) {
  flatbuffers::Parser parser;
  TILEC_RETURN_IF_ERROR(ParseWithSchema("Module", json, name, &parser));
  bytes->assign(reinterpret_cast<const char*>(parser.builder_.GetBufferPointer()),
                parser.builder_.GetSize());
  return Status::Ok();
}

Status ParseTargetJson(const std::string& json, const std::string& name,
                       fb::TargetT* target) {
  flatbuffers::Parser parser;
  TILEC_RETURN_IF_ERROR(ParseWithSchema("Target", json, name, &parser));
  flatbuffers::GetRoot<fb::Target>(parser.builder_.GetBufferPointer())
      ->UnPackTo(target);
  TILEC_RETURN_IF_ERROR(
      ValidateTarget(*target).WithContext(name + ": invalid target"));
  return Status::Ok();
}

Status LoadTarget(const std::string& name_or_path, fb::TargetT* target) {
  if (const EmbeddedFile* preset = FindEmbedded(name_or_path + ".json")) {
    return ParseTargetJson(preset->text, "target " + name_or_path, target);
  }
  if (name_or_path.find('/') == std::string::npos &&
      name_or_path.find(".json") == std::string::npos) {
    return Status::BadInput("--target=" + name_or_path +
                            ": unknown target; presets are ipu21 and tiny, "
                            "or give a path to a JSON file");
  }
  std::string json;
  TILEC_RETURN_IF_ERROR(ReadFile(name_or_path, &json));
  return ParseTargetJson(json, name_or_path, target);
}

}  // namespace tilec::ir
